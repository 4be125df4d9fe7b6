"""`install --mode direct|legacy` edits the runtime's config.toml as a file of the daemon.json
transaction: backed up, journaled (what the key held before), in the dry run's diff, restored
when dockerd rejects the change, undone byte for byte by uninstall and rollback, and refused
before anything is written when another user could have planted the file or its directory."""

from __future__ import annotations

import json
import os
import pwd

import pytest
from .test_transaction import RT, SimulatedDockerd

from nvdocker2.engines import docker as docker_engine
from nvdocker2.errors import BadInput, DockerdRejected
from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal

HAND_WRITTEN = b"""\
# ops: do not reorder
disable-require = false

[nvidia-container-runtime]
# legacy until the driver upgrade
mode = 'legacy'   # see ticket 42
log-level = "info"

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig"
"""
DIRECT = HAND_WRITTEN.replace(b"mode = 'legacy'   #", b'mode = "direct"   #')


@pytest.fixture
def paths(tmp_path):
    etc = tmp_path / "etc"
    (etc / "docker").mkdir(parents=True)
    return etc / "docker" / "daemon.json", etc / "nvidia-container-runtime" / "config.toml", \
        tmp_path / "state"


def _install(cfg, toml, state, mode="direct", **kw):
    return docker_engine.install(cfg, runtime_path=RT, state=state, mode=mode,
                                 mode_config=toml, **kw)


def _uninstall(cfg, state, **kw):
    return docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT], **kw)


