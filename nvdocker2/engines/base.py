"""The engine protocol: what an engine brings to the transaction (SPEC §11).

An engine turns a request (install, uninstall) and the bytes of the files it owns into a `Plan`:
the bytes each file should end with, the changes a person reads, the journal record, and what
its service must report afterwards. Its `Service` applies the files (reload or restart) and
verifies them. The transaction around it (nvdocker2.engines.transaction) knows nothing of the
formats: it locks, backs up, journals, compares before replacing, writes, applies, verifies and
rolls back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from nvdocker2.daemonjson.edit import Change
from nvdocker2.errors import EXIT_REJECTED, NvDockerError

Reader = Callable[[Path], Optional[bytes]]  # the bytes of a file, None when it does not exist


@dataclass(frozen=True)
class FileEdit:
    """One file of a plan: its bytes before (None: no file) and after (None: remove it)."""

    path: Path
    old: bytes | None
    new: bytes | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class Plan:
    """What an engine wants done. `expect` and `expect_old` are opaque to the transaction: the
    engine's service checks them after applying the new files, or the restored old ones."""

    files: tuple[FileEdit, ...]
    changes: tuple[Change, ...]
    reason: str
    journal: dict | None = None  # None: leave the journal alone; {}: remove it
    expect: Any = None
    expect_old: Any = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # install records before writing (what it replaces must survive a crash); uninstall after,
    # so a crash between leaves the record that lets the next uninstall finish the job.
    journal_before_write: bool = True

    @property
    def changed(self) -> bool:
        return any(f.changed for f in self.files)


@dataclass(frozen=True)
class Request:
    """What the user asked for, the same for every engine."""

    runtime_name: str = "nvidia"
    runtime_path: str = ""
    set_default: bool = False
    own_runtime_paths: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


class VerifyFailed(NvDockerError):
    """The engine did not come back, or came back without the expected state."""

    exit_code = EXIT_REJECTED

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason, hint)
        self.reason = reason


def runtime_mismatches(expect: Mapping[str, Any], runtimes: Mapping[str, Any],
                       default: Any) -> list[str]:
    """What an engine's reported CRI runtimes (name → binary) and default differ in from
    `expect` ({"present": {name: path}, "absent": [names], "default": name or None})."""
    bad = [f'runtime "{n}" is missing' for n, p in expect["present"].items()
           if runtimes.get(n) != p]
    bad += [f'runtime "{n}" is still there' for n in expect["absent"] if n in runtimes]
    if expect.get("default") and default != expect["default"]:
        bad.append(f"the default runtime is {default}")
    return bad


class Service(Protocol):
    """How a running engine takes new files (reload or restart) and proves it did."""

    strategy: str  # "systemd", "signal", "none", ...
    verifies: bool
    log_description: str

    def apply(self) -> None:
        """Make the engine read its files; raise VerifyFailed when it cannot come back."""

    def verify(self, expect: Any, timeout: float) -> None:
        """Raise VerifyFailed(reason) unless the engine reports `expect` within `timeout`."""


class Engine(Protocol):
    """One container engine's documents and edits."""

    name: str
    config: Path  # the file the journal, the backups list and rollback are keyed on

    def files(self) -> Sequence[Path]:
        """Every file a plan of this engine may touch (the root config first)."""

    def plan_install(self, read: Reader, req: Request, journal: dict) -> Plan: ...

    def plan_uninstall(self, read: Reader, req: Request, journal: dict) -> Plan: ...

    def check_candidate(self, plan: Plan) -> None:
        """Raise BadInput when the engine would not load the plan's files (nothing written)."""

    def restart_hint(self) -> str:
        """What a person runs to apply the files when the service is `none`."""


class NoService:
    """`--reload none`: files are written, the engine is neither restarted nor asked."""

    strategy = "none"
    verifies = False
    log_description = ""

    def apply(self) -> None:
        return None

    def verify(self, expect: Any, timeout: float) -> None:
        return None
