"""nvdocker2 supports Python 3.9–3.13: no syntax, module or annotation newer than 3.9.

Only Debian 12's Python 3.11 runs the suite here, so vermin (a static analyser of the minimum
Python version) checks the whole package against 3.9.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nvdocker2"


@pytest.mark.slow
def test_package_needs_nothing_newer_than_python_3_9():
    try:
        import vermin  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("vermin is not installed (scripts/setup.sh installs it)", pytrace=False)
        pytest.skip("vermin is not installed")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "vermin"), "--target=3.9-", "--eval-annotations",
         "--no-tips", "--violations", str(PACKAGE)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
