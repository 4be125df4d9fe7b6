"""--reload systemd / sysv and --restart through the CLI, with the systemctl stand-in on PATH
driving a private dockerd."""

from __future__ import annotations

import json

import pytest
from dockerd_cli import (
    INSTALL,
    RUNTIME,
    make_stand_ins,
    nvdocker2,
    reloads,
    systemd_env,
    tcp_host,
)


@pytest.fixture
def stand_ins(tmp_path):
    return make_stand_ins(tmp_path)


def test_auto_uses_systemd_when_it_runs_docker_and_verifies(dockerd, stand_ins, tmp_path):
    daemon = dockerd
    count = reloads(daemon)
    calls = tmp_path / "calls"
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_CALLS=str(calls))
    out = nvdocker2(
        daemon,
        *INSTALL,
        "--docker-host",
        daemon.host,
        "--json",
        env=env,
        daemon_flags=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["reload"], result["verified"]) == ("systemd", True)
    assert (
        "reload mode systemd: systemd runs docker.service (systemctl is-active docker)"
        in result["notes"]
    )
    assert "systemctl reload docker" in calls.read_text().splitlines()
    assert daemon.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert reloads(daemon) == count + 1


def test_sysv_reloads_through_service(dockerd, stand_ins, tmp_path):
    daemon = dockerd
    calls = tmp_path / "calls"
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_CALLS=str(calls))
    out = nvdocker2(daemon, *INSTALL, "--reload", "sysv", env=env)
    assert out.returncode == 0, out.stderr
    assert "service docker reload" in calls.read_text().splitlines()
    assert daemon.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}


def test_restart_gives_a_new_dockerd_and_verification_waits_for_it(
    make_dockerd, stand_ins, tmp_path
):
    daemon = make_dockerd()
    # `sleep` as PID 1 ignores SIGTERM: let dockerd kill it after 1 s instead of 10.
    daemon.docker("run", "-d", "--network=none", "--stop-timeout=1", daemon.image, "sleep", "1000")
    old_pid = daemon.pid
    # systemctl returns at once and dockerd only starts 2 s later.
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_NO_WAIT="1", NVD2_FAKE_START_DELAY="2")
    out = nvdocker2(
        daemon,
        *INSTALL,
        "--set-default",
        "--restart",
        "--reload",
        "systemd",
        "--json",
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verified"] is True
    assert daemon.pid != old_pid
    info = daemon.info()
    assert info["Runtimes"]["nvidia"] == {"path": RUNTIME} and info["DefaultRuntime"] == "nvidia"
    assert "waiting for dockerd" in out.stderr and "not answering" in out.stderr
    assert (
        "warning: live-restore is off: restarting dockerd stops the 1 running container(s)"
        in out.stderr
    )
    assert reloads(daemon) == 0


def test_restart_with_signal_reload_is_refused_before_writing(dockerd):
    original = dockerd.config_file.read_bytes()
    out = nvdocker2(dockerd, *INSTALL, "--restart", "--reload", "signal")
    assert out.returncode == 2
    assert out.stderr.startswith("error: --restart: --reload signal")
    assert dockerd.config_file.read_bytes() == original


def test_uninstall_with_restart_takes_the_runtime_out_of_dockerd(make_dockerd, stand_ins):
    daemon = make_dockerd()
    env = systemd_env(stand_ins, daemon)
    assert (
        nvdocker2(
            daemon,
            *INSTALL,
            "--set-default",
            "--reload",
            "systemd",
            env=env,
        ).returncode
        == 0
    )
    pid = daemon.pid
    out = nvdocker2(daemon, "uninstall", "--restart", "--reload", "systemd", env=env)
    assert out.returncode == 0, out.stderr
    info = daemon.info()
    assert "nvidia" not in info["Runtimes"] and info["DefaultRuntime"] == "runc"
    assert daemon.pid != pid
    assert daemon.config_file.read_bytes() == b"{}\n"


def test_a_restart_dockerd_refuses_is_rolled_back_with_the_journal_words(make_dockerd, stand_ins):
    # dockerd cannot start with the new file ("default-runtime" is also its flag) and its
    # MainPID is hidden and its API is reached over tcp (no SO_PEERCRED), so only the
    # restart shows it: exit 4, old file, dockerd up again.
    flag, tcp = tcp_host()
    daemon = make_dockerd(extra_args=["--default-runtime=runc", flag])
    original = daemon.config_file.read_bytes()
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_HIDE_PID="1")
    out = nvdocker2(
        daemon,
        *INSTALL,
        "--set-default",
        "--restart",
        "--docker-host",
        tcp,
        env=env,
        daemon_flags=False,
    )
    assert out.returncode == 4, out.stderr
    assert "unable to configure the Docker daemon with file" in out.stderr
    assert "default-runtime: (from flag: runc, from file: nvidia)" in out.stderr
    assert daemon.config_file.read_bytes() == original
    assert daemon.docker("version").returncode == 0
    assert daemon.info()["DefaultRuntime"] == "runc"


def test_install_reloads_a_file_dockerd_is_not_running_yet(dockerd):
    """An earlier run killed between its rename and its reload leaves the file right and dockerd
    on the old one: the next install writes nothing but reloads, and only then says verified."""
    daemon = dockerd
    written = nvdocker2(daemon, *INSTALL, "--set-default", "--reload", "none", "--json")
    assert written.returncode == 0, written.stderr
    data = daemon.config_file.read_bytes()
    assert "nvidia" not in daemon.info()["Runtimes"]
    count = reloads(daemon)

    out = nvdocker2(daemon, *INSTALL, "--set-default", "--reload", "signal", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["changed"], result["verified"]) == (False, True)
    assert daemon.config_file.read_bytes() == data
    info = daemon.info()
    assert info["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert info["DefaultRuntime"] == "nvidia"
    assert reloads(daemon) == count + 1

    again = nvdocker2(daemon, *INSTALL, "--set-default", "--reload", "signal", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["verified"] is False
    assert reloads(daemon) == count + 1
    assert uninstalled(daemon)


def uninstalled(daemon) -> bool:
    out = nvdocker2(daemon, "uninstall", "--reload", "signal")
    return out.returncode == 0 and "nvidia" not in daemon.info()["Runtimes"]


def test_after_reload_none_the_next_install_reloads_and_says_so_without_inventing_a_cause(
        dockerd):
    """Issue 38 (13): the second install printed "unchanged … not reloaded" and then "an
    earlier run was interrupted: reloaded", though it had reloaded and nothing was
    interrupted."""
    daemon = dockerd
    first = nvdocker2(daemon, *INSTALL, "--reload", "none")
    assert first.returncode == 0, first.stderr
    assert "nvidia" not in daemon.info()["Runtimes"]
    count = reloads(daemon)
    second = nvdocker2(daemon, *INSTALL, "--reload", "signal")
    assert second.returncode == 0, second.stderr
    cfg = daemon.config_file
    assert second.stdout.splitlines()[1:] == [
        f"unchanged: {cfg} already says that; nothing written, dockerd reloaded to run it",
        "verified: yes, dockerd reports the change",
        "note: dockerd was not running this file yet (an earlier run with --reload none or an"
        " interrupted one wrote it, or a hand edit): reloaded it",
    ]
    assert "interrupted:" not in second.stdout and "not reloaded" not in second.stdout
    assert daemon.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert reloads(daemon) == count + 1
    third = nvdocker2(daemon, *INSTALL, "--reload", "signal", "--json")
    result = json.loads(third.stdout)
    assert (result["changed"], result["reload"], result["notes"]) == (False, "none", [])
    assert reloads(daemon) == count + 1
