"""doctor learns which nvdocker2 a pip install's runtime launcher runs by asking it
`--version` (the launcher finds its package only when it runs)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .test_checks import WARN, assert_status

import nvdocker2
from nvdocker2.doctor.context import run_command
from nvdocker2.runtime.launcher import render_pip

REPO = Path(__file__).resolve().parents[3]


def test_version_of_a_pip_launcher_is_its_own_answer(host):
    site = host.path(f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages")
    shutil.copytree(REPO / "nvdocker2", site / "nvdocker2",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "nvdocker2" / "__init__.py").write_text('__version__ = "9.9.8"\n')
    host.exe("/usr/bin/nvdocker2", f"#!{sys.executable}\nimport sys\n")
    host.exe("/usr/bin/nvidia-container-runtime", render_pip()["nvidia-container-runtime"])

    def runner(argv, timeout, env):  # the commands doctor runs, inside the fake root
        if argv[0].startswith("/usr/bin/"):
            argv = [str(host.path(argv[0])), *argv[1:]]
        return run_command(argv, timeout, env)

    assert_status(host.run(runner=runner), "runtime.installed", WARN, "nvdocker2 9.9.8",
                  nvdocker2.__version__)
