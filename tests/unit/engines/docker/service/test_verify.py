"""verify: poll /info until dockerd reports the expected runtimes and default; fail with
dockerd's own words. Edge cases against a fake Engine API; the real thing is in tests/e2e."""

from __future__ import annotations

import json
import time

import pytest
from ....dockerd_fixtures import FIXTURES

from nvdocker2.engines.docker.service import daemon as daemon_module
from nvdocker2.engines.docker.service.api import EngineClient, parse_docker_host
from nvdocker2.engines.docker.service.daemon import Dockerd
from nvdocker2.engines.docker.service.logs import (
    FileLog,
    JournalLog,
    NoLog,
    find_refusal,
    message_of,
)
from nvdocker2.engines.docker.service.managers import SignalManager
from nvdocker2.engines.docker.service.progress import PlainReporter, RecordingReporter
from nvdocker2.errors import EnvironmentProblem
from nvdocker2.engines.base import VerifyFailed
from nvdocker2.engines.docker.service import Expectation


NVIDIA = Expectation({"nvidia": "/usr/bin/nvidia-container-runtime"}, (), "nvidia")
REFUSED = (
    'time="2026-01-01T00:00:00.000000000Z" level=error msg="unable to configure the Docker daemon '
    "with file /etc/docker/daemon.json: the following directives are specified both as a flag and "
    'in the configuration file: log-level: (from flag: info, from file: debug)"\n'
)


def _info(runtimes: dict, default: str = "runc") -> bytes:
    return json.dumps({"Runtimes": runtimes, "DefaultRuntime": default}).encode()


def _daemon(engine, named_dockerd, log=None, restart=False, verifies=True):
    reporter = RecordingReporter()
    d = Dockerd(
        SignalManager(named_dockerd.pidfile),
        EngineClient(parse_docker_host(engine.host, {})),
        restart=restart,
        verifies=verifies,
        log=log or NoLog(),
        reporter=reporter,
    )
    return d, reporter


