"""scripts/demo.py as a person runs it: on a private dockerd, it ends with one line saying
what it proved, and exits 0 only when it proved all of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_proves_what_its_last_line_says(e2e_prerequisites):
    proc = subprocess.run([sys.executable, str(REPO / "scripts/demo.py")], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[-1] == (
        "demo: proved: nvidia runtime installed into a live dockerd and verified; a running "
        "container untouched; a container ran through it; a hostile GPU request refused; "
        "re-install a no-op; uninstall restored daemon.json byte for byte."
    )
    assert "verified: yes, dockerd reports the change" in lines
    assert "daemon.json byte-identical to before the install: True" in lines
    assert any("nvidia-container-runtime-hook: error: NVIDIA_VISIBLE_DEVICES: invalid device id"
               in line for line in lines)
    doctor = lines.index(next(x for x in lines if x.startswith("$ ") and " doctor " in x))
    assert " fail, " in lines[doctor + 1] and "checks)" in lines[doctor + 1]


def test_a_demo_that_could_not_show_everything_says_what_is_missing():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import demo
    finally:
        sys.path.remove(str(REPO / "scripts"))
    proved = dict.fromkeys(demo.CLAIMS, True)
    proved["restored"] = False
    del proved["refused"]
    assert demo.conclusion(proved) == (
        "demo: FAILED to show: a hostile GPU request refused; uninstall restored daemon.json "
        "byte for byte."
    )
    assert demo.conclusion({}).startswith("demo: FAILED to show: nvidia runtime installed")
