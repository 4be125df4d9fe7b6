"""`nvdocker2 agent` as a process on real files (docker engine, daemon.json under a host root,
`--reload none --no-verify`): ready, drift re-applied, back-off, signals, the node lock, SIGKILL.

The private-engine runs (containerd restarted and asked, the agent in a privileged container)
are in tests/e2e/test_agent_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from ..agent_proc import ORIGINAL, AgentProc  # noqa: E402

from nvdocker2.agent.watch import Watcher, fingerprint  # noqa: E402

def _cfg(host: Path) -> Path:
    return host / "etc" / "docker" / "daemon.json"


def _start(host: Path, tmp_path: Path, *extra: str, name: str = "a", env=None) -> AgentProc:
    args = ["--host-root", str(host), "--reload", "none", "--no-verify", "--set-default",
            "--ready-file", str(tmp_path / f"{name}.ready"), "--healthz", "0", "--poll", "0.5",
            *extra]
    return AgentProc(args, tmp_path / f"{name}.log", env)


def _installed(cfg: Path) -> dict:
    doc = json.loads(cfg.read_bytes())
    assert doc["default-runtime"] == "nvidia", doc
    assert doc["runtimes"]["nvidia"]["path"].endswith("nvidia-container-runtime"), doc
    assert doc["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
    return doc


def _rewrite(cfg: Path, data: bytes) -> None:
    """Another tool's atomic rewrite (a temp file renamed over the config)."""
    tmp = cfg.with_name(".other-tool.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, cfg)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_after_install_and_exact_bytes_back_on_stop(host, tmp_path, sig):
    a = _start(host, tmp_path)
    a.wait_for("ready:")
    _installed(_cfg(host))
    assert (tmp_path / "a.ready").exists()
    code, body = a.healthz()
    assert code == 200 and body.startswith("ok"), body
    # The journal and the agent's lock live in the host root's state directory.
    assert (host / "var" / "lib" / "nvdocker2" / "agent.lock").read_text().strip() == str(a.pid)
    t0 = time.monotonic()
    assert a.stop(sig) == 0, a.lines()
    assert time.monotonic() - t0 < 15
    assert _cfg(host).read_bytes() == ORIGINAL  # the crun default is back, byte for byte
    assert not (tmp_path / "a.ready").exists()
    assert len(a.events(f"stopping on {signal.Signals(sig).name}: uninstall:")) == 1


def test_a_node_runtime_path_the_agent_cannot_see_is_installed(host, tmp_path):
    node_only = "/opt/node-only/nvidia-container-runtime"  # on the node, not in the agent's image
    assert not os.path.exists(node_only)
    a = _start(host, tmp_path, "--runtime-path", node_only, "--keep-on-exit")
    a.wait_for("ready:")
    assert json.loads(_cfg(host).read_bytes())["runtimes"]["nvidia"] == {"path": node_only}
    assert a.stop() == 0


def test_keep_on_exit_leaves_the_runtime_installed(host, tmp_path):
    a = _start(host, tmp_path, "--keep-on-exit")
    a.wait_for("ready:")
    installed = _cfg(host).read_bytes()
    assert a.stop() == 0
    assert _cfg(host).read_bytes() == installed
    a.wait_for("--keep-on-exit")


def test_outside_rewrite_is_reapplied_with_one_event_line(host, tmp_path):
    a = _start(host, tmp_path)
    a.wait_for("ready:")
    _rewrite(_cfg(host), ORIGINAL)  # someone puts the old file back
    a.wait_for("drift in")
    _installed(_cfg(host))
    time.sleep(1.5)  # our own write is not taken for another drift
    assert len(a.events("drift in")) == 1, a.lines()
    assert "default-runtime replaced" in a.events("drift in")[0]
    assert a.stop() == 0
    assert _cfg(host).read_bytes() == ORIGINAL


def test_change_that_keeps_the_runtime_is_not_rewritten(host, tmp_path):
    a = _start(host, tmp_path)
    a.wait_for("ready:")
    doc = _installed(_cfg(host))
    doc["debug"] = True
    edited = json.dumps(doc).encode()
    _rewrite(_cfg(host), edited)
    a.wait_for("still in place")
    assert _cfg(host).read_bytes() == edited  # nothing to re-apply, nothing written
    assert a.events("drift in") == []
    assert a.stop() == 0


@pytest.mark.slow
def test_the_same_drift_recurring_backs_off_and_says_so(host, tmp_path):
    a = _start(host, tmp_path, "--backoff", "30")
    a.wait_for("ready:")
    _rewrite(_cfg(host), ORIGINAL)
    a.wait_for("drift in", count=1)
    _rewrite(_cfg(host), ORIGINAL)  # the same rewrite again: another controller
    a.wait_for("drift in", count=2)
    said = a.wait_for("another controller")
    assert "came back 1 time(s)" in said and "waits 30 s" in said
    _rewrite(_cfg(host), ORIGINAL)
    a.wait_for("backing off: re-applying in")
    time.sleep(3)  # well inside the 30 s back-off: no fight
    assert _cfg(host).read_bytes() == ORIGINAL
    assert len(a.events("drift in")) == 2
    code, body = a.healthz()
    assert code == 503 and "drift" in body, body
    assert not (tmp_path / "a.ready").exists()
    assert a.stop() == 0  # a stop during the back-off still restores
    assert _cfg(host).read_bytes() == ORIGINAL


def test_install_failure_is_retried_and_not_ready_until_it_works(host, tmp_path):
    _cfg(host).write_bytes(b'{"runtimes": {,}}\n')
    a = _start(host, tmp_path, "--backoff", "0.5")
    a.wait_for("install failed:")
    assert "trying again in 0.5 s" in a.events("install failed:")[0]
    code, body = a.healthz()
    assert code == 503 and "install failed" in body
    assert not (tmp_path / "a.ready").exists()
    assert _cfg(host).read_bytes() == b'{"runtimes": {,}}\n'  # nothing lost meanwhile
    _rewrite(_cfg(host), ORIGINAL)  # the admin fixes the file
    a.wait_for("ready:")
    _installed(_cfg(host))
    assert a.stop() == 0
    assert _cfg(host).read_bytes() == ORIGINAL


@pytest.mark.slow  # it watches the second agent wait for 1.5 s
def test_a_second_agent_on_the_node_says_why_and_waits(host, tmp_path):
    a = _start(host, tmp_path, name="a")
    a.wait_for("ready:")
    installed = _cfg(host).read_bytes()
    b = _start(host, tmp_path, name="b")
    said = b.wait_for("another nvdocker2 agent")
    assert f"pid {a.pid}" in said and "waiting" in said
    time.sleep(1.5)
    assert _cfg(host).read_bytes() == installed
    assert b.events("install:") == []
    code, body = b.healthz()
    assert code == 503 and "another agent" in body
    assert a.stop() == 0  # a restores the file; b takes the lock and installs again
    b.wait_for("is ours now")
    b.wait_for("ready:")
    _installed(_cfg(host))
    assert b.stop() == 0
    assert _cfg(host).read_bytes() == ORIGINAL


def test_sigkill_before_the_rename_leaves_the_file_and_the_next_agent_completes(host, tmp_path):
    a = _start(host, tmp_path, name="a", env={"NVDOCKER2_TEST_PAUSE_BEFORE_RENAME": "60"})
    d = _cfg(host).parent
    end = time.monotonic() + 60
    while not [n for n in os.listdir(d) if n.startswith(".daemon.json.nvdocker2-tmp-")]:
        assert time.monotonic() < end and a.p.poll() is None, a.lines()
        time.sleep(0.05)
    assert a.children()
    a.kill_all()  # the agent and its install, mid-transaction
    assert _cfg(host).read_bytes() == ORIGINAL
    b = _start(host, tmp_path, name="b")
    b.wait_for("ready:")
    _installed(_cfg(host))
    assert b.stop() == 0
    assert _cfg(host).read_bytes() == ORIGINAL


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.6, 0.9, 1.2,
                                   pytest.param(1.8, marks=pytest.mark.slow),
                                   pytest.param(3.0, marks=pytest.mark.slow)])
