"""One writer at a time, at scale (docs/reference.md §2, "One writer at a time").

64 `nvdocker2 install` processes started at once, each adding its own runtime, must all land:
none lost to a read-modify-write race, every other key kept. Then 16 uninstalls at once must
remove exactly their 16 runtimes. (A writer holding the lock forever is test_concurrency.py's.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nvdocker2.store.backups import Backups, KEEP_BACKUPS
from nvdocker2.store.journal import Journal

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
                            f"/opt/{n}/runc", "--allow-missing-runtime", "--timeout",
                            "240") for n in names])
    for r in done:
        assert r.returncode == 0, f"{r.args}: {r.stderr}"
    data = json.loads(config.read_bytes())
    assert set(data["runtimes"]) == {"custom", *names}
    for n in names:
        assert data["runtimes"][n] == {"path": f"/opt/{n}/runc"}
    assert data["runtimes"]["custom"] == {"path": "/opt/c/runc"}
    assert (data["log-level"], data["storage-driver"]) == ("warn", "overlay2")
    head = b'{\n\t"log-level": "warn",\n\t"runtimes": {\n\t\t"custom"'
    assert config.read_bytes().startswith(head)
    # One backup per write, the newest KEEP_BACKUPS kept, each a complete earlier state.
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    backups = Backups(state).all(config)
    assert len(backups) == KEEP_BACKUPS
    sizes = sorted(len(json.loads(Backups(state).read(b))["runtimes"]) for b in backups)
    assert sizes == list(range(WRITERS + 1 - KEEP_BACKUPS, WRITERS + 1))

    gone, kept = names[::4], [n for n in names if n not in names[::4]]
    done = _start_all([_cli(config, "uninstall", "--runtime-name", n, "--timeout", "240")
                       for n in gone])
    for r in done:
        assert r.returncode == 0, f"{r.args}: {r.stderr}"
    data = json.loads(config.read_bytes())
    assert set(data["runtimes"]) == {"custom", *kept}
    assert sorted(os.listdir(tmp_path)) == ["daemon.json", "state"]
    journal = json.loads(Journal(state, config).read_bytes() or b"{}")
    assert set(journal["runtimes"]) == set(kept)
