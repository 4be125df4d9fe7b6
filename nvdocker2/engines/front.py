"""What an engine shows the command line: the options it declares and what each command asks
of it. The CLI knows engines only through these types and `nvdocker2.engines.registry`.

This module is read on every start of `nvdocker2` (the options make up `--help`), so it
imports nothing but the standard library; an engine's options module imports only this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence

if TYPE_CHECKING:  # pragma: no cover - types only: this module imports the standard library
    from nvdocker2.store.backups import Backup

COMMANDS = ("install", "uninstall", "rollback", "backups", "status", "doctor")


@dataclass(frozen=True)
class CliOption:
    """One command-line option of some commands. `rank` places it in `--help` among the
    CLI's own options (config 10 ... --engine 170); `kind` is bool, str, float, "path",
    "list" (repeatable) or an Enum class (its values are the choices, case-insensitive).
    `default` None means "work it out" (the help says how) and shows no default."""

    param: str
    flags: tuple[str, ...]
    commands: tuple[str, ...]
    help: str
    rank: int
    kind: Any = str
    default: Any = None
    metavar: Optional[str] = None
    show_default: Any = False
    minimum: Optional[float] = None

    @property
    def flag(self) -> str:
        return self.flags[0]


@dataclass
class Outcome:
    """What install, uninstall or rollback did: the transaction's Result plus what the CLI
    prints around it (notes and warnings before, JSON keys beside, lines after)."""

    result: Any
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra_json: dict[str, Any] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)


@dataclass
class Report:
    """`status`: one JSON object, or lines on stdout after warnings on stderr; exit code."""

    json: dict[str, Any]
    lines: list[str]
    warnings: list[str] = field(default_factory=list)
    code: int = 0


@dataclass
class BackupList:
    """`backups`: the backups of the engine's files. `groups` holds (transaction tag,
    backups) pairs; `grouped` False lists one file's backups without transactions."""

    engine: str
    config: str
    config_reason: str
    files: list[str]
    backup_dir: str
    groups: list[tuple[Optional[str], list[Backup]]]
    grouped: bool = True


class Frontend(Protocol):
    """What the commands ask of an engine. `opts` maps every option's param to its value
    (the CLI has checked that options this engine does not declare were left out)."""

    def run(self, action: str, opts: Mapping[str, Any], reporter: Any) -> Outcome: ...
    def status(self, opts: Mapping[str, Any]) -> Report: ...
    def backups(self, opts: Mapping[str, Any]) -> BackupList: ...
    def doctor(self, opts: Mapping[str, Any]) -> int: ...
    def short(self, value: Any) -> str: ...


@dataclass(frozen=True)
class EngineEntry:
    """A registered engine: its options, and how to make its Frontend (called only when a
    command runs for it, so its format and service are imported then)."""

    name: str
    options: Sequence[CliOption]
    frontend: Callable[[], Frontend]


def unit_and_socket_options() -> list[CliOption]:
    """`--unit` and `--containerd-address`: the options of an engine run by a systemd unit and
    answering on a socket (containerd and CRI-O declare these same two)."""
    commands = ("install", "uninstall", "rollback", "doctor")
    return [
        CliOption("unit", ("--unit",), commands,
                  "systemd unit containerd/CRI-O runs as [default: containerd, crio].",
                  rank=180, metavar="UNIT"),
        CliOption("containerd_address", ("--containerd-address",), commands,
                  "containerd's socket to verify on [default: /run/containerd/containerd.sock] "
                  "(CRI-O: its socket).", rank=190, metavar="PATH"),
    ]
