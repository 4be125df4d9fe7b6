"""The vertical slice through the real console script: install then uninstall with --reload none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, timeout=60)


def test_install_then_uninstall_gives_back_the_same_bytes(tmp_path):
    cfg = tmp_path / "daemon.json"
    original = (
        b'{\n  "debug": true,\n  "runtimes": {\n    "kata": {\n'
        b'      "runtimeType": "io.containerd.kata.v2",\n'
        b'      "options": {"Size": 12345678901234567890, "Ratio": 0.10}\n    }\n  }\n}\n'
    )
    cfg.write_bytes(original)
    r = run(
        "install",
        "--config",
        str(cfg),
        "--runtime-path",
        "/usr/bin/nvidia-container-runtime", "--allow-missing-runtime",
        "--reload",
        "none",
        "--no-verify",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["changed"] is True and out["reload"] == "none" and out["backup"]
    assert cfg.read_bytes() == original[:-7] + (
        b',\n    "nvidia": {\n      "path": "/usr/bin/nvidia-container-runtime"\n    }\n  }\n}\n'
    )
    r = run("uninstall", "--config", str(cfg), "--reload", "none", "--no-verify")
    assert r.returncode == 0, r.stderr
    assert cfg.read_bytes() == original
