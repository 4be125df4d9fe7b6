"""`nvdocker2 install` / `uninstall` end to end: the real CLI, a real private dockerd, and what
dockerd reports through the Engine API afterwards (docs/reference.md §2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from dockerd_cli import (
    INSTALL,
    RUNTIME,
    make_stand_ins,
    nvdocker2,
    reloads,
    sleeper,
    state,
    systemd_env,
    tcp_host,
)


@pytest.fixture
def stand_ins(tmp_path):
    return make_stand_ins(tmp_path)


def test_install_makes_dockerd_report_the_runtime_and_a_running_container_keeps_running(dockerd):
    cid = sleeper(dockerd)
    before = state(dockerd, cid)
    count = reloads(dockerd)
    out = nvdocker2(dockerd, *INSTALL)
    assert out.returncode == 0, out.stderr
    assert dockerd.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert dockerd.info()["DefaultRuntime"] == "runc"
    assert "verified: yes, dockerd reports the change" in out.stdout
    assert f"reload mode signal: {dockerd.pidfile} names a running dockerd" in out.stdout
    assert reloads(dockerd) == count + 1
    assert state(dockerd, cid) == before and before.startswith("true ")


def test_set_default_then_uninstall_restores_the_default_and_the_file(dockerd):
    original = dockerd.config_file.read_bytes()
    out = nvdocker2(dockerd, *INSTALL, "--set-default", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["changed"], result["reload"], result["verified"]) == (True, "signal", True)
    assert dockerd.info()["DefaultRuntime"] == "nvidia"

    out = nvdocker2(dockerd, "uninstall")
    assert out.returncode == 0, out.stderr
    info = dockerd.info()
    assert "nvidia" not in info["Runtimes"]
    assert info["DefaultRuntime"] == "runc"
    assert dockerd.config_file.read_bytes() == original


def test_an_idempotent_rerun_does_not_signal_dockerd(dockerd):
    assert nvdocker2(dockerd, *INSTALL).returncode == 0
    written = dockerd.config_file.read_bytes()
    count = reloads(dockerd)
    out = nvdocker2(dockerd, *INSTALL, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["changed"] is False
    assert json.loads(out.stdout)["reload"] == "none"
    assert reloads(dockerd) == count
    assert dockerd.config_file.read_bytes() == written


def test_a_flag_conflict_the_installer_can_see_exits_2_before_writing(make_dockerd):
    daemon = make_dockerd(extra_args=["--default-runtime=runc"])
    original = daemon.config_file.read_bytes()
    # The dry run runs the same checks and fails as the apply does, touching nothing (ref. §10).
    dry = nvdocker2(daemon, *INSTALL, "--set-default", "--dry-run", "--json")
    assert dry.returncode == 2 and json.loads(dry.stdout)["exit_code"] == 2
    assert not Path(os.environ["NVDOCKER2_STATE_DIR"]).exists()
    out = nvdocker2(daemon, *INSTALL, "--set-default")
    assert out.returncode == 2 and out.stderr == dry.stderr
    assert out.stderr.startswith(
        f'error: {daemon.config_file}: "default-runtime" (flag --default-runtime)'
    )
    assert "hint: remove the key from daemon.json, or the flag" in out.stderr
    assert daemon.config_file.read_bytes() == original
    assert reloads(daemon) == 0
    assert not (Path(os.environ["NVDOCKER2_STATE_DIR"]) / "backups").exists() or not any(
        (Path(os.environ["NVDOCKER2_STATE_DIR"]) / "backups").iterdir()
    )


def test_a_conflict_the_installer_cannot_see_is_rolled_back_exit_4(make_dockerd, stand_ins):
    # systemd runs dockerd, but its MainPID cannot be read and its API is reached over tcp
    # (no SO_PEERCRED): dockerd's flags are unknown, and it refuses the file on reload
    # ("default-runtime" is also its --default-runtime flag).
    flag, tcp = tcp_host()
    daemon = make_dockerd(extra_args=["--default-runtime=runc", flag])
    cid = sleeper(daemon)
    before = state(daemon, cid)
    original = daemon.config_file.read_bytes()
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_HIDE_PID="1")
    out = nvdocker2(
        daemon,
        *INSTALL,
        "--set-default",
        "--docker-host",
        tcp,
        env=env,
        daemon_flags=False,
    )
    assert out.returncode == 4, out.stderr
    assert (
        "the following directives are specified both as a flag and in the configuration "
        "file: default-runtime" in out.stderr
    )
    assert "previous file was restored" in out.stderr
    assert daemon.config_file.read_bytes() == original
    assert daemon.docker("version").returncode == 0
    assert "nvidia" not in daemon.info()["Runtimes"]
    assert state(daemon, cid) == before


NO_SYSTEMD = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def test_dockerd_not_running_with_verify_exits_3_with_a_hint(tmp_path):
    config = tmp_path / "daemon.json"
    config.write_bytes(b"{}\n")
    where = [
        "--pidfile",
        str(tmp_path / "docker.pid"),
        "--docker-host",
        f"unix://{tmp_path}/d.sock",
    ]
    out = nvdocker2(None, *INSTALL, "--config", str(config), *where, env=NO_SYSTEMD)
    assert out.returncode == 3
    assert out.stderr.splitlines()[0].startswith("error: no running dockerd found")
    assert "hint: start dockerd (systemctl start docker)" in out.stderr
    assert "--no-verify" in out.stderr
    assert config.read_bytes() == b"{}\n"


def test_dockerd_not_running_with_no_verify_writes_and_says_what_to_run(tmp_path):
    config = tmp_path / "daemon.json"
    where = ["--pidfile", str(tmp_path / "docker.pid")]
    out = nvdocker2(
        None, *INSTALL, "--config", str(config), "--no-verify", *where, "--json", env=NO_SYSTEMD
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["changed"], result["reload"], result["verified"]) == (True, "none", False)
    assert any(
        n.startswith("dockerd was not reloaded; to apply the change run:") for n in result["notes"]
    )
    assert any(n.startswith("reload mode none: no running dockerd found") for n in result["notes"])
    assert json.loads(config.read_text())["runtimes"]["nvidia"] == {"path": RUNTIME}
