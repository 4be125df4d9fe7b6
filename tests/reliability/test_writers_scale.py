"""One writer at a time, at scale (SPEC §2, "One writer at a time").

64 `nvdocker2 install` processes started at once, each adding its own runtime, must all land:
none lost to a read-modify-write race, every other key kept. Then 16 uninstalls at once must
remove exactly their 16 runtimes. A writer that holds the lock and never lets go makes the
others give up after --timeout with exit 3 and the file untouched; once it dies, the next run
goes through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from nvdocker2.daemonjson import store

WRITERS = 64
ORIGINAL = (
    b'{\n\t"log-level": "warn",\n\t"runtimes": {\n\t\t"custom": {"path": "/opt/c/runc"}\n\t},\n'
    b'\t"storage-driver": "overlay2"\n}\n'
)


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "nvdocker2", *args, "--config", str(config),
            "--reload", "none", "--no-verify"]


def _start_all(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in argvs]
    out = []
    for a, p in zip(argvs, procs):
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(a, p.returncode, stdout, stderr))
    return out


def test_64_simultaneous_installs_lose_nothing_and_16_uninstalls_remove_exactly_theirs(
    tmp_path: Path,
) -> None:
    config = tmp_path / "daemon.json"
    config.write_bytes(ORIGINAL)
    names = [f"rt{i:02d}" for i in range(WRITERS)]

    done = _start_all([_cli(config, "install", "--runtime-name", n, "--runtime-path",
                            f"/opt/{n}/runc", "--timeout", "240") for n in names])
    for r in done:
        assert r.returncode == 0, f"{r.args}: {r.stderr}"
    data = json.loads(config.read_bytes())
    assert set(data["runtimes"]) == {"custom", *names}
    for n in names:
        assert data["runtimes"][n] == {"path": f"/opt/{n}/runc"}
    assert data["runtimes"]["custom"] == {"path": "/opt/c/runc"}
    assert (data["log-level"], data["storage-driver"]) == ("warn", "overlay2")
    assert config.read_bytes().startswith(b'{\n\t"log-level": "warn",\n\t"runtimes": {\n\t\t"custom"')
    # One backup per write, the newest KEEP_BACKUPS kept, each a complete earlier state.
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    backups = store.Backups(state).all(config)
    assert len(backups) == store.KEEP_BACKUPS
    sizes = sorted(len(json.loads(store.Backups(state).read(b))["runtimes"]) for b in backups)
    assert sizes == list(range(WRITERS + 1 - store.KEEP_BACKUPS, WRITERS + 1))

    gone, kept = names[::4], [n for n in names if n not in names[::4]]
    done = _start_all([_cli(config, "uninstall", "--runtime-name", n, "--timeout", "240")
                       for n in gone])
    for r in done:
        assert r.returncode == 0, f"{r.args}: {r.stderr}"
    data = json.loads(config.read_bytes())
    assert set(data["runtimes"]) == {"custom", *kept}
    assert sorted(os.listdir(tmp_path)) == ["daemon.json", "state"]
    journal = json.loads(store.Journal(state, config).read_bytes() or b"{}")
    assert set(journal["runtimes"]) == set(kept)


HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(3600)
"""


def test_a_writer_holding_the_lock_forever_makes_the_others_exit_3_after_timeout(
    tmp_path: Path,
) -> None:
    config = tmp_path / "daemon.json"
    config.write_bytes(ORIGINAL)
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    state.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(state / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        done = _start_all([_cli(config, "install", "--runtime-name", f"w{i}", "--runtime-path",
                                "/usr/bin/runc", "--timeout", "1.5") for i in range(8)])
        elapsed = time.monotonic() - t0
        for r in done:
            assert r.returncode == 3, f"{r.args}: exit {r.returncode}: {r.stderr}"
            lines = r.stderr.splitlines()
            assert lines[0].startswith("error: another nvdocker2 is changing the configuration")
            assert "gave up after 1.5 s" in lines[0] and str(state / "lock") in lines[0]
            assert lines[1].startswith("hint: ")
            assert len(lines) == 2
        assert elapsed >= 1.5
        assert config.read_bytes() == ORIGINAL
        assert sorted(os.listdir(tmp_path)) == ["daemon.json", "state"]
        assert store.Backups(state).all() == []
    finally:
        holder.kill()
        holder.wait()
    # The holder died without releasing: the kernel dropped its lock, the next run goes through.
    r = subprocess.run(_cli(config, "install", "--runtime-path", "/usr/bin/runc", "--timeout",
                            "5"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(config.read_bytes())["runtimes"]["nvidia"] == {"path": "/usr/bin/runc"}
