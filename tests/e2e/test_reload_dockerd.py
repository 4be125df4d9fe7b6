"""Reload, restart and verify against a real private dockerd, through nvdocker2.dockerd alone
(the CLI path is in test_install_e2e.py and test_reload_cli.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nvdocker2.dockerd import DaemonOptions, RecordingReporter, make_daemon
from nvdocker2.transaction import Expectation, VerifyFailed
from nvdocker2.errors import BadInput, EnvironmentProblem

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUNTIME = "/usr/bin/nvidia-container-runtime"
NVIDIA = Expectation({"nvidia": RUNTIME}, (), "runc")


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """systemctl/service/journalctl stand-ins first on PATH; `use(daemon)` points them at it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("systemctl", "service", "journalctl"):
        (bindir / name).symlink_to(FIXTURES / "systemctl")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    calls = tmp_path / "calls"
    monkeypatch.setenv("NVD2_FAKE_CALLS", str(calls))

    class StandIns:
        def use(self, daemon) -> None:
            monkeypatch.setenv("NVD2_DOCKERD_ROOT", str(daemon.root))

        def calls(self) -> list[str]:
            return calls.read_text().splitlines() if calls.exists() else []

    return StandIns()


def _sleeper(daemon) -> str:
    return daemon.docker("run", "-d", "--network=none", daemon.image, "sleep", "1000").stdout.strip()


def _state(daemon, cid: str) -> str:
    return daemon.docker("inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}", cid).stdout.strip()


def _reloads(daemon) -> int:
    return daemon.log_file.read_text(errors="replace").count("Got signal to reload configuration")


def test_signal_reload_verifies_the_runtime_and_keeps_containers_running(dockerd):
    cid = _sleeper(dockerd)
    before = _state(dockerd, cid)
    reporter = RecordingReporter()
    daemon = make_daemon(DaemonOptions(docker_host=dockerd.host, pidfile=dockerd.pidfile), reporter)
    assert daemon.strategy == "signal"
    candidate = {"runtimes": {"nvidia": {"path": RUNTIME}}}
    daemon.check_candidate(dockerd.config_file, candidate, dockerd.config_file)
    dockerd.config_file.write_text(json.dumps(candidate))
    reloads = _reloads(dockerd)
    daemon.reload()
    daemon.verify(NVIDIA, timeout=15)
    assert dockerd.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert _reloads(dockerd) == reloads + 1
    assert _state(dockerd, cid) == before and before.startswith("true ")
    assert reporter.results[-1][0] is True


def test_a_flag_conflict_the_installer_sees_is_refused_before_dockerd_is_touched(make_dockerd):
    daemon_ = make_dockerd(extra_args=["--default-runtime=runc"])
    daemon = make_daemon(DaemonOptions(docker_host=daemon_.host, pidfile=daemon_.pidfile))
    candidate = {"runtimes": {"nvidia": {"path": RUNTIME}}, "default-runtime": "nvidia"}
    with pytest.raises(BadInput) as err:
        daemon.check_candidate(daemon_.config_file, candidate, daemon_.config_file)
    assert '"default-runtime" (flag --default-runtime)' in err.value.message
    assert _reloads(daemon_) == 0


def test_a_refused_reload_fails_verify_with_dockerds_words_and_dockerd_keeps_serving(
    make_dockerd, stand_ins, monkeypatch
):
    # The systemd path with no readable MainPID: the installer cannot see dockerd's flags.
    daemon_ = make_dockerd(extra_args=["--log-level=info"])
    stand_ins.use(daemon_)
    cid = _sleeper(daemon_)
    before = _state(daemon_, cid)
    monkeypatch.setenv("NVD2_FAKE_HIDE_PID", "1")
    daemon = make_daemon(DaemonOptions(docker_host=daemon_.host))
    assert daemon.strategy == "systemd"
    candidate = {"log-level": "debug", "runtimes": {"nvidia": {"path": RUNTIME}}}
    daemon.check_candidate(daemon_.config_file, candidate, daemon_.config_file)  # cannot see
    daemon_.config_file.write_text(json.dumps(candidate))
    daemon.reload()
    started = time.monotonic()
    with pytest.raises(VerifyFailed) as err:
        daemon.verify(NVIDIA, timeout=30)
    assert time.monotonic() - started < 5
    assert "the following directives are specified both as a flag and in the configuration file: " \
           "log-level" in str(err.value)
    assert "systemctl reload docker" in stand_ins.calls()
    assert daemon_.docker("version").returncode == 0
    assert _state(daemon_, cid) == before


def test_systemd_restart_gives_a_new_dockerd_and_verify_waits_for_it(make_dockerd, stand_ins, monkeypatch):
    daemon_ = make_dockerd()
    stand_ins.use(daemon_)
    # systemctl returns at once and dockerd starts 2 s later: verify must wait for it.
    monkeypatch.setenv("NVD2_FAKE_NO_WAIT", "1")
    monkeypatch.setenv("NVD2_FAKE_START_DELAY", "2")
    old_pid = daemon_.pid
    reporter = RecordingReporter()
    daemon = make_daemon(DaemonOptions(mode="systemd", restart=True, docker_host=daemon_.host), reporter)
    daemon_.config_file.write_text(json.dumps({"runtimes": {"nvidia": {"path": RUNTIME}}}))
    daemon.reload()
    started = time.monotonic()
    daemon.verify(NVIDIA, timeout=60)
    assert time.monotonic() - started >= 2
    assert daemon_.pid != old_pid
    assert daemon_.info()["Runtimes"]["nvidia"] == {"path": RUNTIME}
    assert "systemctl restart docker" in stand_ins.calls()
    assert any("not answering" in status for _, status in reporter.waits)
    assert reporter.notes == ["restarting dockerd (containers without live-restore stop)"]


def test_a_restart_dockerd_refuses_fails_verify_with_the_journal_words(
    make_dockerd, stand_ins, monkeypatch
):
    daemon_ = make_dockerd(extra_args=["--log-level=info"])
    stand_ins.use(daemon_)
    daemon = make_daemon(DaemonOptions(mode="systemd", restart=True, docker_host=daemon_.host))
    monkeypatch.setenv("NVD2_FAKE_HIDE_PID", "1")
    daemon_.config_file.write_text(json.dumps({"log-level": "debug"}))
    daemon.reload()
    started = time.monotonic()
    with pytest.raises(VerifyFailed) as err:
        daemon.verify(NVIDIA, timeout=30)
    monkeypatch.delenv("NVD2_FAKE_HIDE_PID")
    assert time.monotonic() - started < 5
    assert "unable to configure the Docker daemon with file" in str(err.value)
    assert any(call.startswith("journalctl -u docker") for call in stand_ins.calls())
    # the way back: the old file, restart again, dockerd serves
    daemon_.config_file.write_text("{}\n")
    daemon.reload()
    daemon.verify(Expectation({}, ("nvidia",), "runc"), timeout=60)
    assert daemon_.docker("version").returncode == 0


def test_no_dockerd_with_verify_is_an_environment_problem_before_writing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    daemon = make_daemon(
        DaemonOptions(docker_host=f"unix://{tmp_path}/docker.sock", pidfile=tmp_path / "docker.pid")
    )
    with pytest.raises(EnvironmentProblem) as err:
        daemon.check_candidate(tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    assert err.value.exit_code == 3
