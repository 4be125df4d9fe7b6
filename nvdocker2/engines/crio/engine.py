"""The CRI-O engine: nvdocker2's own drop-in /etc/crio/crio.conf.d/99-nvidia.conf.

CRI-O reads crio.conf and then every file of crio.conf.d in order, later files overriding
earlier keys, so the whole change is one file that nvdocker2 owns (document.py); what install
and uninstall do to it is edit.py, how CRI-O is restarted or signalled is service.py.
No CRI-O package is installed where this project is tested: the release check `make crio-e2e`
runs it against a CRI-O built from its source.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomlkit

from nvdocker2.engines.base import EngineBase, Plan, Reader, Request
from nvdocker2.engines.crio import edit

DEFAULT_DROPIN = Path("/etc/crio/crio.conf.d/99-nvidia.conf")


class CrioEngine(EngineBase):
    name = "crio"
    process = "crio"

    def __init__(self, dropin: Path = DEFAULT_DROPIN) -> None:
        super().__init__(dropin)

    def plan_install(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        return edit.plan_install(self.config, read(self.config), req)

    def plan_uninstall(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        return edit.plan_uninstall(self.config, read(self.config), req)

    def check_candidate(self, ctx: Any, plan: Plan, staged: Sequence[Any]) -> None:
        for f in plan.files:
            if f.new is not None:
                tomlkit.parse(f.new.decode())
        req = plan.check  # install's request (uninstall leaves no runtime to check)
        path = req.runtime_path if req is not None else ""
        if not path or not os.path.isabs(path) or (os.path.isfile(path) and
                                                   os.access(path, os.X_OK)):
            return
        # CRI-O checks every runtime_path when it starts and on SIGHUP (ValidateRuntimes,
        # pkg/config/config.go): it leaves out a runtime it cannot run, a warning in its log,
        # and does not start when that runtime is its default (seen on 1.36.3).
        ctx.warn(f"{path} is not an executable file (yet): CRI-O leaves such a runtime out, "
                 "and does not start when it is the default_runtime")
