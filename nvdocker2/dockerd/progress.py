"""How waiting for dockerd is shown: a rich spinner on a terminal, plain lines otherwise.

The daemon code only calls a `Reporter`; the CLI picks one with `reporter_for(stream)`, tests
pass a `RecordingReporter`. Rendering never decides anything.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, TextIO


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
    """Plain lines for logs and package scripts: a line when the status changes, none per poll."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._last: str | None = None

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def note(self, line: str) -> None:
        self._print(line)

    def waiting(self, elapsed: float, status: str) -> None:
        if status != self._last:
            self._last = status
            self._print(f"waiting for dockerd ({elapsed:.1f}s): {status}")

    def done(self, ok: bool, status: str) -> None:
        self._last = None
        self._print(f"{'verified' if ok else 'not verified'}: {status}")


class SpinnerReporter:
    """A rich spinner on a terminal; notes and the outcome stay on screen as lines."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream if stream is not None else sys.stderr)
        self._status: Any = None

    def note(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def waiting(self, elapsed: float, status: str) -> None:
        text = f"waiting for dockerd ({elapsed:.1f}s): {status}"
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def done(self, ok: bool, status: str) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        self.console.print(f"{'verified' if ok else 'not verified'}: {status}", markup=False, highlight=False)


def reporter_for(stream: TextIO | None = None, quiet: bool = False) -> Reporter:
    """Spinner on a terminal, plain lines otherwise, nothing when quiet."""
    if quiet:
        return SilentReporter()
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return SpinnerReporter(stream) if tty else PlainReporter(stream)
