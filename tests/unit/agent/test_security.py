"""The agent runs as root on every node: what an unprivileged local user can do to it.

- Programs on PATH and an ldconfig that does not name libc (NixOS, musl): starting the
  watcher binds libc without running any program (ctypes.util.find_library ran
  /sbin/ldconfig, then gcc, cc, ld and objdump from PATH).
- `nobody` opening many idle connections to /healthz: the agent still installs, answers a
  real probe, and uninstalls on SIGTERM (each idle connection held a descriptor and a thread
  for ever, so at systemd's 1024 descriptors install could not start); a connection that
  trickles its request is cut at its deadline.

Runs as root (the suite's unit tests do); `nobody` is a real user on the other side.
"""

from __future__ import annotations

import fcntl
import http.client
import os
import pwd
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..agent_proc import ORIGINAL, AgentProc  # noqa: E402
from nvdocker2.agent.serve import (  # noqa: E402
    CONNECTION_SECONDS, MAX_CONNECTIONS, Readiness, serve_healthz)
from .test_agent import _cfg, _installed  # noqa: E402

PLANTED = ("ldconfig", "gcc", "cc", "ld", "objdump")


def _need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("prerequisite missing under CI: root (mount namespaces, nobody)")
        pytest.skip("needs root")


def _plant(bindir: Path, marker: Path) -> None:
    """Programs that say nothing useful and leave a line in `marker` when run."""
    bindir.mkdir()
    for name in PLANTED:
        p = bindir / name
        p.write_text(f'#!/bin/sh\necho "{name} $*" >> {marker}\n')
        p.chmod(0o755)
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(bindir, nobody, nobody)


def test_starting_the_watcher_runs_no_program(tmp_path):
    """In a mount namespace of its own, /sbin/ldconfig is one that names no library, and
    gcc, cc, ld and objdump of nobody's come first on PATH: the watcher still gets inotify
    and none of them runs."""
    _need_root()
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) missing")
    bindir, marker = tmp_path / "bin", tmp_path / "ran"
    _plant(bindir, marker)
    (tmp_path / "etc").mkdir()
    cfg = tmp_path / "etc" / "daemon.json"
    cfg.write_bytes(b"{}\n")
    code = ("from pathlib import Path; from nvdocker2.agent.watch import Watcher; "
            f"w = Watcher(Path({str(cfg)!r}), 5.0); print(w.how); w.close()")
    script = 'mount --bind "$1" /sbin/ldconfig && shift && exec "$@"'
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-ec", script, "sh",
         str(bindir / "ldconfig"), sys.executable, "-I", "-c", code],
        env={"PATH": f"{bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("inotify on "), p.stdout + p.stderr
    assert not marker.exists(), marker.read_text()


# nobody's side: open `count` idle connections to 127.0.0.1:PORT, say how many are open, and
# hold them; each line read on stdin opens `count` more. A connect not done in 50 ms is tried
# again on a new socket (a SYN dropped while the agent's queue is full would wait 1 s); a wave
# gives up after 30 s (the agent takes no more). Gone after `life` seconds or at stdin's end.
ATTACKER = r"""
import resource, select, socket, sys, time
port, count, life = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + life
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
def wave():
    want, give_up = len(held) + count, time.monotonic() + 30
    while len(held) < want and time.monotonic() < give_up:
        s = socket.socket()
        s.settimeout(0.05)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
    print(len(held), flush=True)
wave()
while select.select([sys.stdin], [], [], max(0.0, end - time.monotonic()))[0]:
    if not sys.stdin.readline():
        break
    wave()
"""
WAVE = 1100  # beyond the 1024 descriptors systemd gives a service by default


def _held(attacker: subprocess.Popen) -> int:
    line = attacker.stdout.readline()
    assert line.strip().isdigit(), f"the attacker said {line!r}"
    return int(line)


def _answered(a: AgentProc, within: float) -> tuple[int, str]:
    """A real probe's answer, asked again while the agent closes it at once."""
    end = time.monotonic() + within
    while True:
        try:
            return a.healthz()
        except (OSError, http.client.HTTPException):
            if time.monotonic() > end:
                raise
        time.sleep(0.2)


def test_idle_connections_of_nobody_starve_neither_install_nor_uninstall(
        host, tmp_path):  # noqa: F811 - host: the imported fixture
    """While another agent holds the node's lock, nobody opens 1100 idle connections to the
    agent's /healthz (the agent may open 1024 descriptors). The lock freed, the agent installs
    and is ready, a real probe is answered, and after 1100 more connections SIGTERM still
    uninstalls: the original bytes are back."""
    _need_root()
    nobody = pwd.getpwnam("nobody")
    lock = host / "var" / "lib" / "nvdocker2" / "agent.lock"
    lock.parent.mkdir(parents=True, mode=0o700)
    held_lock = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held_lock, fcntl.LOCK_EX)
    a = AgentProc(["--host-root", str(host), "--reload", "none", "--no-verify", "--set-default",
                   "--healthz", "0", "--poll", "0.5", "--backoff", "60"],
                  tmp_path / "a.log", nofile=1024)
    attacker = None
    try:
        a.wait_for("another nvdocker2 agent")
        attacker = subprocess.Popen(
            [os.path.realpath(sys.executable), "-I", "-S", "-c", ATTACKER, str(a.port),
             str(WAVE), "300"], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[],
            cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert _held(attacker) >= 1000  # the agent took them all in (or closed them)
        os.close(held_lock)  # the other agent is gone
        held_lock = None
        end = time.monotonic() + 60
        while not (a.events("ready:") or a.events("install failed:")):
            assert time.monotonic() < end and a.p.poll() is None, a.lines()
            time.sleep(0.05)
        assert a.events("install failed:") == [], a.lines()
        _installed(_cfg(host))
        code, body = _answered(a, within=20)
        assert code == 200 and body.startswith("ok"), body
        attacker.stdin.write("again\n")
        attacker.stdin.flush()
        assert _held(attacker) >= 2000
        # at most MAX_CONNECTIONS of them in the agent, however many nobody holds
        assert len(os.listdir(f"/proc/{a.pid}/fd")) < 16 + MAX_CONNECTIONS
        assert a.stop() == 0, a.lines()
        assert _cfg(host).read_bytes() == ORIGINAL
        assert len(a.events("stopping on SIGTERM: uninstall:")) == 1, a.lines()
    finally:
        if held_lock is not None:
            os.close(held_lock)
        if a.p.poll() is None:
            a.kill_all()
        if attacker is not None:
            attacker.stdin.close()
            attacker.wait(60)


def test_a_connection_that_trickles_its_request_is_cut_at_its_deadline():
    """One byte every half second keeps the socket's own timeout from firing; the connection's
    deadline closes it all the same, and the next client is answered."""
    readiness = Readiness(None)
    readiness.set(True, "test")
    server = serve_healthz(0, readiness)
    port = server.server_address[1]
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        start = time.monotonic()
        closed = False
        for byte in b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"x" * 40:
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            readable, _, _ = select.select([slow], [], [], 0.5)
            if readable and slow.recv(1) == b"":
                closed = True
                break
        assert closed and time.monotonic() - start < CONNECTION_SECONDS + 2
        slow.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200 and r.read() == b"ok: test\n"
    finally:
        server.shutdown()
        server.server_close()
