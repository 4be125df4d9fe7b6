"""Two renderings of the same list of `CheckResult`s: a report for people, and JSON (a summary
of counts by status beside the list of {"id", "status", "detail", "hint"}).

The report reads at a glance: one summary line first (the counts and the failure to fix
first), then failures, warnings and skips with their fixes, then the checks that passed as one
list of ids (`verbose`: one line each, with what they found). Lines are wrapped at word
boundaries to the terminal's width (`COLUMNS`, else the terminal's own); a path or other long
word is never broken, and piped output without `COLUMNS` is not wrapped at all, one line per
row for grep. Colour only on a terminal, and not when `NO_COLOR` is set.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Sequence
from typing import TextIO

from nvdocker2.doctor.model import FAIL, OK, SKIP, WARN, CheckResult
from nvdocker2.oneline import one_line

# Report order and colours (SGR parameters).
ORDER = (FAIL, WARN, SKIP, OK)
COLOURS = {FAIL: "1;31", WARN: "33", SKIP: "2", OK: "32"}
HINT = "hint: "


def render_json(results: Sequence[CheckResult]) -> str:
    """`{"summary": {...}, "checks": [...]}`: the counts by status, the total and the id of
    the check to fix first (null: none), beside the list of every check's result."""
    top = first_to_fix(results)
    counts = {s: sum(1 for r in results if r.status == s) for s in ORDER}
    out = {"summary": dict(counts, total=len(results), first_to_fix=top.id if top else None),
           "checks": [r.as_json() for r in results]}
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def _blocked(results: Sequence[CheckResult], check_id: str) -> list[CheckResult]:
    """The checks skipped because `check_id` failed or was skipped (see model._blocked_by)."""
    prefix = f"skipped: needs {check_id}, which "
    return [r for r in results if r.status == SKIP and r.detail.startswith(prefix)]


def _blocked_all(results: Sequence[CheckResult], check_id: str) -> int:
    """How many checks `check_id` blocks, directly or through the checks it blocks."""
    seen: set[str] = set()
    todo = [check_id]
    while todo:
        for r in _blocked(results, todo.pop()):
            if r.id not in seen:
                seen.add(r.id)
                todo.append(r.id)
    return len(seen)


def first_to_fix(results: Sequence[CheckResult]) -> CheckResult | None:
    """The most important problem: of the failures, the one that blocks the most other checks,
    directly or through those it blocks (the first in report order on a tie); without failures,
    the first warning."""
    fails = [r for r in results if r.status == FAIL]
    if fails:
        return max(fails, key=lambda r: (_blocked_all(results, r.id), -fails.index(r)))
    return next((r for r in results if r.status == WARN), None)


def summary(results: Sequence[CheckResult]) -> str:
    """`8 fail, 1 warn, 10 ok, 10 skip (29 checks); fix first: ID: DETAIL`."""
    counts = ", ".join(f"{sum(1 for r in results if r.status == s)} {s}" for s in ORDER)
    line = f"{counts} ({_checks(len(results))})"
    top = first_to_fix(results)
    if top is None:
        return line + ": nothing to fix"
    return line + f"; {'fix first' if top.status == FAIL else 'warning'}: {top.id}: {top.detail}"


def _checks(n: int) -> str:
    return f"{n} check" if n == 1 else f"{n} checks"


class _Writer:
    def __init__(self, width: int | None, colour: bool) -> None:
        self.width = width
        self.colour = colour
        self.lines: list[str] = []

    def paint(self, text: str, status: str) -> str:
        return f"\x1b[{COLOURS[status]}m{text}\x1b[0m" if self.colour else text

    def add(self, text: str, first: str = "", indent: int = 0, status: str | None = None) -> None:
        """`first` + `text`, wrapped at word boundaries, continuation lines indented; the
        status word at the start of `first` coloured. Control characters in `text` (from
        files, argv, other processes) are escaped, so a row never breaks into forged lines."""
        text = one_line(text)
        if self.width is None:
            out = [first + text]
        else:
            out = textwrap.wrap(
                text, width=max(self.width, indent + 20), initial_indent=first,
                subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False,
            ) or [first.rstrip()]
        if status is not None:
            out[0] = self.paint(out[0][: len(status)], status) + out[0][len(status):]
        self.lines.extend(out)


def render_report(
    results: Sequence[CheckResult], width: int | None = None, colour: bool = False,
    verbose: bool = False,
) -> str:
    """The report for people (see the module docstring)."""
    w = _Writer(width, colour)
    w.add(summary(results), indent=2)
    if colour:  # the summary's first line in the colour of the worst status
        worst = next((st for st in (FAIL, WARN) if any(r.status == st for r in results)), OK)
        w.lines[0] = w.paint(w.lines[0], worst)
    shown = [r for s in ORDER for r in results if r.status == s and (verbose or s in (FAIL, WARN))]
    # Without --verbose, skips caused by the same failed check are one row.
    grouped: dict[str, list[CheckResult]] = {}
    if not verbose:
        for r in results:
            if r.status == SKIP:
                grouped.setdefault(r.detail if r.detail.startswith("skipped: needs ") else r.id,
                                   []).append(r)
    oks = [r.id for r in results if r.status == OK]
    labels = [r.id for r in shown] + [g[0].id if len(g) == 1 else _checks(len(g))
                                      for g in grouped.values()]
    if oks and not verbose:
        labels.append(_checks(len(oks)))
    col = max((len(i) for i in labels), default=0)
    indent = 6 + col + 2
    if results:
        w.lines.append("")

    def row(r: CheckResult) -> None:
        w.add(r.detail, f"{r.status:<4}  {r.id:<{col}}  ", indent, r.status)
        if r.hint:
            w.add(HINT + r.hint, " " * indent, indent)

    for r in shown:
        if r.status in (FAIL, WARN):
            row(r)
    for reason, group in grouped.items():
        if len(group) == 1:
            row(group[0])
        else:
            names = " ".join(r.id for r in group)
            w.add(f"{reason.replace('skipped: needs', 'need', 1)}: {names}",
                  f"{SKIP:<4}  {_checks(len(group)):<{col}}  ", indent, SKIP)
    for r in shown:
        if r.status in (SKIP, OK):
            row(r)
    if oks and not verbose:
        w.add(" ".join(oks) + " (--verbose: what each found)",
              f"{OK:<4}  {_checks(len(oks)):<{col}}  ", indent, OK)
    return "\n".join(w.lines) + "\n"


def _width(stream: TextIO) -> int | None:
    """COLUMNS when set, else the terminal's width; None (no wrapping) when piped."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stream.isatty():
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80
    return None


def render(
    results: Sequence[CheckResult], stream: TextIO, as_json: bool, verbose: bool = False
) -> None:
    """JSON when asked, else the report (coloured on a terminal unless NO_COLOR is set)."""
    if as_json:
        stream.write(render_json(results))
    else:
        colour = stream.isatty() and "NO_COLOR" not in os.environ
        stream.write(render_report(results, _width(stream), colour, verbose))
    stream.flush()
