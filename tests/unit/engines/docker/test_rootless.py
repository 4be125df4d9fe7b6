"""install for a rootless Docker sets `[nvidia-container-cli] no-cgroups = true` in the runtime's
per-user config.toml, in the daemon.json transaction (backed up, journaled, put back with
daemon.json); uninstall undoes exactly that; root's global file is never the one edited."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from .test_transaction import RT, SimulatedDockerd

from nvdocker2.engines import docker as docker_engine
from nvdocker2.engines.docker import rootless
from nvdocker2.errors import BadInput, DockerdRejected
from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal
from nvdocker2.toolkit_config import load

HAND_WRITTEN = b"""\
# my settings for rootless Docker
[nvidia-container-runtime]
log-level = "debug"  # keep this

[nvidia-container-cli]
# cgroups: see below
no-cgroups = false   # was false on purpose
ldconfig = "@/sbin/ldconfig.real"
"""


@pytest.fixture
def paths(tmp_path):
    cfg = tmp_path / "home" / ".config" / "docker" / "daemon.json"
    user = tmp_path / "home" / ".config" / "nvidia-container-runtime" / "config.toml"
    cfg.parent.mkdir(parents=True)
    return cfg, user, tmp_path / "state"


def _install(cfg, user, state, **kw):
    return docker_engine.install(cfg, runtime_path=RT, state=state, user_config=user, **kw)


def test_install_writes_no_cgroups_into_a_new_user_file_and_uninstall_removes_it(paths):
    cfg, user, state = paths
    res = _install(cfg, user, state)
    assert res.changed
    assert user.read_bytes() == b"[nvidia-container-cli]\nno-cgroups = true\n"
    assert oct(user.stat().st_mode & 0o777) == "0o644"
    assert json.loads(cfg.read_text()) == {"runtimes": {"nvidia": {"path": RT}}}
    assert [c.to_json() for c in res.changes][-1] == {
        "key": f"{user}: [nvidia-container-cli] no-cgroups", "action": "added", "after": True}
    # The runtime, rootless, now reads it over the global file.
    assert load(str(cfg.parent / "absent.toml"), {"HOME": str(cfg.parents[2])},
                user=True).cli.no_cgroups is True

    res = docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert res.changed and not cfg.exists()
    assert not user.exists() and not user.parent.exists()  # install made both
    assert Journal(state, cfg).load() == {}


def test_install_keeps_every_other_byte_and_uninstall_puts_the_file_back(paths):
    cfg, user, state = paths
    user.parent.mkdir()
    user.write_bytes(HAND_WRITTEN)
    _install(cfg, user, state)
    assert user.read_bytes() == HAND_WRITTEN.replace(
        b"no-cgroups = false   # was", b"no-cgroups = true   # was")
    # Backed up with daemon.json: one tag for both files of the change.
    backups = Backups(state).all()
    assert {b.config for b in backups} == {str(cfg), str(user)}
    assert Backups(state).read(next(b for b in backups if b.config == str(user))) \
        == HAND_WRITTEN
    _install(cfg, user, state)  # again: nothing to do
    docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert user.read_bytes() == HAND_WRITTEN


def test_a_table_of_its_own_is_removed_but_the_users_other_keys_stay(paths):
    cfg, user, state = paths
    user.parent.mkdir()
    original = b'# mine\n[nvidia-container-runtime]\nlog-level = "error"\n'
    user.write_bytes(original)
    _install(cfg, user, state)
    assert user.read_bytes() == original + b"\n[nvidia-container-cli]\nno-cgroups = true\n"
    docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert user.read_bytes() == original


def test_uninstall_leaves_a_value_someone_changed_since(paths):
    cfg, user, state = paths
    _install(cfg, user, state)
    user.write_bytes(b"[nvidia-container-cli]\nno-cgroups = false\n")
    res = docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert user.read_bytes() == b"[nvidia-container-cli]\nno-cgroups = false\n"
    assert f"{user}: [nvidia-container-cli] no-cgroups is false now, not the true install " \
        "wrote: left as it is" in res.warnings


def test_dockerd_refusing_the_change_puts_both_files_back(paths):
    cfg, user, state = paths
    user.parent.mkdir()
    user.write_bytes(HAND_WRITTEN)
    d = SimulatedDockerd(cfg, refuse_path=RT)
    with pytest.raises(DockerdRejected) as e:
        _install(cfg, user, state, daemon=d)
    assert e.value.exit_code == 4
    assert user.read_bytes() == HAND_WRITTEN and not cfg.exists()


def test_rollback_restores_the_user_file_with_daemon_json(paths):
    cfg, user, state = paths
    user.parent.mkdir()
    user.write_bytes(HAND_WRITTEN)
    _install(cfg, user, state)
    docker_engine.rollback(cfg, state=state)
    assert user.read_bytes() == HAND_WRITTEN and not cfg.exists()


@pytest.mark.parametrize("text", [b"[nvidia-container-cli\n", b"nvidia-container-cli = 1\n",
                                  b'[nvidia-container-cli]\nload-kmods = "no"\n'])
def test_a_user_file_the_runtime_refuses_is_not_edited(paths, text):
    cfg, user, state = paths
    user.parent.mkdir()
    user.write_bytes(text)
    with pytest.raises(BadInput) as e:
        _install(cfg, user, state)
    assert e.value.exit_code == 2 and str(user) in e.value.message
    assert user.read_bytes() == text and not cfg.exists()


def test_a_world_writable_user_file_is_refused_before_anything_is_written(paths):
    cfg, user, state = paths
    user.parent.mkdir()
    user.write_bytes(HAND_WRITTEN)
    user.chmod(0o666)
    with pytest.raises(BadInput) as e:
        _install(cfg, user, state)
    assert e.value.exit_code == 2
    assert e.value.message == (
        f"{user}: refusing this per-user config.toml: {user} is writable by other users (only "
        "a file of yours or root's, that no one else can write, is read; fix it with "
        "chown/chmod go-w, or remove it)")
    assert user.read_bytes() == HAND_WRITTEN and not cfg.exists()


def test_only_a_rootless_users_install_edits_a_user_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    env = {"HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(run)}
    assert rootless.install_path(env, euid=1000) is None  # no rootless dockerd socket
    (run / "docker.sock").touch()
    assert rootless.install_path(env, euid=0) is None  # root: rootful Docker, /etc untouched
    assert rootless.install_path(env, euid=1000) == \
        tmp_path / "home/.config/nvidia-container-runtime/config.toml"
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    assert rootless.install_path(env, euid=1000) == \
        tmp_path / "xdg/nvidia-container-runtime/config.toml"
    assert os.environ.get("XDG_CONFIG_HOME") != env["XDG_CONFIG_HOME"]


def test_dry_run_writes_neither_file(paths):
    cfg, user, state = paths
    res = _install(cfg, user, state, dry_run=True)
    assert "+no-cgroups = true" in res.diff
    assert not user.exists() and not cfg.exists() and not Path(state).exists()
