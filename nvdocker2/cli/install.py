"""`nvdocker2 install`, `uninstall` and `rollback`: the chosen engine's transaction, rendered."""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from nvdocker2.cli import render
from nvdocker2.cli.app import CliReporter, typer
from nvdocker2.cli.options import register
from nvdocker2.errors import BadInput


def runtime_path_problem(path: str) -> str | None:
    """Why the absolute `path` cannot be the runtime the engine runs (every GPU container
    would then fail to start), or None. A name that is not absolute is the engine's to look
    up (or to refuse)."""
    if not os.path.isabs(path):
        return None
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.exists(path):
        return "does not exist"
    if not os.path.isfile(path):
        return "is not a regular file"
    if not os.access(path, os.X_OK):
        return "is not executable"
    return None


def refuse_missing_runtime(opts: Mapping[str, Any]) -> None:
    """BadInput (exit 2) for a --runtime-path the engine could not run, unless
    --allow-missing-runtime says a package will put it there."""
    path = opts.get("runtime_path")
    if not path or opts.get("allow_missing_runtime"):
        return
    problem = runtime_path_problem(path)
    if problem:
        raise BadInput(f"--runtime-path {path} {problem}: every GPU container would fail "
                       "to start", "pass the path of an installed nvidia-container-runtime, "
                       "or add --allow-missing-runtime when a package will put it there")


def _changing(action: str) -> Callable[[Any, Mapping[str, Any]], int]:
    def body(front: Any, opts: Mapping[str, Any]) -> int:
        if action == "install":
            refuse_missing_runtime(opts)
        return render.outcome(front, front.run(action, opts, CliReporter(opts["json"])))
    return body


def _backup_id() -> Any:
    return typer.Argument(None, show_default=False, metavar="[BACKUP_ID]",
                          help="Backup to restore [default: the newest].")


def add(app: Any) -> None:
    """install, uninstall and rollback, in this order in `--help`."""
    register(app, "install", _changing("install"), """Add the nvidia runtime to the engine's
        config: Docker's daemon.json, containerd's config.toml, CRI-O's drop-in
        (/etc/crio/crio.conf.d/99-nvidia.conf). Merge, back up, write atomically, reload,
        verify; for rootless Docker also no-cgroups = true in the user's own
        nvidia-container-runtime/config.toml. An option marked (docker) or (containerd, crio)
        serves those engines only.""")
    register(app, "uninstall", _changing("uninstall"), """Undo install: put back what it replaced
        (from the journal), never leave a dangling default.""")
    register(app, "rollback", _changing("rollback"), """Undo the newest change (or BACKUP_ID's):
        its files go back to their backups together; the current files are backed up first.""",
             argument=("backup_id", _backup_id))
