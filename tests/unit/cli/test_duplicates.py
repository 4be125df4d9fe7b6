"""Duplicate keys in daemon.json through the real CLI: dockerd (Go's encoding/json) reads the
last occurrence, so nvdocker2 edits that one and keeps the earlier ones byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
RT = "/usr/bin/nvidia-container-runtime"

DUPLICATED = (
    b'{\n    "log-level": "warn",\n    "debug": false,\n    "log-level": "info"\n}\n'
)
INSTALLED = (
    b'{\n    "log-level": "warn",\n    "debug": false,\n    "log-level": "info",\n'
    b'    "runtimes": {\n        "nvidia": {\n'
    b'            "path": "/usr/bin/nvidia-container-runtime"\n'
    b'        }\n    },\n    "default-runtime": "nvidia"\n}\n'
)


def nvdocker2(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NVDOCKER2_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_install_keeps_the_earlier_duplicate_and_uninstall_gives_the_bytes_back(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(DUPLICATED)
    flags = ["--config", str(cfg), "--reload", "none"]

    dry = nvdocker2(tmp_path, "install", *flags, "--runtime-path", RT, "--allow-missing-runtime",
                    "--set-default",
                    "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert '-    "log-level": "info"\n+    "log-level": "info",\n' in dry.stdout
    assert '"log-level": "warn"' not in "".join(
        line for line in dry.stdout.splitlines(keepends=True) if line[:1] in "+-"
    )
    assert cfg.read_bytes() == DUPLICATED

    done = nvdocker2(tmp_path, "install", *flags, "--runtime-path", RT, "--allow-missing-runtime",
                     "--set-default")
    assert done.returncode == 0, done.stderr
    assert cfg.read_bytes() == INSTALLED
    assert ('duplicate key(s) "log-level": dockerd reads the last one, nvdocker2 edits the '
            "last one and keeps the earlier ones as written") in done.stderr

    undone = nvdocker2(tmp_path, "uninstall", *flags)
    assert undone.returncode == 0, undone.stderr
    assert cfg.read_bytes() == DUPLICATED


def test_a_duplicated_runtime_entry_is_replaced_in_its_last_occurrence(tmp_path):
    cfg = tmp_path / "daemon.json"
    before = b'{"runtimes": {"nvidia": {"path": "/opt/old"}, "nvidia": {"path": "/opt/newer"}}}\n'
    cfg.write_bytes(before)
    r = nvdocker2(tmp_path, "install", "--config", str(cfg), "--reload", "none",
                  "--runtime-path", RT, "--allow-missing-runtime")
    assert r.returncode == 0, r.stderr
    assert cfg.read_bytes() == (
        b'{"runtimes": {"nvidia": {"path": "/opt/old"}, "nvidia": {"path": "' + RT.encode()
        + b'"}}}\n'
    )
