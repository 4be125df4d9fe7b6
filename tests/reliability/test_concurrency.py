"""Many writers at once: the lock serialises them and no change is lost; a writer that cannot
get the lock in time gives up with exit 3 and touches nothing."""

from __future__ import annotations

import json
import os
import subprocess

from filelock import FileLock

from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal

from .conftest import NVDOCKER2

RT = "/usr/bin/nvidia-container-runtime"


def test_16_parallel_installs_all_land(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(b'{\n  "debug": true\n}\n')
    procs = [
        subprocess.Popen(
            [
                str(NVDOCKER2),
                "install",
                "--config",
                str(cfg),
                "--runtime-name",
                f"rt{i}",
                "--runtime-path",
                f"/opt/rt{i}/bin/runtime", "--allow-missing-runtime",
                "--reload",
                "none",
                "--no-verify",
                "--timeout",
                "120",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(16)
    ]
    results = [(p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in procs]
    for code, out, err in results:
        assert code == 0, err
        assert json.loads(out)["changed"] is True
    data = json.loads(cfg.read_bytes())
    assert data["debug"] is True
    assert data["runtimes"] == {
        f"rt{i}": {"path": f"/opt/rt{i}/bin/runtime"} for i in range(16)
    } or sorted(data["runtimes"]) == sorted(f"rt{i}" for i in range(16))
    for i in range(16):
        assert data["runtimes"][f"rt{i}"] == {"path": f"/opt/rt{i}/bin/runtime"}
    assert cfg.read_bytes().startswith(b'{\n  "debug": true,\n  "runtimes": {\n    "rt')
    assert os.listdir(etc) == ["daemon.json"]
    assert len(Backups(tmp_path / "state").all(cfg)) == 16
    journal = Journal(tmp_path / "state", cfg).load()
    assert sorted(journal["runtimes"]) == sorted(f"rt{i}" for i in range(16))


def test_writer_holding_the_lock_makes_others_exit_3_untouched(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(b"{}\n")
    state = tmp_path / "state"
    state.mkdir()
    holder = FileLock(str(state / "lock"))
    holder.acquire()
    try:
        procs = [
            subprocess.Popen(
                [
                    str(NVDOCKER2),
                    "install",
                    "--config",
                    str(cfg),
                    "--runtime-name",
                    f"rt{i}",
                    "--runtime-path",
                    RT, "--allow-missing-runtime",
                    "--reload",
                    "none",
                    "--no-verify",
                    "--timeout",
                    "1",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        for p in procs:
            assert p.wait(timeout=60) == 3
            err = p.stderr.read()
            assert (
                "another nvdocker2 is changing the configuration" in err
                and "gave up after 1 s" in err
            )
            assert "hint: " in err
    finally:
        holder.release()
    assert cfg.read_bytes() == b"{}\n"
    assert os.listdir(etc) == ["daemon.json"]
    assert Backups(state).all() == []
