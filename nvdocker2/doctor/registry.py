"""The check registry: each check is a small function with an id and a one-line title that
returns an outcome; `run_checks` turns them into `CheckResult`s in registry order.

Checks never print: the renderers in `render.py` turn the same list into the report for people
or JSON. A check may name the checks it needs: when one of those failed or was skipped, it is
skipped too and says why, so a host without dockerd still gets every other answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from nvdocker2.doctor.context import Context

OK = "ok"
WARN = "warn"
FAIL = "fail"
SKIP = "skip"
STATUSES = (OK, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Outcome:
    """What a check found: status, one-line detail and, for warn/fail, how to fix it."""

    status: str
    detail: str
    hint: str | None = None


def ok(detail: str) -> Outcome:
    return Outcome(OK, detail)


def warn(detail: str, hint: str) -> Outcome:
    return Outcome(WARN, detail, hint)


def fail(detail: str, hint: str) -> Outcome:
    return Outcome(FAIL, detail, hint)


def skip(detail: str) -> Outcome:
    return Outcome(SKIP, detail)


@dataclass(frozen=True)
class CheckResult:
    """One line of the doctor's report (docs/reference.md §5: id, status, detail, hint)."""

    id: str
    title: str
    status: str
    detail: str
    hint: str | None = None

    def as_json(self) -> dict:
        return {"id": self.id, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    func: Callable[[Context], Outcome]
    needs: tuple[str, ...] = ()
    smoke: bool = False
    blocked_by: tuple[str, ...] = ()  # earlier checks whose failure (not skip) skips this one


REGISTRY: list[Check] = []


def check(
    id: str, title: str, needs: Iterable[str] = (), smoke: bool = False,
    blocked_by: Iterable[str] = (),
) -> Callable[[Callable[[Context], Outcome]], Callable[[Context], Outcome]]:
    """Register the decorated function as check `id`; `needs` are ids of earlier checks, and
    `blocked_by` earlier checks whose failure alone (a skip does not) skips it."""

    def register(func: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        if any(c.id == id for c in REGISTRY):
            raise ValueError(f"check {id} registered twice")
        REGISTRY.append(Check(id, title, func, tuple(needs), smoke, tuple(blocked_by)))
        return func

    return register


def all_checks(smoke: bool = False) -> list[Check]:
    """Every registered check in report order (the smoke checks only when asked for)."""
    from nvdocker2.engines.docker.doctor import (  # noqa: F401  (importing registers them)
        checks_config,
        checks_dockerd,
    )
    from nvdocker2.doctor import checks_driver, checks_smoke, checks_toolkit  # noqa: F401
    from nvdocker2.doctor import checks_nvidia_config  # noqa: F401
    from nvdocker2.doctor import checks_cdi_nodes  # noqa: F401  (every reader's specs)
    from nvdocker2.engines.docker.doctor import checks_cdi  # noqa: F401  (CDI mode comes last)

    return [c for c in REGISTRY if smoke or not c.smoke]


def run_checks(ctx: Context, checks: Iterable[Check] | None = None) -> list[CheckResult]:
    """Run `checks` (default: all) against `ctx` and return one result per check.

    Slow facts (the Engine API, external commands) are started concurrently first. A check
    that raises is reported as failed with the exception, not allowed to end the run
    (NVDOCKER2_DEBUG=1 lets it raise, for a traceback).
    """
    selected = list(checks) if checks is not None else all_checks(ctx.smoke)
    ctx.prefetch()
    results: dict[str, CheckResult] = {}
    try:
        for c in selected:
            outcome = _blocked_by(c, results)
            if outcome is None:
                try:
                    outcome = c.func(ctx)
                except Exception as exc:  # a bug in one check must not hide the others
                    if os.environ.get("NVDOCKER2_DEBUG") == "1":
                        raise
                    outcome = fail(
                        f"the check itself crashed: {type(exc).__name__}: {exc}",
                        "run with NVDOCKER2_DEBUG=1 for a traceback and report it as a bug",
                    )
            results[c.id] = CheckResult(c.id, c.title, outcome.status, outcome.detail, outcome.hint)
    finally:
        ctx.close()
    return list(results.values())


def _blocked_by(c: Check, results: dict[str, CheckResult]) -> Outcome | None:
    for need in c.needs:
        r = results.get(need)
        if r is not None and r.status in (FAIL, SKIP):
            why = "failed" if r.status == FAIL else "was skipped"
            return skip(f"skipped: needs {need}, which {why}")
    for need in c.blocked_by:
        r = results.get(need)
        if r is not None and r.status == FAIL:
            return skip(f"skipped: needs {need}, which failed")
    return None
