"""How waiting for dockerd is shown: plain lines when nobody watches a terminal.

The daemon code only calls a `Reporter`; the CLI picks one with `reporter_for(stream)`, tests
pass a `RecordingReporter`. Rendering never decides anything. On a terminal the CLI's own
spinner runs around verify, so only notes are printed there.
"""

from __future__ import annotations

import sys
from typing import Protocol, TextIO


class Reporter(Protocol):
    def note(self, line: str) -> None:
        """One line the user should read (what was picked, a warning, what to run)."""

    def waiting(self, elapsed: float, status: str) -> None:
        """Called on every poll while verify waits; `status` says what dockerd reports now."""

    def done(self, ok: bool, status: str) -> None:
        """The wait is over; `status` is the outcome in a few words."""


class SilentReporter:
    def note(self, line: str) -> None:
        return None

    def waiting(self, elapsed: float, status: str) -> None:
        return None

    def done(self, ok: bool, status: str) -> None:
        return None


class RecordingReporter:
    """Keeps everything it is told (tests; --json runs that print notes afterwards)."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.waits: list[tuple[float, str]] = []
        self.results: list[tuple[bool, str]] = []

    def note(self, line: str) -> None:
        self.notes.append(line)

    def waiting(self, elapsed: float, status: str) -> None:
        self.waits.append((elapsed, status))

    def done(self, ok: bool, status: str) -> None:
        self.results.append((ok, status))


class PlainReporter:
    """Plain lines for logs and package scripts: a line when the status changes, none per poll,
    and the outcome when there was a wait to report on. `waits=False` prints notes only."""

    def __init__(self, stream: TextIO | None = None, waits: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.waits = waits
        self._last: str | None = None

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def note(self, line: str) -> None:
        self._print(line)

    def waiting(self, elapsed: float, status: str) -> None:
        if self.waits and status != self._last:
            self._last = status
            self._print(f"waiting for dockerd ({elapsed:.1f}s): {status}")

    def done(self, ok: bool, status: str) -> None:
        if self._last is not None:
            self._print(f"{'verified' if ok else 'not verified'}: {status}")
        self._last = None


def reporter_for(stream: TextIO | None = None) -> Reporter:
    """Notes only on a terminal (the CLI shows a spinner there), plain progress lines otherwise."""
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return PlainReporter(stream, waits=not tty)
