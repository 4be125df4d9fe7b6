"""Rollback settles the journal entry of the install it undid, so a later uninstall puts
back exactly the bytes before the installs that remain (docs/reference.md §2)."""

from __future__ import annotations

from nvdocker2.engines import docker as docker_engine
from nvdocker2.store.journal import Journal

RT = "/usr/bin/nvidia-container-runtime"
BEFORE = b'{\n  "debug": true\n}\n'


def test_install_rollback_install_uninstall_gives_back_the_bytes_before(tmp_path):
    cfg, state = tmp_path / "daemon.json", tmp_path / "state"
    cfg.write_bytes(BEFORE)
    docker_engine.install(cfg, runtime_path=RT, state=state)
    docker_engine.rollback(cfg, state=state)
    assert cfg.read_bytes() == BEFORE
    assert Journal(state, cfg).load() == {}  # the undone install is forgotten
    docker_engine.install(cfg, runtime_name="nv2", runtime_path=RT, state=state)
    docker_engine.uninstall(cfg, runtime_name="nv2", state=state)
    assert cfg.read_bytes() == BEFORE


def test_rollback_of_the_second_install_keeps_the_first_one_recorded(tmp_path):
    cfg, state = tmp_path / "daemon.json", tmp_path / "state"
    cfg.write_bytes(BEFORE)
    docker_engine.install(cfg, runtime_path=RT, set_default=True, state=state)
    docker_engine.install(cfg, runtime_name="nv2", runtime_path=RT, set_default=True,
                          state=state)
    docker_engine.rollback(cfg, state=state)  # back to the first install alone
    rec = Journal(state, cfg).load()
    assert list(rec["runtimes"]) == ["nvidia"]
    assert rec["default_runtime"]["installed"] == "nvidia"
    docker_engine.uninstall(cfg, state=state)
    assert cfg.read_bytes() == BEFORE
