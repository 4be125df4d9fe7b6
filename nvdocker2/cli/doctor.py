"""`nvdocker2 doctor`: the chosen engine's checks (rendered by nvdocker2.doctor.render)."""

from __future__ import annotations

from typing import Any

from nvdocker2.cli.options import register


def add(app: Any) -> None:
    register(app, "doctor", lambda front, opts: front.doctor(opts),
             """Check this host's GPU container setup and say how to fix what is wrong (exit 1 if
        any check failed).""")
