"""A dockerd found to lack `--validate` (Docker < 23) is recorded in the state directory and not
run again until that binary changes; a record that cannot be trusted counts as none, and a
dockerd that has the flag is asked every time.

Where this host's dockerd lacks the flag (Debian 12's 20.10) the tests run it, through a
wrapper that records each run; elsewhere a script gives 20.10's answer."""

from __future__ import annotations

import json
import os

import pytest
from ....cli_run import cli

from nvdocker2.engines.docker.daemonjson import validate
from nvdocker2.store.probes import Probes

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

# What dockerd 20.10 answers (exit 1).
OLD_ANSWER = "Status: unknown flag: --validate\nSee 'dockerd --help'., Code: 125"


def _lacks_validate(exe: str) -> bool:
    out = validate.run.run([exe, "--validate", "--config-file", "/dev/null"], timeout=20,
                           merge_stderr=True).stdout.decode("utf-8", "replace")
    return "unknown flag" in out and "validate" in out


@pytest.fixture
def fresh_process(monkeypatch):
    """What a later nvdocker2 run knows: only what the state directory holds."""
    def clear() -> None:
        monkeypatch.setattr(validate, "_LACKING", set())
    clear()
    return clear


@pytest.fixture
def old_dockerd(tmp_path):
    """A dockerd without --validate (the real one where it lacks the flag) that notes each run
    in `calls`."""
    calls = tmp_path / "calls"
    exe = tmp_path / "bin" / "dockerd"
    exe.parent.mkdir()
    real = validate.find_dockerd()
    if real and _lacks_validate(real):
        exe.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    else:
        exe.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncat <<"EOF"\n{OLD_ANSWER}\nEOF\n'
                       "exit 1\n")
    exe.chmod(0o755)
    return exe, calls


def _validating(exe, calls) -> None:
    """Replace `exe` in place with a dockerd that has --validate and refuses the file."""
    exe.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                   'echo "unable to configure the Docker daemon: bad key"\nexit 1\n')


def _runs(calls) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.fixture
def cand(tmp_path):
    c = tmp_path / "daemon.json"
    c.write_text("{}")
    return c


def _check(cand, exe, state, **kw):
    return validate.dockerd_validate(cand, dockerd=str(exe), probes=Probes(state), **kw)


def test_a_dockerd_without_validate_is_run_once_then_remembered(
        tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    for _ in range(3):
        fresh_process()
        check = _check(cand, exe, state)
        assert (check.available, check.ok) == (False, True)
    assert _runs(calls) == 1
    record = state / "probes" / "lacking.json"
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    [entry] = json.loads(record.read_text())["lacking"]
    assert (entry["program"], entry["flag"]) == (str(exe), "--validate")


def test_a_dockerd_with_validate_is_asked_every_time_and_never_recorded(
        tmp_path, cand, fresh_process):
    calls = tmp_path / "calls"
    exe = tmp_path / "dockerd"
    real = validate.find_dockerd()
    if real and not _lacks_validate(real):  # Docker >= 23: the real answer
        exe.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
        cand.write_text('{"labels": ["no-equals-sign"]}')
    else:
        _validating(exe, calls)
    exe.chmod(0o755)
    state = tmp_path / "state"
    for n in range(1, 4):
        fresh_process()
        check = _check(cand, exe, state)
        assert (check.available, check.ok) == (True, False)
        assert _runs(calls) == n
    assert not (state / "probes").exists()


def test_a_dockerd_replaced_in_place_is_asked_again(tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    _check(cand, exe, state)
    _validating(exe, calls)  # upgraded to a dockerd that has --validate, same path
    fresh_process()
    check = _check(cand, exe, state)
    assert (check.available, check.ok) == (True, False)
    assert _runs(calls) == 2


def test_a_dockerd_whose_inode_times_changed_is_asked_again(
        tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    _check(cand, exe, state)
    fresh_process()
    exe.chmod(0o755)  # same mode: only the change time moves
    _check(cand, exe, state)
    assert _runs(calls) == 2
    fresh_process()
    _check(cand, exe, state)  # recorded again, with the new identity
    assert _runs(calls) == 2


def test_the_record_is_kept_per_binary_by_its_resolved_path(
        tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    link = tmp_path / "dockerd-link"
    link.symlink_to(exe)
    state = tmp_path / "state"
    _check(cand, link, state)
    fresh_process()
    _check(cand, exe, state)
    assert _runs(calls) == 1


@pytest.mark.parametrize("content", [
    b"not json", b"", b"[]", b'{"lacking": {}}', b'{"lacking": [{"program": 1}]}',
    b'{"lacking": [{"program": "/x", "flag": "--validate", "identity": [1, 2, "3", 4, 5]}]}',
])
def test_a_record_that_does_not_read_counts_as_none_and_is_written_anew(
        tmp_path, cand, old_dockerd, fresh_process, content):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    (state / "probes").mkdir(parents=True, mode=0o700)
    (state / "probes" / "lacking.json").write_bytes(content)
    _check(cand, exe, state)
    fresh_process()
    _check(cand, exe, state)
    assert _runs(calls) == 1


def _planted_record(tmp_path, exe, state):
    """A correct record of `exe`, as a run writes it."""
    _check(tmp_path / "daemon.json", exe, state)
    return (state / "probes" / "lacking.json").read_bytes()


def test_a_symlinked_record_is_not_trusted_nor_written_through(
        tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    good = _planted_record(tmp_path, exe, state)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(good)
    record = state / "probes" / "lacking.json"
    record.unlink()
    record.symlink_to(elsewhere)
    fresh_process()
    check = _check(cand, exe, state)
    assert (check.available, check.ok) == (False, True)
    assert _runs(calls) == 2
    assert record.is_symlink() and elsewhere.read_bytes() == good


def test_a_record_others_can_write_is_not_trusted(tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    _planted_record(tmp_path, exe, state)
    (state / "probes" / "lacking.json").chmod(0o666)
    fresh_process()
    _check(cand, exe, state)
    assert _runs(calls) == 2


@needs_root
def test_a_record_written_by_another_user_is_not_trusted(
        tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    _planted_record(tmp_path, exe, state)
    record = state / "probes" / "lacking.json"
    os.chown(record, 65534, 65534)
    fresh_process()
    _check(cand, exe, state)
    assert _runs(calls) == 2
    assert record.stat().st_uid == 65534  # an untrusted state directory is not written either


def test_a_dry_run_reads_the_record_but_writes_none(tmp_path, cand, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    state = tmp_path / "state"
    _check(cand, exe, state, remember=False)
    assert not state.exists()
    fresh_process()
    _check(cand, exe, state)
    fresh_process()
    _check(cand, exe, state, remember=False)
    assert _runs(calls) == 2


def test_install_runs_a_dockerd_without_validate_once_across_runs(
        tmp_path, monkeypatch, old_dockerd, fresh_process):
    exe, calls = old_dockerd
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    state = tmp_path / "state"
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(state))
    configs = [tmp_path / f"daemon{n}.json" for n in range(3)]
    for cfg in configs:
        cfg.write_text('{"log-level": "info"}\n')

    def install(cfg, *more):
        fresh_process()
        code, out, err = cli("install", "--config", str(cfg), "--reload", "none",
                             "--runtime-path", "/usr/bin/runc", *more)
        assert code == 0, err
        return out

    install(configs[0], "--dry-run")
    assert _runs(calls) == 1 and not state.exists()  # a dry run asks and records nothing
    install(configs[0])
    install(configs[1])
    install(configs[2])
    assert _runs(calls) == 2
    for cfg in configs:
        assert '"nvidia"' in cfg.read_text()