def test_sigkill_at_any_moment_then_a_new_agent_restores_the_original(host, tmp_path, delay):
    """Killed at a few instants of its start (before, during and after install), the agent
    leaves a daemon.json that parses and is either the original or installed; the next agent
    gets ready and its stop puts back the original bytes (the first one's journal)."""
    a = _start(host, tmp_path, name="a")
    time.sleep(delay)
    a.kill_all()
    data = _cfg(host).read_bytes()
    if data != ORIGINAL:
        _installed(_cfg(host))
    b = _start(host, tmp_path, name="b")
    b.wait_for("ready:")
    _installed(_cfg(host))
    assert b.stop() == 0, b.lines()
    assert _cfg(host).read_bytes() == ORIGINAL


def test_inotify_wakes_at_once_and_the_fingerprint_sees_bytes(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(b"version = 2\n")
    before = fingerprint(cfg)
    w = Watcher(cfg, poll=30)
    assert w.how.startswith("inotify on ")
    os.utime(cfg)
    assert fingerprint(cfg) == before  # a touch is no change
    t0 = time.monotonic()
    w.wait(0)  # drain the touch
    cfg.write_bytes(b"version = 3\n")
    w.wait(30)
    assert time.monotonic() - t0 < 5
    assert fingerprint(cfg) != before
    (tmp_path / "conf.d").mkdir()
    w.rearm()
    assert "conf.d" in w.how
    (tmp_path / "conf.d" / "99-nvidia.toml").write_bytes(b"")
    assert fingerprint(cfg) != before
    w.close()


def test_the_node_config_under_the_host_root_is_what_changes(tmp_path):
    """With --host-root, install edits the node's config under it (containerd 1.x, which
    replaces a whole plugin section from an import, keeps the runtime in config.toml itself),
    the import line stays the node's, nothing is written into this machine's /etc/containerd,
    and SIGTERM gives the node's bytes back."""
    if not os.path.isdir("/etc/containerd"):
        pytest.skip("/etc/containerd missing here (scripts/setup.sh installs containerd)")
    host = tmp_path / "host"
    etc = host / "etc" / "containerd"
    (etc / "conf.d").mkdir(parents=True)
    host.chmod(0o755)
    original = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    (etc / "config.toml").write_bytes(original)
    ours = Path("/etc/containerd/conf.d/99-nvidia.toml")
    machine = Path("/etc/containerd/config.toml")
    machine_before = machine.read_bytes() if machine.exists() else None
    assert not ours.exists()
    a = AgentProc(["--engine", "containerd", "--host-root", str(host), "--reload", "none",
                   "--no-verify", "--poll", "0.5"], tmp_path / "a.log")
    a.wait_for("ready:")
    installed = (etc / "config.toml").read_bytes()
    assert installed.startswith(original) and b"runtimes.nvidia" in installed
    assert list((etc / "conf.d").iterdir()) == []
    assert not ours.exists()
    assert (machine.read_bytes() if machine.exists() else None) == machine_before
    assert a.stop() == 0
    assert (etc / "config.toml").read_bytes() == original


def test_a_busy_healthz_port_is_one_error_line_and_nothing_changes(host, tmp_path):
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        a = AgentProc(["--host-root", str(host), "--reload", "none", "--no-verify",
                       "--healthz", str(port)], tmp_path / "a.log")
        assert a.stop(0) == 3
    finally:
        busy.close()
    lines = a.lines()
    assert lines[0] == f"error: cannot serve /healthz on 127.0.0.1:{port}: Address already in use"
    assert lines[1] == "hint: pick a free port for --healthz" and len(lines) == 2
    assert _cfg(host).read_bytes() == ORIGINAL


def test_config_at_the_top_of_the_host_root_is_refused(host, tmp_path):
    a = AgentProc(["--host-root", str(host), "--config", "/daemon.json"], tmp_path / "a.log")
    assert a.stop(0) == 2
    assert a.lines()[0].startswith("error: --config /daemon.json: with --host-root the config "
                                   "must be in a directory below /")


@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_stop_during_an_install_lets_it_finish_then_restores(host, tmp_path, sig, group):
    """SIGTERM to the agent, or a Ctrl-C to its process group: the install in progress runs
    in its own session, completes, and is then undone."""
    a = _start(host, tmp_path, env={"NVDOCKER2_TEST_PAUSE_BEFORE_RENAME": "2"})
    d = _cfg(host).parent
    end = time.monotonic() + 60
    while not [n for n in os.listdir(d) if "nvdocker2-tmp" in n]:
        assert time.monotonic() < end and a.p.poll() is None, a.lines()
        time.sleep(0.05)
    assert a.stop(sig, group=group) == 0  # sent while install sleeps before its rename
    assert [x for x in a.lines() if "install:" in x and "uninstall" not in x], a.lines()
    assert len(a.events(f"stopping on {signal.Signals(sig).name}: uninstall:")) == 1
    assert _cfg(host).read_bytes() == ORIGINAL
    assert [n for n in os.listdir(d) if "nvdocker2-tmp" in n] == []
