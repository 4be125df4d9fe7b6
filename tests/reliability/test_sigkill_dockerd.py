"""SIGKILL while dockerd is being reloaded and asked (reference §2): never a file dockerd refuses.

With `--reload signal`, install and uninstall write daemon.json, SIGHUP a running private
dockerd and wait for /info to report the change; uninstall first writes a transitional file
(`"runtimes": {}`, `"default-runtime": "runc"`) when the final file lacks those keys, since
dockerd keeps its old runtimes on a reload without them. Processes killed at random instants
over that whole sequence must leave a file dockerd can run (every other key intact, the
default naming a runtime that exists), dockerd running, and a state that one clean run turns
into what /info reports and what a restarted dockerd accepts.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from privatedockerd import (  # noqa: E402
    PrivateDockerd,
    missing_prerequisites,
    remove_rootfs_tar,
)

from nvdocker2.store.atomic import PAUSE_HOOK, TMP_MARK  # noqa: E402

ORIGINAL = b'{\n  "debug": true,\n  "log-level": "warn",\n  "labels": ["zone=b"]\n}\n'
RUNTIME = "/usr/bin/runc"
KILLS = int(os.environ.get("NVDOCKER2_SIGKILL_DOCKERD_RUNS", "12"))  # processes killed


@pytest.fixture(scope="module")
def daemon():
    missing = missing_prerequisites()
    if missing:
        message = "private dockerd needs: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    d = PrivateDockerd(config=ORIGINAL)
    try:
        d.start()
        yield d
    finally:
        d.cleanup()
        remove_rootfs_tar()


@pytest.fixture
def dockerd(daemon: PrivateDockerd) -> PrivateDockerd:
    daemon.reset()
    assert daemon.config_file.read_bytes() == ORIGINAL
    return daemon


def _cli(d: PrivateDockerd, action: str) -> list[str]:
    argv = [sys.executable, "-m", "nvdocker2", action, "--config", str(d.config_file),
            "--reload", "signal", "--pidfile", str(d.pidfile), "--docker-host", d.host,
            "--timeout", "30"]
    if action == "install":
        argv += ["--runtime-path", RUNTIME, "--set-default"]
    return argv


def _run(d: PrivateDockerd, action: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cli(d, action), capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def _check_startable(data: bytes, context: str) -> dict:
    """What dockerd needs to start on this file, and every key we do not own untouched."""
    doc = json.loads(data)
    assert {k: doc[k] for k in ("debug", "log-level", "labels")} == json.loads(ORIGINAL), context
    assert set(doc) <= {"debug", "log-level", "labels", "runtimes", "default-runtime"}, context
    runtimes = doc.get("runtimes", {})
    assert set(runtimes) <= {"nvidia"}, context
    default = doc.get("default-runtime", "runc")
    assert default == "runc" or default in runtimes, f"{context}: default {default!r} dangles"
    return doc


def test_sigkill_during_reload_and_verify_never_leaves_a_file_dockerd_refuses(
    dockerd: PrivateDockerd,
) -> None:
    d = dockerd
    times = []
    for action in ("install", "uninstall", "install", "uninstall"):
        t0 = time.monotonic()
        r = _run(d, action)
        times.append(time.monotonic() - t0)
        assert r.returncode == 0, r.stderr
    typical = statistics.median(times)
    assert d.config_file.read_bytes() == ORIGINAL

    seed = int(os.environ.get("NVDOCKER2_SIGKILL_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"\nSIGKILL with reload: seed {seed}, typical run {typical:.3f} s, "
          f"killing {KILLS} processes")
    killed = 0
    states: set[bytes] = set()
    i = 0
    while killed < KILLS and i < 3 * KILLS:
        i += 1
        doc = json.loads(d.config_file.read_bytes())
        action = "uninstall" if "nvidia" in doc.get("runtimes", {}) else "install"
        delay = rng.uniform(0.0, 1.2 * typical)
        proc = subprocess.Popen(_cli(d, action), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        context = f"process {i} ({action}, seed {seed}, killed after {delay:.3f} s)"
        if proc.returncode == -signal.SIGKILL:
            killed += 1
        else:
            assert proc.returncode == 0, f"{context}: exit {proc.returncode}: {err.decode()}"
        data = d.config_file.read_bytes()
        states.add(data)
        _check_startable(data, context)
        assert d.running(), f"{context}: dockerd is gone\n{d.log_tail()}"
        beside = [n for n in os.listdir(d.config_file.parent) if TMP_MARK in n]
        assert len(beside) <= 2, f"{context}: {beside}"
    print(f"SIGKILL with reload: {killed} killed of {i}, {len(states)} distinct files seen")
    assert killed == KILLS, f"only {killed} of {i} processes were still running at their instant"

    # One clean run: /info reports what the file says, and dockerd restarts on that file.
    r = _run(d, "install")
    assert r.returncode == 0, r.stderr
    doc = _check_startable(d.config_file.read_bytes(), "after a clean install")
    assert doc["runtimes"]["nvidia"] == {"path": RUNTIME} and doc["default-runtime"] == "nvidia"
    info = d.info()
    assert info["DefaultRuntime"] == "nvidia" and info["Runtimes"]["nvidia"]["path"] == RUNTIME
    assert [n for n in os.listdir(d.config_file.parent) if TMP_MARK in n] == []
    d.restart()
    info = d.info()
    assert info["DefaultRuntime"] == "nvidia" and "nvidia" in info["Runtimes"]
    r = _run(d, "uninstall")
    assert r.returncode == 0, r.stderr
    assert "nvidia" not in d.info()["Runtimes"]


def test_uninstall_killed_after_the_transitional_reload_is_finished_by_the_next_run(
    dockerd: PrivateDockerd,
) -> None:
    d = dockerd
    assert _run(d, "install").returncode == 0
    proc = subprocess.Popen(_cli(d, "uninstall"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**os.environ, PAUSE_HOOK: "0.5"})
    assert proc.stderr is not None
    renames = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        assert line, f"uninstall exited {proc.wait()} before its last rename"
        if "pausing before rename of" in line and "/.daemon.json" in line:
            renames += 1
            if renames == 2:  # the final file; the transitional one is in place and reloaded
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    transitional = json.loads(d.config_file.read_bytes())
    assert transitional == {**json.loads(ORIGINAL), "runtimes": {}, "default-runtime": "runc"}
    r = _run(d, "uninstall")
    assert r.returncode == 0, r.stderr
    assert d.config_file.read_bytes() == ORIGINAL
