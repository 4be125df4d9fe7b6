"""SIGKILL at any instant leaves daemon.json old or new, never partial (reference §2, "Atomic").

Real `nvdocker2 install/uninstall` processes run one after another against one daemon.json and
are killed with SIGKILL at a random instant spread over their whole run time (the typical run
time is measured first), until 100 of them were killed. After every kill the file must be
byte-identical to one of the two allowed states: the original, or the original plus the runtime
(and default). A temp file a
killed run left beside daemon.json is allowed until the next run, which must remove it; after
one clean run nothing of ours is left besides backups/, journal/ and the lock.

The seed of the random kill instants is printed; set NVDOCKER2_SIGKILL_SEED to replay a run.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvdocker2.store.atomic import PAUSE_HOOK, TMP_MARK
from nvdocker2.store.backups import Backups, KEEP_BACKUPS

# An operator's file: 2-space indent, CRLF, non-ASCII, an integer beyond a double's precision, a
# runtime of someone else and an explicit default. Every byte of it must survive.
ORIGINAL = (
    '{\r\n'
    '  "data-root": "/srv/dockér",\r\n'
    '  "log-driver": "json-file",\r\n'
    '  "log-opts": {"max-size": "10m", "max-file": "3"},\r\n'
    '  "default-shm-size": "64M",\r\n'
    '  "max-concurrent-downloads": 9007199254740993,\r\n'
    '  "shutdown-timeout": 15,\r\n'
    '  "runtimes": {\r\n'
    '    "custom": {"path": "/opt/custom/bin/runc", "runtimeArgs": ["--debug"]}\r\n'
    '  },\r\n'
    '  "default-runtime": "runc",\r\n'
    '  "labels": ["rack=7", "ünïcode=✓"]\r\n'
    '}'
).encode()
MODE = 0o640
RUNTIME = "/usr/bin/runc"  # any absolute path: --reload none never runs it
KILLS = int(os.environ.get("NVDOCKER2_SIGKILL_RUNS", "100"))  # processes killed


def _cli(config: Path, action: str) -> list[str]:
    argv = [sys.executable, "-m", "nvdocker2", action, "--config", str(config),
            "--reload", "none", "--no-verify", "--timeout", "60"]
    if action == "install":
        argv += ["--runtime-path", RUNTIME, "--set-default"]
    return argv


def _run(config: Path, action: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cli(config, action), capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def _action_for(data: bytes, original: bytes) -> str:
    return "install" if data == original else "uninstall"


def _leftovers(config_dir: Path, state: Path) -> tuple[list[str], list[str]]:
    """Names beside daemon.json other than itself; names in the state dir other than ours."""
    beside = sorted(n for n in os.listdir(config_dir) if n != "daemon.json" and n != "state")
    extra = sorted(n for n in os.listdir(state)
                   if n not in ("backups", "journal", "lock", "probes"))
    return beside, extra


def _temps_in_state(state: Path) -> list[str]:
    found = []
    for sub in ("backups", "journal", "probes"):
        d = state / sub
        if d.is_dir():
            found += [f"{sub}/{n}" for n in os.listdir(d) if TMP_MARK in n]
    return sorted(found)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "daemon.json"
    path.write_bytes(ORIGINAL)
    os.chmod(path, MODE)
    return path


@pytest.fixture
def installed(config: Path) -> bytes:
    """The bytes of the one other allowed state, made by a clean install (then undone)."""
    r = _run(config, "install")
    assert r.returncode == 0, r.stderr
    new = config.read_bytes()
    r = _run(config, "uninstall")
    assert r.returncode == 0, r.stderr
    assert config.read_bytes() == ORIGINAL
    parsed = json.loads(new)
    assert parsed["runtimes"]["nvidia"] == {"path": RUNTIME}
    assert parsed["default-runtime"] == "nvidia"
    return new


def test_sigkill_at_random_instants_leaves_old_or_new_file(config: Path, installed: bytes) -> None:
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    allowed = {ORIGINAL: "old", installed: "new"}

    # The typical run time of one process, measured on this machine now, and again every
    # tenth process, since the load of a shared machine changes during the loop.
    times: list[float] = []

    def measure() -> None:
        action = _action_for(config.read_bytes(), ORIGINAL)
        t0 = time.monotonic()
        r = _run(config, action)
        times.append(time.monotonic() - t0)
        assert r.returncode == 0, r.stderr

    for _ in range(4):
        measure()
    typical = statistics.median(times[-5:])

    seed = int(os.environ.get("NVDOCKER2_SIGKILL_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"\nSIGKILL loop: seed {seed}, typical run {typical:.3f} s, killing {KILLS} processes")
    killed = finished = changed_by_killed = 0
    i = 0
    while killed < KILLS and i < 3 * KILLS:
        i += 1
        if i % 10 == 0:
            measure()
            typical = statistics.median(times[-5:])
        before = config.read_bytes()
        action = _action_for(before, ORIGINAL)
        delay = rng.uniform(0.0, 1.2 * typical)
        proc = subprocess.Popen(_cli(config, action), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        context = f"process {i} ({action}, seed {seed}, killed after {delay:.3f} s)"
        if proc.returncode == -signal.SIGKILL:
            killed += 1
        else:
            finished += 1
            assert proc.returncode == 0, f"{context}: exit {proc.returncode}: {err.decode()}"
        after = config.read_bytes()
        assert after in allowed, f"{context}: daemon.json is neither old nor new:\n{after!r}"
        json.loads(after)
        assert os.stat(config).st_mode & 0o7777 == MODE, context
        if proc.returncode == -signal.SIGKILL and after != before:
            changed_by_killed += 1
        # Only our own temp files may be left beside daemon.json by a killed run.
        beside, extra = _leftovers(config.parent, state)
        assert all(TMP_MARK in n for n in beside), f"{context}: stray files {beside}"
        assert extra == [], f"{context}: stray files in the state dir: {extra}"

    print(f"SIGKILL loop: {killed} killed ({changed_by_killed} of them after the rename), "
          f"{finished} finished before their kill instant")
    # Processes that finished before their instant (about 1 in 6) are checked too, and more are
    # started until KILLS of them were killed.
    assert killed == KILLS, f"only {killed} of {i} processes were still running at their instant"
    # The kill instants must cover the whole run: some before the file changed, some after.
    assert 0 < changed_by_killed < killed

    # One clean run (of each kind) cleans up after all the killed ones.
    for _ in range(2):
        action = _action_for(config.read_bytes(), ORIGINAL)
        r = _run(config, action)
        assert r.returncode == 0, r.stderr
    assert config.read_bytes() in allowed
    beside, extra = _leftovers(config.parent, state)
    assert beside == [] and extra == []
    backups = Backups(state).all(config)
    assert 0 < len(backups) <= KEEP_BACKUPS
    for b in backups:
        assert Backups(state).read(b) in (ORIGINAL, installed), b.id


def test_sigkill_leaves_no_temp_files_in_the_state_dir(config: Path, installed: bytes) -> None:
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    # Kill at the backup's rename (the first pause point of install), then run cleanly.
    proc = subprocess.Popen(_cli(config, "install"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**os.environ, PAUSE_HOOK: "30"})
    line = _wait_for_pause(proc, lambda path: True)
    assert "/backups/" in line, line
    proc.kill()
    proc.wait()
    r = _run(config, "install")
    assert r.returncode == 0, r.stderr
    assert _temps_in_state(state) == []


def test_a_backup_left_without_its_metadata_is_removed_by_a_later_run(
    config: Path, installed: bytes
) -> None:
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    proc = subprocess.Popen(_cli(config, "install"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**os.environ, PAUSE_HOOK: "0.25"})
    seen: list[str] = []
    _wait_for_pause(proc, lambda path: bool(seen.append(path)) or len(seen) == 2)
    assert ".meta.json" + TMP_MARK in Path(seen[1]).name, seen
    proc.kill()
    proc.wait()
    for _ in range(2):
        r = _run(config, _action_for(config.read_bytes(), ORIGINAL))
        assert r.returncode == 0, r.stderr
    listed = {b.file.name for b in Backups(state).all()} | {
        f"{b.id}.meta.json" for b in Backups(state).all()}
    on_disk = {n for n in os.listdir(state / "backups") if TMP_MARK not in n}
    assert on_disk <= listed, sorted(on_disk - listed)


# --- killed exactly between the complete temp file and the rename ----------------------------


def _wait_for_pause(proc: subprocess.Popen, wanted, timeout: float = 30.0) -> str:
    """Read the engine's test-hook lines until one names a path `wanted(path)` accepts."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if not ready:
            assert proc.poll() is None, f"exited {proc.returncode} before pausing"
            continue
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, f"exited {proc.wait()} before pausing: {buf.decode()}"
        buf += chunk
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.decode()
            if "pausing before rename of " in line and wanted(line.split("rename of ", 1)[1]):
                return line
    raise AssertionError(f"no pause line within {timeout} s: {buf.decode()}")


