"""What dockerd said after we reloaded it: new lines of its log file, or of its journal.

A refused reload leaves dockerd running on its old configuration and answering /info as
before; only its log says why. Reading it lets verify fail at once with dockerd's own words
instead of waiting out the timeout, and catches a refused file that would otherwise go
unnoticed until dockerd's next start.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Protocol

from nvdocker2.host import run

# Lines dockerd (20.10 .. 29) writes when it refuses a configuration file, at reload or start.
REFUSAL_MARKERS = (
    "unable to configure the Docker daemon",
    "configuration validation failed",
    "Error reconfiguring the daemon",
    "conflict labels for",
    "failed to start daemon",
)
RELOADED_MARKERS = ("Reloaded configuration",)
STARTED_MARKERS = ("Daemon has completed initialization", "API listen on")

# The first line of a Go crash report (`panic: ...`, `fatal error: ...`, `SIGABRT: abort`).
_CRASH = re.compile(r"^(panic: |fatal error: |SIG[A-Z]+: )")
_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')
_LEVEL = re.compile(r'level"?[=:]"?(\w+)')


class LogSource(Protocol):
    """New dockerd log lines since `mark()`."""

    description: str

    def mark(self) -> None: ...

    def lines(self) -> list[str]: ...


class NoLog:
    """When nothing tells us where dockerd logs: verify relies on /info alone."""

    description = "no dockerd log"

    def mark(self) -> None:
        return None

    def lines(self) -> list[str]:
        return []


class FileLog:
    """dockerd's output file (`--dockerd-log`): lines appended after the remembered offset."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        self._offset = 0

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def mark(self) -> None:
        self._offset = self._size()

    def lines(self) -> list[str]:
        if self._size() < self._offset:  # truncated or rotated: all of it is new
            self._offset = 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(4 * 1024 * 1024)
        except OSError:
            return []
        return data.decode("utf-8", "replace").splitlines()


class JournalLog:
    """`journalctl -u UNIT` entries newer than the mark (microsecond precision)."""

    def __init__(
        self, unit: str = "docker", journalctl: str = "journalctl", user: bool = False
    ) -> None:
        self.unit = unit
        self.journalctl = journalctl
        self.scope = ["--user"] if user else []
        self.description = " ".join([journalctl, *self.scope, "-u", unit])
        self._since = time.time()

    def mark(self) -> None:
        self._since = time.time()

    def lines(self) -> list[str]:
        since = datetime.fromtimestamp(int(self._since)).strftime("%Y-%m-%d %H:%M:%S")
        argv = [
            self.journalctl,
            *self.scope,
            "-u",
            self.unit,
            "--since",
            since,
            "-o",
            "json",
            "--no-pager",
            "-q",
        ]
        try:
            out = run.run(argv, timeout=10).stdout
        except OSError:
            return []
        since_us = int(self._since * 1_000_000)
        lines = []
        for raw in out.decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(raw)
                stamp = int(entry.get("__REALTIME_TIMESTAMP", "0"))
            except (ValueError, TypeError, AttributeError):
                continue
            message = entry.get("MESSAGE")
            if isinstance(message, list):  # journald's form for non-UTF-8 text
                message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode(
                    "utf-8", "replace"
                )
            if stamp >= since_us and isinstance(message, str):
                lines.append(message)
        return lines


def message_of(line: str) -> str:
    """The msg="..." text of a logrus line, unescaped; the line itself otherwise."""
    found = _MSG.search(line)
    if not found:
        return line.strip()
    try:
        text: str = json.loads(f'"{found.group(1)}"')  # a JSON string literal
        return text
    except ValueError:
        return found.group(1)


def find_refusal(lines: list[str]) -> str | None:
    """dockerd's last words refusing a configuration, if any line says so."""
    for line in reversed(lines):
        if any(marker in line for marker in REFUSAL_MARKERS):
            return message_of(line)
    return None


def has_marker(lines: list[str], markers: tuple[str, ...]) -> bool:
    return any(marker in line for line in lines for marker in markers)


def errors_in(lines: list[str]) -> list[str]:
    """Messages of error and fatal lines, for a timeout report."""
    out = []
    for line in lines:
        level = _LEVEL.search(line)
        if level and level.group(1).lower() in ("error", "fatal", "panic"):
            out.append(message_of(line))
    return out


def last_words(lines: list[str]) -> str | None:
    """The last panic or fatal line dockerd wrote (a Go crash report's first line, or a
    logrus line at level fatal or panic): why a dockerd that exited did so."""
    for line in reversed(lines):
        level = _LEVEL.search(line)
        if _CRASH.match(line.strip()) or (level and level.group(1).lower() in ("fatal", "panic")):
            return message_of(line)
    return None
