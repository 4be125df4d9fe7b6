"""`nvdocker2 doctor`: diagnose a GPU container host and say how to fix each problem (reference §5).

The model (`model.py`: a check, its dependencies, the runner) and the report (`render.py`) are
the same for every engine; the host's checks (driver, toolkit, CDI specs) are here. An engine's
front builds its `CheckPlan` (its checks and its facts) and hands it to `report`. Nothing here
imports an engine.
"""

from __future__ import annotations

import sys
from typing import TextIO

from nvdocker2.doctor.model import CheckPlan, CheckResult, exit_code, run_checks
from nvdocker2.doctor.render import render

__all__ = ["CheckPlan", "CheckResult", "report", "run_engine_checks"]


def report(plan: CheckPlan, stream: TextIO | None = None, as_json: bool = False,
           verbose: bool = False) -> int:
    """Run the plan's checks, render them to `stream` (stdout) and return the exit code: 0
    when nothing failed, 1 otherwise. `verbose`: every check on its own line, with what it
    found."""
    results = run_checks(plan.facts, plan.checks)
    render(results, stream or sys.stdout, as_json, verbose)
    return exit_code(results)


def run_engine_checks(plan: CheckPlan, as_json: bool, verbose: bool = False) -> int:
    """An engine front's `doctor`: its plan reported on stdout."""
    return report(plan, sys.stdout, as_json, verbose)
