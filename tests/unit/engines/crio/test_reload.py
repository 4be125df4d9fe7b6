"""`--reload signal` for CRI-O: SIGHUP to the crio the crio unit names, only when that process
serves CRI-O's socket, is root's in every uid and is a crio (docs/reference.md §8, §11).

The signalled process is a real child process started here: it names itself `crio`, listens on
a unix socket the way CRI-O does, and on SIGHUP copies the drop-in into its "running
configuration", which `crio status config` (the service's command boundary) answers with. The
unit's MainPID comes from a `systemctl` stand-in. No CRI-O is installed where this runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request
from nvdocker2.engines.crio import CrioEngine, SignalCrio, SystemdCrio, make_service
from nvdocker2.errors import EnvironmentProblem

RT = "/usr/bin/nvidia-container-runtime"
needs_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="starting a process as another user needs root")

CHILD = r"""
import os, signal, socket, sys
name, sock, dropin, running = sys.argv[1:5]
with open("/proc/self/comm", "w") as f:
    f.write(name)

def hup(*_):
    try:
        with open(dropin) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    with open(running, "w") as f:
        f.write(text)
    with open(running + ".hups", "a") as f:
        f.write("HUP\n")

signal.signal(signal.SIGHUP, hup)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sock)
s.listen(16)
open(sock + ".ready", "w").close()
while True:
    c, _ = s.accept()
    c.close()
"""


class Host:
    """A directory with the drop-in, the children and the systemctl stand-in."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nvdocker2-crio-"))
        # A child running as another user writes here too; sticky (like /tmp), so the
        # stand-in below, root's, is one nvdocker2 may run.
        os.chmod(self.dir, 0o1777)
        self.dropin = self.dir / "crio.conf.d" / "99-nvidia.conf"
        self.dropin.parent.mkdir()
        (self.dir / "bin").mkdir(mode=0o755)
        self.systemctl = self.dir / "bin" / "systemctl"
        self.systemctl.write_text(f"#!/bin/sh\necho MainPID=$(cat {self.dir}/mainpid)\n")
        self.systemctl.chmod(0o755)
        self.children: list[subprocess.Popen] = []

    def start(self, name: str = "crio", uid: int | None = None, tag: str = "a") -> tuple[
            subprocess.Popen, str, Path]:
        sock, running = str(self.dir / f"{tag}.sock"), self.dir / f"{tag}.running"
        # The interpreter itself, not a venv's link to it: a venv may lie in a directory the
        # other user cannot enter (the child needs nothing beyond the standard library).
        exe = os.path.realpath(sys.executable)
        p = subprocess.Popen(
            [exe, "-I", "-c", CHILD, name, sock, str(self.dropin), str(running)],
            preexec_fn=(lambda: os.setuid(uid)) if uid is not None else None)
        self.children.append(p)
        deadline = time.monotonic() + 30
        while not os.path.exists(sock + ".ready"):
            assert p.poll() is None and time.monotonic() < deadline, "the child did not start"
            time.sleep(0.02)
        return p, sock, running

    def main_pid(self, pid: int) -> None:
        (self.dir / "mainpid").write_text(f"{pid}\n")

    def hups(self, running: Path) -> int:
        f = Path(str(running) + ".hups")
        return len(f.read_text().splitlines()) if f.exists() else 0

    def status_run(self, running: Path):
        """`crio status config` answers with the child's running configuration."""

        def run(argv, **kw):
            assert argv[-1] == "config", argv
            text = running.read_text() if running.exists() else ""
            return subprocess.CompletedProcess(argv, 0, text, "")

        return run

    def service(self, sock: str, running: Path, **kw) -> SignalCrio:
        return SignalCrio("crio", sock, True, self.status_run(running), str(self.systemctl),
                          crio="/usr/bin/crio", **kw)

    def stop(self) -> None:
        for p in self.children:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


@pytest.fixture
def host():
    h = Host()
    yield h
    h.stop()


def _wait_hups(host: Host, running: Path, n: int) -> int:
    deadline = time.monotonic() + 30
    while host.hups(running) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return host.hups(running)


def test_install_and_uninstall_reload_the_running_crio_by_sighup(host, tmp_path):
    p, sock, running = host.start()
    host.main_pid(p.pid)
    svc, eng = host.service(sock, running), CrioEngine(host.dropin)
    res = txn.run(eng, "install", Request("nvidia", RT, True), service=svc,
                  state=tmp_path / "s", timeout=30)
    assert res.changed and res.verified and res.reload == "signal"
    assert host.hups(running) == 1 and running.read_text() == host.dropin.read_text()
    res = txn.run(eng, "uninstall", Request("nvidia", RT), service=svc, state=tmp_path / "s",
                  timeout=30)
    assert res.verified and not host.dropin.exists()
    assert host.hups(running) == 2 and running.read_text() == ""  # the runtime left CRI-O
    assert p.poll() is None  # a reload, not an exit