def test_verify_waits_until_dockerd_reports_the_runtime_and_default(engine, named_dockerd):
    def responder(path, count):
        if count < 4:
            return 200, _info({"runc": {"path": "runc"}})
        return 200, _info(
            {"runc": {"path": "runc"}, "nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
            "nvidia",
        )

    engine.responder = responder
    d, reporter = _daemon(engine, named_dockerd)
    d.reload()
    d.verify(NVIDIA, timeout=10)
    assert named_dockerd.hup_count(wait=2) == 1
    assert reporter.waits[0][1] == "no runtime nvidia; default runtime is runc, not nvidia"
    assert reporter.results[-1][0] is True
    assert "runtime nvidia = /usr/bin/nvidia-container-runtime" in reporter.results[-1][1]


def test_a_wrong_path_or_a_runtime_still_listed_is_not_verified(engine, named_dockerd):
    engine.info = json.loads(_info({"nvidia": {"path": "/old/nvidia"}, "runc": {"path": "runc"}}))
    d, _ = _daemon(engine, named_dockerd)
    with pytest.raises(VerifyFailed) as err:
        d.verify(NVIDIA, timeout=0.3)
    assert "runtime nvidia has path /old/nvidia, not /usr/bin/nvidia-container-runtime" in str(
        err.value
    )
    with pytest.raises(VerifyFailed, match="runtime nvidia still listed"):
        d.verify(Expectation({}, ("nvidia",), "runc"), timeout=0.3)


def test_timeout_says_what_was_expected_what_dockerd_reports_and_what_it_logged(
    engine, named_dockerd, tmp_path
):
    log = tmp_path / "dockerd.log"
    log.write_text("")
    d, _ = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    with log.open("a") as f:
        f.write('time="x" level=error msg="Error loading something unrelated"\n')
    started = time.monotonic()
    with pytest.raises(VerifyFailed) as err:
        d.verify(NVIDIA, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 3
    text = str(err.value)
    assert "within 0.5s" in text
    assert "no runtime nvidia; default runtime is runc, not nvidia" in text
    assert "dockerd logged: Error loading something unrelated" in text


def test_a_refusal_in_the_log_fails_at_once_even_when_info_looks_right(
    engine, named_dockerd, tmp_path
):
    engine.info = json.loads(
        _info({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "nvidia")
    )
    log = tmp_path / "dockerd.log"
    log.write_text(REFUSED)  # an old refusal, before the reload: ignored
    d, reporter = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    with log.open("a") as f:
        f.write(REFUSED)
    started = time.monotonic()
    with pytest.raises(VerifyFailed) as err:
        d.verify(NVIDIA, timeout=30)
    assert time.monotonic() - started < 1
    assert str(err.value) == (
        "dockerd refused the configuration: unable to configure the Docker daemon with file "
        "/etc/docker/daemon.json: the following directives are specified both as a flag and in "
        "the configuration file: log-level: (from flag: info, from file: debug)"
    )
    assert reporter.results == [(False, "dockerd refused the configuration")]


def test_an_old_refusal_before_the_reload_does_not_fail_verify(engine, named_dockerd, tmp_path):
    engine.info = json.loads(
        _info({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "nvidia")
    )
    log = tmp_path / "dockerd.log"
    log.write_text(REFUSED)
    d, _ = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    with log.open("a") as f:
        f.write('time="y" level=info msg="Reloaded configuration: {}"\n')
    d.verify(NVIDIA, timeout=5)


def test_info_that_matched_before_the_reload_proves_nothing(
    engine, named_dockerd, tmp_path, monkeypatch
):
    """reference §8: no reload line after a grace, /info as before, no dockerd identified behind
    the socket: verify does not fail, but says the acceptance was not seen."""
    monkeypatch.setattr(daemon_module, "LOG_GRACE", 0.4)
    engine.info = json.loads(
        _info({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "nvidia")
    )
    log = tmp_path / "dockerd.log"
    log.write_text("")
    d, _ = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    started = time.monotonic()
    said = d.verify(NVIDIA, timeout=5)
    assert 0.4 <= time.monotonic() - started < 2
    assert said is not None and "not verified" in said and str(log) in said
    d, _ = _daemon(engine, named_dockerd)  # no log at all: no grace to wait
    d.reload()
    assert "not verified" in d.verify(NVIDIA, timeout=5)


def test_verify_waits_through_a_dockerd_that_is_not_answering_yet(engine, named_dockerd):
    def responder(path, count):
        if count < 3:
            time.sleep(0.6)  # longer than the client's timeout below: "not answering"
        return 200, _info({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "nvidia")

    engine.responder = responder
    d, reporter = _daemon(engine, named_dockerd)
    d.client.timeout = 0.5
    d.verify(NVIDIA, timeout=10)
    assert any("dockerd not answering" in status for _, status in reporter.waits)


def test_check_candidate_with_verify_needs_dockerd_to_answer(tmp_path, named_dockerd):
    d = Dockerd(
        SignalManager(named_dockerd.pidfile),
        EngineClient(parse_docker_host(f"unix://{tmp_path}/gone.sock", {})),
    )
    with pytest.raises(EnvironmentProblem) as err:
        d.check_candidate(tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    assert err.value.exit_code == 3
    assert "gone.sock" in err.value.message
    assert "--no-verify" in err.value.hint
    assert named_dockerd.hup_count() == 0


def test_restart_warns_when_live_restore_is_off_and_containers_run(engine, named_dockerd):
    engine.info["ContainersRunning"] = 2
    d, reporter = _daemon(engine, named_dockerd, restart=True)
    d._warn_before_restart()
    assert reporter.notes == [
        (
            "warning: live-restore is off: restarting dockerd stops the 2 running container(s) "
            '(set "live-restore": true to keep them)'
        )
    ]


def test_plain_reporter_prints_a_line_per_change_not_per_poll(capsys):
    import sys

    r = PlainReporter(sys.stdout)
    r.done(True, "no wait, no line")
    for i in range(5):
        r.waiting(i * 0.1, "no runtime nvidia")
    r.waiting(0.6, "dockerd not answering")
    r.done(True, "dockerd reports runtime nvidia = /x")
    assert capsys.readouterr().out.splitlines() == [
        "waiting for dockerd (0.0s): no runtime nvidia",
        "waiting for dockerd (0.6s): dockerd not answering",
        "verified: dockerd reports runtime nvidia = /x",
    ]


def test_on_a_terminal_only_notes_are_printed(capsys):
    import sys

    r = PlainReporter(sys.stdout, waits=False)
    r.note("warning: live-restore is off")
    r.waiting(0.1, "no runtime nvidia")
    r.done(True, "dockerd reports runtime nvidia = /x")
    assert capsys.readouterr().out == "warning: live-restore is off\n"


def test_file_log_reads_only_lines_after_the_mark_and_survives_truncation(tmp_path):
    path = tmp_path / "dockerd.log"
    path.write_text("old line\n")
    log = FileLog(path)
    log.mark()
    assert log.lines() == []
    path.write_text("new\n")  # truncated and rewritten (logrotate copytruncate)
    assert log.lines() == ["new"]


def test_refusal_messages_are_unescaped_from_logrus_lines():
    line = 'time="t" level=error msg="unable to configure the Docker daemon with file \\"x\\""'
    assert message_of(line) == 'unable to configure the Docker daemon with file "x"'
    assert find_refusal(['level=info msg="Reloaded configuration"']) is None
    plain = "unable to configure the Docker daemon with file /d.json: EOF"
    assert find_refusal([plain]) == plain


def _logrus_time(microseconds: int) -> str:
    """dockerd's log time of an instant given in microseconds since the epoch (UTC)."""
    seconds, fraction = divmod(microseconds, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:06d}000Z"


def test_journal_log_reads_entries_after_the_mark_through_journalctl(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "journalctl").symlink_to(FIXTURES / "systemctl")
    log = tmp_path / "dockerd.log"
    (tmp_path / "dockerd.json").write_text(json.dumps({"argv": [], "env": {}, "log": str(log)}))
    monkeypatch.setenv("NVD2_DOCKERD_ROOT", str(tmp_path))
    journal = JournalLog("docker", journalctl=str(bindir / "journalctl"))
    journal.mark()
    # One clock reading after the mark, scaled as JournalLog scales its mark: the new entry is
    # stamped then (never before the mark, whatever second the clock is in), the old one five
    # seconds earlier.
    now_us = int(time.time() * 1_000_000)
    log.write_text(
        f'time="{_logrus_time(now_us - 5_000_000)}" level=error '
        'msg="unable to configure the Docker daemon: old"\n'
        f'time="{_logrus_time(now_us)}" level=error '
        'msg="unable to configure the Docker daemon: new"\n'
    )
    assert find_refusal(journal.lines()) == "unable to configure the Docker daemon: new"


def test_on_the_way_back_a_refused_file_does_not_fail_verify_when_info_is_right(
    engine, named_dockerd, tmp_path
):
    # The rollback's reload: dockerd refused the restored (transitional) file but still runs
    # the previous state, which is what the transaction must get back to.
    engine.info = json.loads(_info({"runc": {"path": "runc"}}))
    log = tmp_path / "dockerd.log"
    log.write_text("")
    d, _ = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    with log.open("a") as f:
        f.write(REFUSED)
    with pytest.raises(VerifyFailed, match="refused"):
        d.verify(NVIDIA, timeout=5)
    d.reload()
    with log.open("a") as f:
        f.write(REFUSED)
    d.verify(Expectation({}, ("nvidia",), "runc"), timeout=5)
    with pytest.raises(VerifyFailed, match="refused"):  # and not when /info is wrong
        d.verify(NVIDIA, timeout=5)


def test_a_restart_command_that_fails_while_dockerd_still_answers_is_an_environment_problem(
    engine, tmp_path, monkeypatch
):
    from nvdocker2.engines.docker.service.managers import SystemdManager

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(
        "#!/bin/sh\necho 'Failed to restart docker.service: Access denied' >&2\nexit 1\n"
    )
    (bindir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    d = Dockerd(SystemdManager(), EngineClient(parse_docker_host(engine.host, {})), restart=True)
    with pytest.raises(EnvironmentProblem) as err:
        d.reload()
    assert (
        err.value.message
        == "systemctl restart docker exited 1: Failed to restart docker.service: Access denied"
    )


def test_a_change_in_info_after_the_reload_confirms_it_without_the_log_line(
    engine, named_dockerd, tmp_path, monkeypatch
):
    # dockerd at --log-level=warn never logs "Reloaded configuration"; /info changing is proof.
    monkeypatch.setattr(daemon_module, "LOG_GRACE", 5.0)
    state = {"info": _info({"runc": {"path": "runc"}})}
    engine.responder = lambda path, n: (200, state["info"])
    log = tmp_path / "dockerd.log"
    log.write_text("")
    d, _ = _daemon(engine, named_dockerd, log=FileLog(log))
    d.reload()
    state["info"] = _info({"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "nvidia")
    started = time.monotonic()
    d.verify(NVIDIA, timeout=10)
    assert time.monotonic() - started < 1


def test_the_daemon_names_the_log_a_rejection_hint_should_point_to(engine, named_dockerd, tmp_path):
    log = tmp_path / "dockerd.log"
    assert _daemon(engine, named_dockerd, log=FileLog(log))[0].log_description == str(log)
    journal = JournalLog("docker", journalctl="/usr/bin/journalctl")
    said = _daemon(engine, named_dockerd, log=journal)[0].log_description
    assert said is not None and said.endswith("-u docker")
    assert _daemon(engine, named_dockerd)[0].log_description is None


def test_last_words_quote_the_last_panic_or_fatal_line_dockerd_wrote():
    from nvdocker2.engines.docker.service.logs import last_words

    lines = [
        'time="t" level=info msg="Reloaded configuration: {}"',
        "panic: runtime error: invalid memory address or nil pointer dereference",
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x55619495f531]",
        "goroutine 90 [running]:",
        "\tgithub.com/docker/docker/daemon.(*Daemon).fillPlatformInfo(...)",
    ]
    assert last_words(lines) == lines[1]
    assert last_words(['time="t" level=fatal msg="failed to start daemon: x"']) == \
        "failed to start daemon: x"
    assert last_words(['time="t" level=error msg="not a death"']) is None
