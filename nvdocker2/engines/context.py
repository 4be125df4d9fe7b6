"""What one engine transaction carries (reference §2, §8): the `Context` an engine's planner and
its service get, the `Reporter` of live progress, and the `Result` the CLI renders."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

from nvdocker2.engines.base import Engine, Plan, Service
from nvdocker2.errors import BadInput, DaemonUnreachable
from nvdocker2.changes import Change
from nvdocker2.redact import mask_credentials
from nvdocker2.store.atomic import os_error
from nvdocker2.store.backups import Backup
from nvdocker2.store.journal import Journal


class Reporter:
    """Live progress for a person watching; the default says nothing. The CLI subclasses it."""

    def progress(self, message: str) -> None:
        return None

    def waiting(self, message: str) -> ContextManager[None]:
        return contextlib.nullcontext()


@dataclass(frozen=True)
class Result:
    """What a transaction did; the CLI renders it as text or as one JSON object."""

    action: str
    changed: bool
    config: str
    config_reason: str = ""
    backup: str | None = None
    backup_file: str | None = None
    reload: str = "none"
    verified: bool = False
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    dry_run: bool = False
    diff: str | None = None
    style: str = ""
    unchecked: tuple[str, ...] = ()  # a dry run's checks that needed the engine's daemon
    before: str | None = None  # the file's text before (None: no file), credentials masked
    after: str | None = None  # its text after, or what a dry run would write; masked

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "changed": self.changed,
            "config": self.config,
            "config_reason": self.config_reason,
            "backup": self.backup,
            "backup_file": self.backup_file,
            "reload": self.reload,
            "verified": self.verified,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "changes": [c.to_json() for c in self.changes if c.changed],
            "dry_run": self.dry_run,
            "before": self.before,
            "after": self.after,
        }
        if self.dry_run:
            out["diff"] = self.diff or ""
            out["unchecked"] = list(self.unchecked)
        return out


def unified_diff(config: Path, old: bytes, new: bytes | None) -> str:
    """The change as a unified diff (`new` None: the file is removed)."""
    import difflib  # here, not at the top: only a dry run shows a diff

    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = [] if new is None else new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(
        a,
        b,
        f"a{config}" if str(config).startswith("/") else f"a/{config}",
        f"b{config}" if str(config).startswith("/") else f"b/{config}",
    ):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        lines.append(line.replace("\r\n", "\n") if line.endswith("\r\n") else line)
    return mask_credentials("".join(lines))


@dataclass
class Context:
    """One transaction's engine, service, options and what it has to say; the planner gets it."""

    engine: Engine
    service: Service
    reporter: Reporter
    timeout: float
    state: Path
    dry_run: bool
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: dict[Path, os.stat_result] = field(default_factory=dict)
    require_daemon: bool = False  # a dry run fails, as the change would, without the daemon
    unchecked: list[str] = field(default_factory=list)
    done: Backup | None = None  # the main Backup once it is made (for an interruption after)
    kept: Backup | None = None  # the main Backup a failed change leaves (named), for --json

    def unreachable(self, problem: DaemonUnreachable) -> None:
        """The daemon cannot be asked: a change stops here (nothing written yet, exit 3); a
        dry run notes what it could not check and goes on, unless `require_daemon`."""
        if not self.dry_run or self.require_daemon:
            raise problem
        why = problem.message.replace("; the change could not be verified", "")
        line = f"{problem.unchecked}: {why}"
        if line not in self.unchecked:
            self.unchecked.append(line)

    def read(self, path: Path) -> bytes | None:
        """The bytes of `path` (None: no file), its identity kept for compare before replace."""
        return read(path, self.stats)

    @property
    def config(self) -> Path:
        return Path(self.engine.config)

    def journal(self) -> Journal:
        return Journal(self.state, self.engine.config)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


Planner = Callable[[Context], Plan]


def read(path: Path, stats: dict[Path, os.stat_result] | None = None) -> bytes | None:
    """The bytes of an engine's file (None: no file); `stats` gets the file's identity."""
    try:
        with open(path, "rb") as f:
            if stats is not None:
                stats[Path(path)] = os.fstat(f.fileno())
            return f.read()
    except FileNotFoundError:
        if stats is not None:
            stats.pop(Path(path), None)
        return None
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory", "pass --config with a file") from None
    except OSError as e:
        raise os_error(e, str(path)) from None
