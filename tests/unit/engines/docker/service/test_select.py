"""--reload auto|systemd|sysv|signal|none and --restart: what is picked, why, and which
combinations are refused before anything is written."""

from __future__ import annotations

import json

import pytest
from ....dockerd_fixtures import FIXTURES, NamedDockerd

from nvdocker2.engines.docker.service.daemon import Dockerd, NoReload
from nvdocker2.engines.docker.service.select import DaemonOptions, make_daemon
from nvdocker2.engines.docker.service.logs import FileLog
from nvdocker2.errors import BadInput, EnvironmentProblem


@pytest.fixture
def stand_in_path(tmp_path, monkeypatch, named_dockerd):
    """systemctl/service/journalctl stand-ins first on PATH, driving `named_dockerd`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("systemctl", "service", "journalctl"):
        (bindir / name).symlink_to(FIXTURES / "systemctl")
    (tmp_path / "dockerd.json").write_text(
        json.dumps({"argv": [], "env": {}, "log": str(tmp_path / "dockerd.log")})
    )
    monkeypatch.setenv("NVD2_DOCKERD_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return bindir


@pytest.fixture
def no_systemd(tmp_path, monkeypatch):
    """A PATH without systemctl."""
    bindir = tmp_path / "empty-bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))


def test_auto_picks_systemd_when_systemd_runs_the_docker_unit(
    stand_in_path, named_dockerd, tmp_path
):
    daemon = make_daemon(DaemonOptions(docker_host=f"unix://{tmp_path}/api.sock"))
    assert isinstance(daemon, Dockerd)
    assert daemon.strategy == "systemd"
    assert daemon.reason == "systemd runs docker.service (systemctl is-active docker)"
    assert daemon.manager.main_pid() == named_dockerd.pid
    daemon.reload()
    assert named_dockerd.hup_count(wait=5) == 1


def test_auto_picks_signal_for_a_dockerd_named_by_the_pidfile(no_systemd, named_dockerd, tmp_path):
    daemon = make_daemon(DaemonOptions(pidfile=named_dockerd.pidfile))
    assert daemon.strategy == "signal"
    assert daemon.reason == (
        f"{named_dockerd.pidfile} names a running dockerd (pid {named_dockerd.pid}); "
        "systemd does not run it"
    )
    daemon.reload()
    assert named_dockerd.hup_count(wait=5) == 1


def test_signal_finds_dockerds_log_through_its_stderr(no_systemd, tmp_path):
    log = tmp_path / "own.log"
    (tmp_path / "sub").mkdir()
    with log.open("ab") as stderr:
        d = NamedDockerd(tmp_path / "sub", stderr=stderr)
    try:
        daemon = make_daemon(DaemonOptions(pidfile=d.pidfile))
        assert isinstance(daemon.log, FileLog) and daemon.log.path == log
    finally:
        d.stop()


def test_auto_with_no_dockerd_and_verify_refuses_before_writing(no_systemd, tmp_path):
    daemon = make_daemon(DaemonOptions(pidfile=tmp_path / "none.pid"))
    assert isinstance(daemon, NoReload) and daemon.strategy == "none" and not daemon.verifies
    with pytest.raises(EnvironmentProblem) as err:
        daemon.check_candidate(tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    assert err.value.exit_code == 3
    assert f"{tmp_path}/none.pid is missing" in err.value.message
    assert "--no-verify" in err.value.hint


def test_auto_with_no_dockerd_and_no_verify_writes_without_reloading(no_systemd, tmp_path):
    daemon = make_daemon(DaemonOptions(pidfile=tmp_path / "none.pid", verify=False))
    daemon.check_candidate(tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    daemon.reload()
    assert daemon.strategy == "none" and not daemon.verifies
    assert daemon.reason == (
        "no running dockerd found: systemd does not run docker.service "
        f"and {tmp_path}/none.pid is missing"
    )


def test_a_stale_pidfile_naming_another_program_is_not_signalled(no_systemd, tmp_path):
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text("1\n")
    daemon = make_daemon(DaemonOptions(pidfile=pidfile, verify=False))
    assert daemon.strategy == "none"
    assert "names no running dockerd" in daemon.reason


@pytest.mark.parametrize("mode", ["signal", "none"])
def test_restart_with_a_mode_that_cannot_restart_is_bad_input(no_systemd, named_dockerd, mode):
    with pytest.raises(BadInput) as err:
        make_daemon(DaemonOptions(mode=mode, restart=True, pidfile=named_dockerd.pidfile))
    assert err.value.exit_code == 2
    assert "--reload systemd or --reload sysv" in err.value.hint


def test_restart_when_auto_finds_only_a_pidfile_is_bad_input(no_systemd, named_dockerd):
    with pytest.raises(BadInput, match="names a running dockerd"):
        make_daemon(DaemonOptions(restart=True, pidfile=named_dockerd.pidfile))


def test_an_unknown_mode_is_bad_input():
    with pytest.raises(BadInput, match="--reload upstart: unknown mode"):
        make_daemon(DaemonOptions(mode="upstart"))


def test_sysv_reloads_through_service(stand_in_path, named_dockerd, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("NVD2_FAKE_CALLS", str(calls))
    daemon = make_daemon(DaemonOptions(mode="sysv", pidfile=named_dockerd.pidfile))
    daemon.reload()
    assert daemon.strategy == "sysv"
    assert calls.read_text() == "service docker reload\n"
    assert named_dockerd.hup_count(wait=5) == 1


def test_setups_give_the_pidfile_socket_and_unit_of_dockerd_facts(tmp_path):
    from pathlib import Path

    from nvdocker2.engines.docker.service.select import detect_setup

    rootful = detect_setup(Path("/etc/docker/daemon.json"), {}, euid=0)
    assert (rootful.name, rootful.unit, rootful.user) == ("rootful", "docker", False)
    assert (rootful.pidfile, rootful.docker_host) == (Path("/var/run/docker.pid"), None)

    snap = detect_setup(Path("/var/snap/docker/current/config/daemon.json"), {}, euid=0)
    assert (snap.name, snap.unit, snap.pidfile) == (
        "snap",
        "snap.docker.dockerd",
        Path("/run/snap.docker/docker.pid"),
    )

    (tmp_path / "docker.sock").touch()
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    rootless = detect_setup(Path("/home/u/.config/docker/daemon.json"), env, euid=1000)
    assert (rootless.name, rootless.unit, rootless.user) == ("rootless", "docker", True)
    assert rootless.pidfile == tmp_path / "docker.pid"
    assert rootless.docker_host == f"unix://{tmp_path}/docker.sock"
    assert detect_setup(None, env, euid=0).name == "rootful"


def test_a_user_unit_is_driven_with_systemctl_user(stand_in_path, tmp_path, monkeypatch):
    from nvdocker2.engines.docker.service.managers import SystemdManager

    calls = tmp_path / "calls"
    monkeypatch.setenv("NVD2_FAKE_CALLS", str(calls))
    manager = SystemdManager("docker", user=True)
    assert manager.is_active()
    manager.reload()
    assert calls.read_text().splitlines() == [
        "systemctl --user is-active --quiet docker",
        "systemctl --user reload docker",
    ]
    assert manager.describe() == "systemctl --user is-active docker"


def test_signal_with_a_pidfile_naming_no_dockerd_is_refused_before_writing(no_systemd, tmp_path):
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text("1\n")  # not a dockerd
    daemon = make_daemon(DaemonOptions(mode="signal", pidfile=pidfile, verify=False))
    with pytest.raises(EnvironmentProblem) as err:
        daemon.check_candidate(tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    assert err.value.message == f"{pidfile} names no running dockerd, so there is nothing to signal"