def test_install_replaces_only_the_mode_and_journals_its_old_text(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    toml.write_bytes(HAND_WRITTEN)
    res = _install(cfg, toml, state)
    assert toml.read_bytes() == DIRECT
    assert {"key": f"{toml}: [nvidia-container-runtime] mode", "action": "replaced",
            "before": "legacy", "after": "direct"} in [c.to_json() for c in res.changes]
    assert Journal(state, cfg).load()["runtime_mode"] == {
        "path": str(toml), "previous": {"present": True, "value": "legacy"},
        "previous_toml": "'legacy'", "installed": "direct", "file": True, "table": True,
        "dir": True}
    backups = Backups(state).all()
    assert {b.config for b in backups} == {str(cfg), str(toml)}
    assert len({b.tag for b in backups}) == 1  # one transaction
    assert Backups(state).read(next(b for b in backups if b.config == str(toml))) \
        == HAND_WRITTEN

    _uninstall(cfg, state)
    assert toml.read_bytes() == HAND_WRITTEN
    assert not cfg.exists() and Journal(state, cfg).load() == {}


def test_uninstall_removes_the_file_and_directory_install_created(paths):
    cfg, toml, state = paths
    _install(cfg, toml, state)
    assert toml.read_bytes() == b'[nvidia-container-runtime]\nmode = "direct"\n'
    rec = Journal(state, cfg).load()["runtime_mode"]
    assert rec["previous"] == {"present": False} and rec["file"] is False
    assert rec["dir"] is False
    _uninstall(cfg, state)
    assert not toml.exists() and not toml.parent.exists()


def test_a_mode_added_to_an_existing_table_goes_away_again(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    before = b'# keep\n[nvidia-container-runtime]\nlog-level = "info"\n'
    toml.write_bytes(before)
    _install(cfg, toml, state)
    assert toml.read_bytes() == before + b'mode = "direct"\n'
    _uninstall(cfg, state)
    assert toml.read_bytes() == before


def test_dry_run_diffs_both_files_and_writes_nothing(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    toml.write_bytes(HAND_WRITTEN)
    res = _install(cfg, toml, state, dry_run=True)
    assert f"--- a{toml}\n" in res.diff and f"--- a{cfg}\n" in res.diff
    assert "-mode = 'legacy'   # see ticket 42\n+mode = \"direct\"   # see ticket 42\n" \
        in res.diff
    assert toml.read_bytes() == HAND_WRITTEN and not cfg.exists() and not state.exists()


def test_dockerd_rejecting_the_change_restores_config_toml_too(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    toml.write_bytes(HAND_WRITTEN)
    with pytest.raises(DockerdRejected) as e:
        _install(cfg, toml, state, daemon=SimulatedDockerd(cfg, refuse_path=RT))
    assert e.value.exit_code == 4 and "with 1 other file" in e.value.message
    assert toml.read_bytes() == HAND_WRITTEN and not cfg.exists()
    assert Journal(state, cfg).load() == {}


def test_rollback_restores_both_files(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    toml.write_bytes(HAND_WRITTEN)
    cfg.write_bytes(b'{"debug": true}\n')
    _install(cfg, toml, state)
    docker_engine.rollback(cfg, state=state)
    assert toml.read_bytes() == HAND_WRITTEN and cfg.read_bytes() == b'{"debug": true}\n'


def test_a_change_of_the_mode_alone_is_rolled_back_and_uninstalled(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    toml.write_bytes(HAND_WRITTEN)
    docker_engine.install(cfg, runtime_path=RT, state=state)
    installed = cfg.read_bytes()
    res = _install(cfg, toml, state)
    assert res.changed and toml.read_bytes() == DIRECT and cfg.read_bytes() == installed
    docker_engine.rollback(cfg, state=state)
    assert toml.read_bytes() == HAND_WRITTEN and cfg.read_bytes() == installed

    _install(cfg, toml, state)
    _install(cfg, toml, state, mode="legacy")  # what was there before stays recorded
    assert Journal(state, cfg).load()["runtime_mode"]["installed"] == "legacy"
    _uninstall(cfg, state)
    assert toml.read_bytes() == HAND_WRITTEN and not cfg.exists()


def test_uninstall_leaves_a_mode_changed_by_hand_since(paths):
    cfg, toml, state = paths
    _install(cfg, toml, state)
    toml.write_bytes(b'[nvidia-container-runtime]\nmode = "legacy"\n')
    res = _uninstall(cfg, state)
    assert toml.read_bytes() == b'[nvidia-container-runtime]\nmode = "legacy"\n'
    assert any('is "legacy" now, not the "direct" install wrote' in w for w in res.warnings)


def _nobody():
    return pwd.getpwnam("nobody")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to nobody")
def test_a_symlink_another_user_planted_is_refused_before_anything_is_written(paths, tmp_path):
    cfg, toml, state = paths
    toml.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's file\n")
    toml.symlink_to(victim)
    os.lchown(toml, _nobody().pw_uid, _nobody().pw_gid)
    with pytest.raises(BadInput) as e:
        _install(cfg, toml, state)
    assert e.value.exit_code == 2 and f"{toml}: refusing to edit" in e.value.message
    assert f"belongs to uid {_nobody().pw_uid}" in e.value.message
    assert victim.read_bytes() == b"root's file\n" and not cfg.exists()
    assert not (state / "backups").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to nogroup")
def test_a_directory_another_group_can_write_is_refused(paths):
    cfg, toml, state = paths
    toml.parent.mkdir()
    os.chown(toml.parent, 0, _nobody().pw_gid)
    os.chmod(toml.parent, 0o775)
    with pytest.raises(BadInput) as e:
        _install(cfg, toml, state, dry_run=True)
    assert f"{toml.parent} is writable by other users" in e.value.message
    with pytest.raises(BadInput):
        _install(cfg, toml, state)
    assert not toml.exists() and not cfg.exists() and not (state / "backups").exists()


def test_status_shows_the_mode_and_whether_install_set_it(paths, monkeypatch):
    from nvdocker2.engines.docker.status import report

    cfg, toml, state = paths
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(state))
    _install(cfg, toml, state)
    rep = report(cfg, "given", "unix:///nonexistent.sock", json.dumps)
    assert rep.json["runtime_mode"] == {"config": str(toml), "mode": "direct",
                                        "installed": "direct", "matches": True, "error": None}
    assert f'runtime mode: "direct" in {toml} (as install --mode direct set it)' in rep.lines
    toml.write_bytes(b"")
    rep = report(cfg, "given", "unix:///nonexistent.sock", json.dumps)
    assert rep.json["runtime_mode"]["matches"] is False
    assert (f'runtime mode: not set (legacy) in {toml} (install --mode direct set "direct"; '
            "changed since)") in rep.lines