# Each write of a transaction passes the pause hook once: install writes the backup, its
# metadata, the journal, then daemon.json; uninstall (of the only recorded runtime) writes the
# backup, its metadata and daemon.json, then removes the journal. Killing at each point in
# turn covers every rename.
PAUSE_POINTS = [("install", k) for k in range(4)] + [("uninstall", k) for k in range(3)]


@pytest.mark.parametrize("action,point", PAUSE_POINTS)
def test_sigkill_before_each_rename_then_a_clean_run_converges(
    config: Path, installed: bytes, action: str, point: int
) -> None:
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    if action == "uninstall":
        assert _run(config, "install").returncode == 0
    old = config.read_bytes()
    new = installed if action == "install" else ORIGINAL
    proc = subprocess.Popen(_cli(config, action), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**os.environ, PAUSE_HOOK: "0.25"})
    seen: list[str] = []

    def nth(path: str) -> bool:
        seen.append(path)
        return len(seen) == point + 1

    # The hook sleeps 0.25 s before every rename, so earlier points pass on their own; the kill
    # is sent as soon as the wanted point's line arrives (it is written just before the sleep).
    # A kill that came too late would show as a renamed file and fail the test, not pass it.
    _wait_for_pause(proc, nth)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    staged = Path(seen[-1])
    is_config = staged.name.startswith(f".{config.name}{TMP_MARK}")
    config_renamed_before = any(Path(p).name.startswith(f".{config.name}{TMP_MARK}")
                                for p in seen[:-1])
    after = config.read_bytes()
    assert after == (new if config_renamed_before else old), seen
    if is_config:
        # Killed with a complete, fsynced temp file of the new content not yet renamed.
        assert staged.read_bytes() == new
        assert os.stat(staged).st_mode & 0o7777 == MODE

    r = _run(config, action)
    assert r.returncode == 0, r.stderr
    assert config.read_bytes() == new
    beside, extra = _leftovers(config.parent, state)
    assert beside == [] and extra == []
    if is_config:
        assert f"removed {staged}" in r.stderr + r.stdout, r.stderr
    # And the way back still gives the exact original bytes.
    if action == "install":
        assert _run(config, "uninstall").returncode == 0
        assert config.read_bytes() == ORIGINAL
