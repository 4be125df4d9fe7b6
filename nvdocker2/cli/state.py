"""`nvdocker2 backups` and `status`: what the chosen engine's files and backups say."""

from __future__ import annotations

from typing import Any

from nvdocker2.cli import render
from nvdocker2.cli.options import register


def add(app: Any) -> None:
    """backups and status, in this order in `--help`."""
    register(app, "backups", lambda front, opts: render.backups(front.backups(opts)),
             """List the backups of daemon.json (or of every file of --engine), newest first.""")
    register(app, "status", lambda front, opts: render.report(front.status(opts)),
             """Show what daemon.json says about runtimes, what install recorded, and the
        backups.""")