def test_a_crio_that_does_not_take_the_change_is_rolled_back_and_signalled_again(host, tmp_path):
    from nvdocker2.errors import DockerdRejected

    p, sock, running = host.start()
    host.main_pid(p.pid)
    eng = CrioEngine(host.dropin)
    stale = host.service(sock, tmp_path / "never-written")  # reports no runtime at all
    with pytest.raises(DockerdRejected) as e:
        txn.run(eng, "install", Request("nvidia", RT), service=stale, state=tmp_path / "s",
                timeout=0.5)
    assert e.value.exit_code == 4 and not host.dropin.exists()
    assert _wait_hups(host, running, 2) == 2  # once for the change, once for the old files


def test_mainpid_that_does_not_serve_the_socket_is_not_signalled(host):
    p, sock, running = host.start(tag="a")
    q, _, other = host.start(tag="b")
    host.main_pid(q.pid)  # systemd names another crio than the one on the socket
    with pytest.raises(EnvironmentProblem, match=f"served by pid {p.pid}, not by the crio "
                       f"unit's MainPID {q.pid}"):
        host.service(sock, running).apply()
    time.sleep(0.2)
    assert host.hups(running) == 0 and host.hups(other) == 0


def test_a_process_not_named_crio_is_not_signalled(host):
    p, sock, running = host.start(name="sleeper")
    host.main_pid(p.pid)
    with pytest.raises(EnvironmentProblem, match="not a crio process"):
        host.service(sock, running).apply()
    time.sleep(0.2)
    assert host.hups(running) == 0 and p.poll() is None


@needs_root
def test_a_crio_a_user_runs_is_never_signalled(host):
    p, sock, running = host.start(uid=65534)
    host.main_pid(p.pid)
    with pytest.raises(EnvironmentProblem) as e:
        host.service(sock, running).apply()
    assert f"pid {p.pid} belongs to uid 65534, not root" in e.value.message
    assert "--reload systemd" in e.value.hint
    time.sleep(0.2)
    assert host.hups(running) == 0 and p.poll() is None


def test_no_running_unit_or_no_socket_is_refused_before_anything_is_written(host, tmp_path):
    p, sock, running = host.start()
    host.main_pid(0)
    with pytest.raises(EnvironmentProblem, match="names no running process"):
        make_service("signal", "crio", sock, True, host.status_run(running),
                     str(host.systemctl))
    host.main_pid(p.pid)
    with pytest.raises(EnvironmentProblem, match="does not answer on"):
        make_service("signal", "crio", str(host.dir / "none.sock"), True,
                     host.status_run(running), str(host.systemctl))
    assert host.hups(running) == 0


def test_auto_restarts_crio_whatever_its_release_and_signal_says_what_sighup_leaves_undone(
        host):
    """A real CRI-O (1.36.3, `make crio-e2e`) shows a runtime added by SIGHUP in `crio status
    config` yet refuses it to RunPodSandbox (cri-o/cri-o#10202): auto must restart."""
    p, sock, running = host.start()
    host.main_pid(p.pid)
    svc, why = make_service("auto", "crio", sock, True, host.status_run(running),
                            str(host.systemctl), exe="/usr/bin/crio")
    assert type(svc) is SystemdCrio and svc.crio == "/usr/bin/crio"
    assert why == ("CRI-O's SIGHUP reload shows new runtimes in `crio status`, yet its pods keep "
                   "the runtimes it started with (cri-o/cri-o#10202): restarting")
    svc, why = make_service("signal", "crio", sock, True, host.status_run(running),
                            str(host.systemctl))
    assert isinstance(svc, SignalCrio) and why.endswith(
        "(cri-o/cri-o#10202): restart CRI-O for its pods to run with the change")
    svc, why = make_service("systemd", "crio", sock, True, host.status_run(running),
                            str(host.systemctl))
    assert type(svc) is SystemdCrio and why is None
    assert host.hups(running) == 0  # choosing never signals


def test_cli_reload_signal_without_crio_is_exit_3_and_writes_nothing(tmp_path, monkeypatch):
    from ...cli_run import cli, engine_env

    engine_env(tmp_path, monkeypatch)
    drop = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    code, out, err = cli("install", "--engine", "crio", "--config", str(drop), "--runtime-path",
                         RT, "--allow-missing-runtime", "--reload", "signal")
    assert code == 3 and not drop.exists() and not (tmp_path / "state" / "backups").exists()
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")


def test_crio_warns_of_a_runtime_path_it_would_refuse(tmp_path):
    eng = CrioEngine(tmp_path / "99-nvidia.conf")
    missing = str(tmp_path / "missing")
    res = txn.run(eng, "install", Request("nvidia", missing), state=tmp_path / "st")
    assert res.changed and list(res.warnings) == [
        f"{missing} is not an executable file (yet): CRI-O leaves such a runtime out, "
        "and does not start when it is the default_runtime"]
    res = txn.run(eng, "install", Request("runc2", sys.executable), state=tmp_path / "st")
    assert res.changed and res.warnings == ()
