"""Three renderings of the same list of `CheckResult`s: a rich table for a terminal, plain text
when piped, and JSON (SPEC §5: a list of {"id", "status", "detail", "hint"})."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TextIO

from nvdocker2.doctor.registry import FAIL, OK, SKIP, STATUSES, WARN, CheckResult
from nvdocker2.oneline import one_line

STYLES = {OK: "green", WARN: "yellow", FAIL: "bold red", SKIP: "dim"}


def render_json(results: Sequence[CheckResult]) -> str:
    return json.dumps([r.as_json() for r in results], indent=2, ensure_ascii=False) + "\n"


def summary(results: Sequence[CheckResult]) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in STATUSES}
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES)


def render_plain(results: Sequence[CheckResult]) -> str:
    """One line per check (status, id, detail), the hint indented below; grep-friendly."""
    width = max((len(r.id) for r in results), default=0)
    lines = []
    for r in results:
        lines.append(f"{r.status:<4}  {r.id:<{width}}  {one_line(r.detail)}")
        if r.hint:
            lines.append(f"{'':<4}  {'':<{width}}  hint: {one_line(r.hint)}")
    lines.append(summary(results))
    return "\n".join(lines) + "\n"


def render_table(results: Sequence[CheckResult], stream: TextIO) -> None:
    """A rich table; colour unless NO_COLOR is set (rich also reads NO_COLOR itself)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, no_color="NO_COLOR" in os.environ, highlight=False)
    table = Table(show_lines=False, header_style="bold", expand=True)
    table.add_column("check", ratio=2, overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("detail", ratio=4, overflow="fold")
    table.add_column("fix", ratio=3, overflow="fold")
    for r in results:
        name = Text(r.title)
        name.append(f"\n{r.id}", style="dim")
        table.add_row(
            name, Text(r.status, style=STYLES[r.status]), Text(r.detail), Text(r.hint or "")
        )
    console.print(table)
    console.print(
        summary(results),
        style="bold red" if any(r.status == FAIL for r in results) else "bold green",
    )


def render(results: Sequence[CheckResult], stream: TextIO, as_json: bool) -> None:
    """JSON when asked, the table on a terminal, plain text otherwise."""
    if as_json:
        stream.write(render_json(results))
    elif stream.isatty():
        render_table(results, stream)
    else:
        stream.write(render_plain(results))
    stream.flush()
