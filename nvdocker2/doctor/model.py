"""The one doctor model every engine uses: a `Check` has an id, a one-line title, the ids of the
checks it depends on and a function of one run's facts; `run_checks` runs a list of them in
dependency order and returns one `CheckResult` a check, in the list's order.

A check whose dependency failed or was skipped is not run: it is skipped and says which
dependency and why, so a host without a daemon still gets every other answer. Checks never
print: `render.py` turns the results into the report for people or JSON.

Standard library only, and no engine: an engine's front builds its list of checks and the
object they read (its facts), and hands both to `run_checks`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

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
    """One check: `func` reads the run's facts and returns an Outcome. `needs`: checks whose
    failure or skip skips this one; `blocked_by`: checks whose failure alone (a skip does not)
    skips it. `smoke`: runs only when asked for (it starts containers)."""

    id: str
    title: str
    func: Callable[[Any], Outcome]
    needs: tuple[str, ...] = ()
    smoke: bool = False
    blocked_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckPlan:
    """What an engine's front hands the doctor: its checks and the facts they read."""

    facts: Any
    checks: Sequence[Check]


class Checks(list):  # type: ignore[type-arg]
    """A module's checks in report order; `@CHECKS.check(id, title, ...)` adds one."""

    def check(
        self, id: str, title: str, needs: Iterable[str] = (), smoke: bool = False,
        blocked_by: Iterable[str] = (),
    ) -> Callable[[Callable[[Any], Outcome]], Callable[[Any], Outcome]]:
        def add(func: Callable[[Any], Outcome]) -> Callable[[Any], Outcome]:
            self.append(Check(id, title, func, tuple(needs), smoke, tuple(blocked_by)))
            return func

        return add


_MEMO = threading.Lock()  # makes each Facts object's memo once
T = TypeVar("T")


class Facts:
    """What the checks of one run read: each fact computed at most once (by the first caller),
    shared between threads. `prefetch` may start slow facts in the background; `close` waits
    for them. An engine's facts subclass this."""

    def fact(self, key: str, compute: Callable[[], T]) -> T:
        """The value of fact `key`, computed once (an exception too is kept and raised again)."""
        with _MEMO:
            lock, memo = self.__dict__.setdefault("_memo", (threading.Lock(), {}))
        with lock:
            fut = memo.get(key)
            owner = fut is None
            if owner:
                fut = memo[key] = Future()
        if owner:
            try:
                fut.set_result(compute())
            except BaseException as exc:
                fut.set_exception(exc)
        return fut.result()

    def prefetch(self) -> None:
        """Start the slow facts (none here)."""

    def close(self) -> None:
        """Wait for what `prefetch` started (nothing here)."""


def run_order(checks: Sequence[Check]) -> list[Check]:
    """`checks` in an order that runs every check after those it depends on, otherwise in the
    list's order. ValueError for an id given twice, a dependency not in the list, or a cycle:
    those are bugs in an engine's list, not facts about the host."""
    index: dict[str, int] = {}
    for i, c in enumerate(checks):
        if c.id in index:
            raise ValueError(f"check {c.id} is listed twice")
        index[c.id] = i
    for c in checks:
        for dep in c.needs + c.blocked_by:
            if dep not in index:
                raise ValueError(f"check {c.id} depends on {dep}, which is not in the list")
    done: set[str] = set()
    order: list[Check] = []
    while len(order) < len(checks):
        ready = next((c for c in checks if c.id not in done
                      and all(d in done for d in c.needs + c.blocked_by)), None)
        if ready is None:
            left = ", ".join(c.id for c in checks if c.id not in done)
            raise ValueError(f"checks depend on each other in a cycle: {left}")
        done.add(ready.id)
        order.append(ready)
    return order


def run_checks(facts: Any, checks: Sequence[Check]) -> list[CheckResult]:
    """Run `checks` against `facts` and return one result a check, in the list's order.

    `facts.prefetch()` first (slow facts start concurrently), `facts.close()` at the end. A
    check that raises is reported as failed with the exception, not allowed to end the run
    (NVDOCKER2_DEBUG=1 lets it raise, for a traceback).
    """
    order = run_order(checks)
    facts.prefetch()
    results: dict[str, CheckResult] = {}
    try:
        for c in order:
            outcome = _blocked_by(c, results)
            if outcome is None:
                try:
                    outcome = c.func(facts)
                except Exception as exc:  # a bug in one check must not hide the others
                    if os.environ.get("NVDOCKER2_DEBUG") == "1":
                        raise
                    outcome = fail(
                        f"the check itself crashed: {type(exc).__name__}: {exc}",
                        "run with NVDOCKER2_DEBUG=1 for a traceback and report it as a bug",
                    )
            results[c.id] = CheckResult(c.id, c.title, outcome.status, outcome.detail, outcome.hint)
    finally:
        facts.close()
    return [results[c.id] for c in checks]


def _blocked_by(c: Check, results: dict[str, CheckResult]) -> Outcome | None:
    for need in c.needs:
        r = results[need]
        if r.status in (FAIL, SKIP):
            why = "failed" if r.status == FAIL else "was skipped"
            return skip(f"skipped: needs {need}, which {why}")
    for need in c.blocked_by:
        if results[need].status == FAIL:
            return skip(f"skipped: needs {need}, which failed")
    return None


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 when nothing failed, 1 otherwise."""
    return 1 if any(r.status == FAIL for r in results) else 0
