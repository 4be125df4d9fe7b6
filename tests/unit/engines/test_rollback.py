"""Rollback through the engine transaction: which backups it picks (the engine's own file's,
the newest, or the one named), what it reports, and its refusal when there is none. Driven with
CRI-O's drop-in, whose file is nvdocker2's alone, and with two containerd configs that share
their drop-in (through the CLI, as an operator runs it); no CRI-O or containerd runs here."""

from __future__ import annotations

import json

import pytest
from ..cli_run import cli, engine_env
from ..engines.crio.test_dropin import Service

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request
from nvdocker2.engines.containerd import ContainerdEngine
from nvdocker2.engines.crio import CrioEngine
from nvdocker2.errors import BadInput
from nvdocker2.store.backups import Backups

A = "/usr/bin/nvidia-container-runtime"
TOML_ONLY = "containerd is not installed here: the candidate was checked as TOML only"


@pytest.fixture
def two(tmp_path):
    """Two CRI-O drop-ins (two engines of one name, two files) sharing one state directory."""
    first, second = (tmp_path / d / "99-nvidia.conf" for d in ("one", "two"))
    state = tmp_path / "state"

    def go(dropin, action, backup_id=None):
        if action == "rollback":
            return txn.rollback(CrioEngine(dropin), backup_id, service=Service(), state=state)
        return txn.run(CrioEngine(dropin), action, Request("nvidia", A), service=Service(),
                       state=state)

    return first, second, go


def test_rollback_without_backups_is_refused_with_a_hint(two):
    first, _, go = two
    with pytest.raises(BadInput) as raised:
        go(first, "rollback")
    backups = first.parent.parent / "state" / "backups"
    assert raised.value.message == f"no backups of {first} in {backups}"
    assert raised.value.hint == ("nothing to roll back to; list them with: nvdocker2 backups "
                                 f"--engine crio --config {first}")


def test_rollback_restores_the_newest_transaction_and_says_so(two):
    first, _, go = two
    go(first, "install")
    only_nvidia = first.read_bytes()
    txn.run(CrioEngine(first), "install", Request("nvidia-cdi", A), service=Service(),
            state=first.parent.parent / "state")
    result = go(first, "rollback")
    assert first.read_bytes() == only_nvidia
    assert result.action == "rollback" and result.changed
    assert [(c.key, c.action) for c in result.changes] == [(str(first), "restored")]


def test_rollback_to_a_named_backup(two):
    first, _, go = two
    backup = go(first, "install").backup
    txn.run(CrioEngine(first), "install", Request("nvidia-cdi", A), service=Service(),
            state=first.parent.parent / "state")
    result = go(first, "rollback", backup)
    assert not first.exists()  # that backup holds the state before the first install
    assert [(c.key, c.action, c.after) for c in result.changes] == [(str(first), "restored",
                                                                      backup)]


def test_rollback_restores_the_engines_own_file_only(two):
    first, second, go = two
    go(first, "install")
    go(second, "install")
    kept = second.read_bytes()
    go(first, "rollback")
    assert second.read_bytes() == kept
    assert not first.exists()


# --- two containerd configs in one directory share their drop-in (conf.d/99-nvidia.toml) ------


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """config.toml and other.toml side by side (version 3: both import conf.d/*.toml, so both
    installs write the one drop-in); `go(config, *args)` runs nvdocker2 on that config."""
    engine_env(tmp_path, monkeypatch)
    first, second = tmp_path / "config.toml", tmp_path / "other.toml"
    first.write_bytes(b"version = 3\n# first\n")
    second.write_bytes(b"version = 3\n# second\n")

    def go(config, *args):
        verify = () if args[0] == "backups" else ("--no-verify",)
        return cli(*args, "--engine", "containerd", *verify, "--config", str(config))

    return first, second, tmp_path / "conf.d" / "99-nvidia.toml", go


def _backups(config, go):
    code, out, err = go(config, "backups", "--json")
    assert code == 0, err
    return json.loads(out)["backups"]


