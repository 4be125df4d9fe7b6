"""`nvdocker2 install`, `uninstall` and `rollback`: the chosen engine's transaction, rendered."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from nvdocker2.cli import render
from nvdocker2.cli.app import CliReporter, typer
from nvdocker2.cli.options import register


def _changing(action: str) -> Callable[[Any, Mapping[str, Any]], int]:
    def body(front: Any, opts: Mapping[str, Any]) -> int:
        return render.outcome(front, front.run(action, opts, CliReporter(opts["json"])))
    return body


def _backup_id() -> Any:
    return typer.Argument(None, show_default=False, metavar="[BACKUP_ID]",
                          help="Backup to restore [default: the newest].")


def add(app: Any) -> None:
    """install, uninstall and rollback, in this order in `--help`."""
    register(app, "install", _changing("install"), """Add the nvidia runtime to daemon.json (merge,
        back up, write atomically, reload, verify); for rootless Docker also no-cgroups = true
        in the user's own nvidia-container-runtime/config.toml.""")
    register(app, "uninstall", _changing("uninstall"), """Undo install: put back what it replaced
        (from the journal), never leave a dangling default.""")
    register(app, "rollback", _changing("rollback"), """Undo the newest change (or BACKUP_ID's):
        its files go back to their backups together; the current files are backed up first.""",
             argument=("backup_id", _backup_id))
