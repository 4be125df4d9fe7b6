"""scripts/matrix.py (`make matrix`): its table and its answer to a platform it does not know.
The platforms themselves run in tests/platforms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

import matrix  # noqa: E402


def test_an_unknown_platform_is_one_error_and_a_hint_exit_2():
    proc = subprocess.run([sys.executable, str(REPO / "scripts/matrix.py"), "bullseye"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: unknown platform bullseye",
        "hint: choose from bookworm, trixie, sid",
    ]
    assert proc.stdout == ""


def test_the_table_has_one_row_per_platform_and_one_reason_line_per_failure(tmp_path):
    log = tmp_path / "sid.log"
    log.write_text("..F\nFAILED tests/platforms/test_platform.py::test_x[sid] - boom\n"
                   "1 failed, 2 passed in 3.00s\n")
    rows = [
        matrix.Row(matrix.trees.SUITES["bookworm"], "pass", "13/13", 173.2),
        matrix.Row(matrix.trees.SUITES["sid"], "fail", "2/3", 9.6,
                   matrix.first_problem(log), log),
    ]
    lines = matrix.table(rows).splitlines()
    assert lines[0].split() == ["platform", "Docker", "containerd", "Python", "result",
                                "tests", "time"]
    assert lines[1].split() == ["Debian", "12", "(bookworm)", "20.10", "1.6", "3.11", "pass",
                                "13/13", "173s"]
    assert lines[2].split() == ["Debian", "sid", "(sid)", "28.5", "2.1", "3.14", "fail", "2/3",
                                "10s"]
    assert lines[3:] == [
        "Debian sid (sid): fail: FAILED tests/platforms/test_platform.py::test_x[sid] - boom"]