def test_rollback_of_a_config_leaves_a_change_of_another_config_to_that_one(shared):
    first, second, dropin, go = shared
    assert go(first, "install", "--runtime-path", "/rt/one", "--allow-missing-runtime")[0] == 0
    after_first = first.read_bytes()
    assert go(second, "install", "--runtime-path", "/rt/two", "--allow-missing-runtime")[0] == 0
    second_now, dropin_now = second.read_bytes(), dropin.read_bytes()
    assert b"/rt/two" in dropin_now and b"conf.d" in second_now
    # A dry run tells first what the rollback would undo in the shared drop-in.
    code, out, err = go(first, "rollback", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["warnings"] == [
        f"{dropin} was changed since by a change of {second} (backup "
        f"{next(b['id'] for b in _backups(second, go) if b['config'] == str(dropin))}): "
        "restoring it undoes that change there too", TOML_ONLY]
    code, out, err = go(first, "rollback")
    assert code == 0, err
    assert first.read_bytes() == b"version = 3\n# first\n" and not dropin.exists()
    assert second.read_bytes() == second_now  # the other config's file is not touched
    assert after_first != first.read_bytes()
    # Rolled back in turn, the other config gets its own change undone: its file as it was,
    # the drop-in as the first install left it, with nothing more to warn about.
    code, out, err = go(second, "rollback", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert second.read_bytes() == b"version = 3\n# second\n"
    assert b"/rt/one" in dropin.read_bytes() and b"/rt/two" not in dropin.read_bytes()
    assert [c["key"] for c in res["changes"]] == [str(second), str(dropin)]


def test_rollback_without_a_warning_when_the_shared_file_is_back(shared):
    first, second, dropin, go = shared
    go(first, "install", "--runtime-path", "/rt/one", "--allow-missing-runtime")
    go(second, "install", "--runtime-path", "/rt/two", "--allow-missing-runtime")
    assert go(second, "rollback")[0] == 0  # the drop-in holds the first install's bytes again
    code, out, err = go(first, "rollback", "--json")
    assert code == 0, err
    assert json.loads(out)["warnings"] == [TOML_ONLY]
    assert first.read_bytes() == b"version = 3\n# first\n" and not dropin.exists()
    assert second.read_bytes() == b"version = 3\n# second\n"


def test_rollback_by_id_of_another_configs_change_is_refused(shared):
    first, second, dropin, go = shared
    go(first, "install", "--runtime-path", "/rt/one", "--allow-missing-runtime")
    go(second, "install", "--runtime-path", "/rt/two", "--allow-missing-runtime")
    before = (first.read_bytes(), second.read_bytes(), dropin.read_bytes())
    theirs = next(b["id"] for b in _backups(second, go) if b["config"] == str(dropin))
    code, out, err = go(first, "rollback", theirs)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: backup {theirs} is of a change of {second}, not of {first}",
        "hint: roll it back with the --config of that change; list them with: nvdocker2 "
        f"backups --engine containerd --config {first}"]
    assert (first.read_bytes(), second.read_bytes(), dropin.read_bytes()) == before


def test_rollback_when_every_backup_is_another_configs_is_refused(tmp_path):
    """The shared drop-in named as the config's file (as a front that knows it does), with
    only the other config's change made."""
    st, first, second = tmp_path / "st", tmp_path / "config.toml", tmp_path / "other.toml"
    first.write_bytes(b"version = 3\n")
    second.write_bytes(b"version = 3\n")
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    txn.run(ContainerdEngine(second, exe="", check=False), "install", Request("nvidia", A),
            service=Service(), state=st)
    kept = (second.read_bytes(), dropin.read_bytes())
    with pytest.raises(BadInput) as raised:
        txn.rollback(ContainerdEngine(first, exe="", check=False), None, service=Service(),
                     state=st, files=[first, dropin])
    assert raised.value.message == (
        f"no change of {first} to roll back: every backup of {first}, {dropin} is of a change "
        f"of {second}")
    assert raised.value.hint == ("list them with: nvdocker2 backups --engine containerd "
                                 f"--config {first}")
    assert (second.read_bytes(), dropin.read_bytes()) == kept
    assert first.read_bytes() == b"version = 3\n"


def test_rollback_to_a_backup_of_another_dropin_is_refused(two):
    first, second, go = two
    go(first, "install")
    theirs = go(second, "install").backup
    kept = (first.read_bytes(), second.read_bytes())
    with pytest.raises(BadInput) as raised:
        go(first, "rollback", theirs)
    assert raised.value.message == (f"backup {theirs} is of {second}, not of a file of {first} "
                                    f"({first})")
    assert raised.value.hint == f"list them with: nvdocker2 backups --engine crio --config {first}"
    assert (first.read_bytes(), second.read_bytes()) == kept


def test_rollback_warns_once_naming_the_newest_change_of_the_other_config(shared):
    first, second, dropin, go = shared
    go(first, "install", "--runtime-path", "/rt/one", "--allow-missing-runtime")
    go(second, "install", "--runtime-path", "/rt/two", "--allow-missing-runtime")
    go(second, "install", "--runtime-path", "/rt/three", "--allow-missing-runtime")
    newest, older, oldest = [b["id"] for b in _backups(second, go) if b["config"] == str(dropin)]
    code, out, err = go(first, "rollback", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["warnings"] == [
        f"{dropin} was changed since by a change of {second} (backup {newest}): "
        "restoring it undoes that change there too", TOML_ONLY]
    assert len({newest, older, oldest}) == 3 and b"/rt/three" in dropin.read_bytes()


def test_rollback_tells_the_configs_apart_by_files_in_backups_that_record_no_config(tmp_path):
    """Backups made before they recorded their config: a change that also changed a file that
    is not this config's is the other config's."""
    st, first, second = tmp_path / "st", tmp_path / "config.toml", tmp_path / "other.toml"
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    dropin.parent.mkdir()
    first.write_bytes(b"version = 3\n# first, installed\n")
    second.write_bytes(b"version = 3\n# second, installed\n")
    dropin.write_bytes(b"version = 3\n# the second's\n")
    backups = Backups(st)
    for config, data, tag in ((first, b"version = 3\n", "1a2b3c4d"), (dropin, None, "1a2b3c4d"),
                              (second, b"version = 3\n# second\n", "5e6f7a8b"),
                              (dropin, b"version = 3\n# the first's\n", "5e6f7a8b")):
        backups.create(config, data, f"install nvidia (containerd) [{tag}]")
    result = txn.rollback(ContainerdEngine(first, exe="", check=False), None, service=Service(),
                          state=st, files=[first, dropin])
    assert first.read_bytes() == b"version = 3\n" and not dropin.exists()
    assert second.read_bytes() == b"version = 3\n# second, installed\n"
    (theirs,) = [b.id for b in backups.all() if b.tag == "5e6f7a8b" and b.config == str(dropin)]
    assert result.warnings == (f"{dropin} was changed since by a change of {second} (backup "
                               f"{theirs}): restoring it undoes that change there too",)
