"""The engine protocol: what an engine brings to the transaction (docs/reference.md §2, §8, §11).

An engine turns a request and the bytes of the files it owns into a `Plan`: the bytes each file
should end with, the changes a person reads, the journal record, and what its service must
report afterwards. Its `Service` applies the files (reload or restart) and verifies them. The
transaction around both (nvdocker2.engines.transaction) knows nothing of the formats or the
daemons: it locks, backs up, journals, compares before replacing, writes, applies, verifies and
rolls back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from nvdocker2.changes import Change
from nvdocker2.errors import EXIT_REJECTED, NvDockerError

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.engines.context import Context

Reader = Callable[[Path], Optional[bytes]]  # the bytes of a file, None when it does not exist


@dataclass(frozen=True)
class FileEdit:
    """One file of a plan: its bytes before (None: no file) and after (None: remove it).

    `stat` is the file as it was read (compare before replace checks its identity; None: the
    transaction's reader recorded it, or compare the bytes only); `owner` the mode, owner and
    group a recreated file gets; `reason` the backup's reason (default: the plan's)."""

    path: Path
    old: bytes | None
    new: bytes | None
    reason: str = ""
    stat: os.stat_result | None = field(default=None, compare=False)
    owner: Any = None  # store.Ownership | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class Plan:
    """What an engine wants done. `expect`, `expect_old` and `check` are opaque to the
    transaction: the service checks `expect` after applying the new files (`expect_old` after
    restoring the old ones); the engine reads `check` when it checks the candidate.

    `via` holds bytes some files must go through first: they are written and applied, the
    service verifies `expect`, and then the files get their final bytes without another apply
    (dockerd's reload keeps runtimes a file no longer names; an in-between file clears them).
    `back_via` does the same when a failed change is put back."""

    files: tuple[FileEdit, ...]
    changes: tuple[Change, ...]
    reason: str
    journal: dict[str, Any] | None = None  # None: leave the journal alone; {}: remove it
    expect: Any = None
    expect_old: Any = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # install records before writing (what it replaces must survive a crash); uninstall after,
    # so a crash between leaves the record that lets the next uninstall finish the job.
    journal_before_write: bool = True
    journal_file: Any = None  # a store.Journal; None: the engine's config's journal
    via: Mapping[Path, bytes] = field(default_factory=dict)
    back_via: Mapping[Path, bytes] = field(default_factory=dict)
    check: Any = None
    style: str = ""  # how the primary file is laid out, for the output
    remove_dirs: tuple[Path, ...] = ()  # directories to remove once empty (install made them)
    # A failed change removes the directories it created for its files (empty ones only);
    # False keeps them (Docker's /etc/docker and /etc/cdi are well-known, shared directories).
    undo_made_dirs: bool = True

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
    """The engine did not come back, or came back without the expected state; `reason` is what
    it said."""

    exit_code = EXIT_REJECTED

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason, hint)
        self.reason = reason


class EngineDied(VerifyFailed):
    """The engine's process exited while it took the change: there is nothing to reload on
    the previous files, which go back as they are; `hint` says how to start the engine."""


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


def poll(probe: Callable[[], Optional[str]], timeout: float, waiting: str) -> None:
    """Ask `probe` every 0.3 s until it returns None (the engine reports what is expected);
    a string is why not yet ("": no news, keep the last reason). After `timeout`, VerifyFailed
    with the last reason (`waiting` when there was none)."""
    deadline = time.monotonic() + timeout
    last = waiting
    while True:
        why = probe()
        if why is None:
            return
        last = why or last
        if time.monotonic() > deadline:
            raise VerifyFailed(last)
        time.sleep(0.3)


class Service:
    """How a running engine takes new files and proves it did. Subclasses override `apply` and
    `verify`; the defaults are those of a service that restarts its engine."""

    strategy = "none"  # "systemd", "signal", "none", ...: what "reload" says in the output
    verifies = False
    log_description = ""
    verb = "restart"  # the step's name in messages ("reload" for dockerd)
    # A failed restart may have stopped the engine: start it again on the old files. A failed
    # reload (a signal) means the engine never saw the new files: only the files go back.
    reapply_after_failed_apply = True

    def ready(self) -> None:
        """Raise DaemonUnreachable when the engine cannot take and verify the change (checked
        before anything is written; a dry run reports it as unchecked)."""
        return None

    def apply(self) -> None:
        """Make the engine read its files; raise VerifyFailed when it cannot come back."""
        return None

    def verify(self, expect: Any, timeout: float) -> str | None:
        """Raise VerifyFailed(reason) unless the engine reports `expect` within `timeout`;
        return a warning when it does but its taking the files is not proven (reference §8)."""
        return None

    def settle(self, ctx: "Context", expect: Any) -> bool | None:
        """For a change already in the files: make the engine run them when an earlier run
        left it behind (interrupted, or told not to reload); None when nothing was done, else
        whether the engine was then seen running them."""
        return None

    def mark(self) -> Any:
        """Where the engine's log stands before the write (for `rejected_hint`)."""
        return None

    def rejected_hint(self, process: str, mark: Any) -> str:
        """The hint of exit 4: where to read why the engine refused the change."""
        return f"see {process}'s log ({self.log_description or 'its journal'})"

    @property
    def verb_ing(self) -> str:
        return "reloading" if self.verb == "reload" else "restarting"


class NoService(Service):
    """`--reload none`: files are written, the engine is neither restarted nor asked."""


class Unreachable(NoService):
    """`--reload auto` found no running engine and the change is to be verified: `ready`
    refuses with `problem` (exit 3) before anything is written, as Docker does."""

    def __init__(self, problem: Exception) -> None:
        self.problem = problem

    def ready(self) -> None:
        raise self.problem


class Engine(Protocol):
    """One container engine's documents and edits: the whole contract the transaction
    (nvdocker2.engines.transaction) and the shared front (nvdocker2.engines.commands) hold an
    engine to. `EngineBase` gives the defaults; the front gives the engine's service, what its
    files say (`describe`) and its doctor's checks."""

    name: str  # the --engine value
    process: str  # the daemon's name in messages
    config: Path  # the file the journal, the backups list and rollback are keyed on
    groups_backups: bool

    @property
    def config_reason(self) -> str:
        """Why this config (the output's "config_reason": the default, --config, ...)."""

    def files(self) -> Sequence[Path]:
        """Every file a plan of this engine may touch (the root config first)."""

    def plan_install(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        """The plan that installs `req`'s runtime: `read` gives the bytes of a file (its
        identity kept for compare before replace), `journal` what earlier installs recorded
        ({}: none). Raises BadInput (exit 2) on a file the engine cannot edit."""

    def plan_uninstall(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        """The plan that puts back what install replaced (from `journal`), or removes a
        runtime that points at one of `req.own_runtime_paths`."""

    def check_candidate(self, ctx: "Context", plan: Plan,
                        staged: Sequence[tuple[Path, bytes, Path]]) -> None:
        """Raise BadInput when the engine would not load the plan's files (nothing written);
        `staged` holds (target, bytes, staged copy) for every version to be written."""

    def restart_hint(self) -> str:
        """What a person runs to apply the files when the service is `none`."""

    def pending_note(self, plan: Plan) -> str | None:
        """The note of a change written but not applied (service `none`)."""


class EngineBase:
    """Defaults for engines whose changes may span several files (containerd, CRI-O): their
    backups of one transaction share a tag, so rollback restores them together."""

    name = ""
    process = ""
    groups_backups = True

    def __init__(self, config: Path) -> None:
        self.config = Path(config)

    @property
    def config_reason(self) -> str:
        return f"{self.name} engine"

    def files(self) -> Sequence[Path]:
        return [self.config]

    def check_candidate(self, ctx: "Context", plan: Plan,
                        staged: Sequence[tuple[Path, bytes, Path]]) -> None:
        return None

    def restart_hint(self) -> str:
        return f"systemctl restart {self.name}"

    def pending_note(self, plan: Plan) -> str | None:
        return f"{self.process} was not restarted; to apply the change run: {self.restart_hint()}"
