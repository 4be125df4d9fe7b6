"""The CRI-O engine: nvdocker2's own drop-in /etc/crio/crio.conf.d/99-nvidia.conf.

CRI-O reads crio.conf and then every file of crio.conf.d in order, later files overriding
earlier keys, so the whole change is one file that nvdocker2 owns: install writes it, uninstall
removes it, and nothing else is touched. CRI-O re-reads only some options on SIGHUP, so the
change is applied by restarting the unit (containers keep running: conmon holds them).
Unit-tested only: no CRI-O package is installed where this project is tested.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomlkit

from nvdocker2.daemonjson.edit import ABSENT, Change
from nvdocker2.engines.base import (
    EngineBase,
    FileEdit,
    Plan,
    Reader,
    Request,
    Service,
    VerifyFailed,
    runtime_mismatches,
)
from nvdocker2.errors import BadInput

DEFAULT_DROPIN = Path("/etc/crio/crio.conf.d/99-nvidia.conf")
MARK = "# Written by nvdocker2; `nvdocker2 uninstall --engine crio` removes this file.\n"


def render(req: Request) -> bytes:
    doc = {"crio": {"runtime": {"runtimes": {req.runtime_name: {
        "runtime_path": req.runtime_path, "runtime_type": "oci"}}}}}
    if req.set_default:
        doc["crio"]["runtime"]["default_runtime"] = req.runtime_name
    return (MARK + tomlkit.dumps(doc)).encode()


class CrioEngine(EngineBase):
    name = "crio"
    process = "crio"

    def __init__(self, dropin: Path = DEFAULT_DROPIN) -> None:
        super().__init__(dropin)

    def _current(self, read: Reader) -> bytes | None:
        raw = read(self.config)
        if raw is not None and not raw.decode("utf-8", "replace").startswith(MARK):
            raise BadInput(f"{self.config} exists and was not written by nvdocker2",
                           "move it away or pass --config with another drop-in name")
        return raw

    def plan_install(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = self._current(read)
        new = render(req)
        ch = Change(str(self.config), "unchanged" if old == new else
                    ("added" if old is None else "replaced"), ABSENT, req.runtime_path)
        rec = {"config": str(self.config), "runtimes": {req.runtime_name: {"dropin": True}}}
        expect = {"present": {req.runtime_name: req.runtime_path}, "absent": [],
                  "default": req.runtime_name if req.set_default else None}
        return Plan((FileEdit(self.config, old, new),), (ch,), f"install runtime "
                    f"{req.runtime_name} (crio)", rec, expect,
                    {"present": {}, "absent": [req.runtime_name] if old is None else [],
                     "default": None})

    def plan_uninstall(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = self._current(read)
        ch = Change(str(self.config), "unchanged" if old is None else "removed", ABSENT, ABSENT)
        return Plan((FileEdit(self.config, old, None),), (ch,),
                    f"uninstall runtime {req.runtime_name} (crio)", {} if old else None,
                    {"present": {}, "absent": [req.runtime_name], "default": None},
                    {"present": {}, "absent": [], "default": None})

    def check_candidate(self, ctx: Any, plan: Plan, staged: Sequence[Any]) -> None:
        for f in plan.files:
            if f.new is not None:
                tomlkit.parse(f.new.decode())


def runtimes_from_status(text: str) -> tuple[dict[str, str], str]:
    """(runtime → runtime_path, default) from `crio status config` (the running TOML)."""
    from nvdocker2.engines.containerd.document import tomllib

    data = tomllib.loads(text)
    rt = (data.get("crio") or {}).get("runtime") or {}
    rts = {n: str(v.get("runtime_path", "")) for n, v in (rt.get("runtimes") or {}).items()
           if isinstance(v, dict)}
    return rts, str(rt.get("default_runtime") or "crun")


class SystemdCrio(Service):
    """Restart the crio unit, then ask the running CRI-O for its config (`crio status`)."""

    strategy = "systemd"

    def __init__(self, unit: str = "crio", socket: str = "/var/run/crio/crio.sock",
                 verify: bool = True, run: Any = subprocess.run) -> None:
        self.unit, self.socket, self.verifies, self._run = unit, socket, verify, run
        self.log_description = f"journalctl -u {unit}"

    def apply(self) -> None:
        p = self._run(["systemctl", "restart", self.unit], capture_output=True, text=True,
                      timeout=120)
        if p.returncode != 0:
            raise VerifyFailed(f"systemctl restart {self.unit} failed: {p.stderr.strip()}")

    def verify(self, expect: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        crio = shutil.which("crio") or "crio"
        last = f"CRI-O did not answer on {self.socket}"
        while True:
            p = self._run([crio, "status", "--socket", self.socket, "config"],
                          capture_output=True, text=True, timeout=30)
            if p.returncode == 0:
                if expect is None:
                    return
                bad = runtime_mismatches(expect, *runtimes_from_status(p.stdout))
                if not bad:
                    return
                last = "CRI-O reports: " + "; ".join(bad)
            if time.monotonic() > deadline:
                raise VerifyFailed(last)
            time.sleep(0.3)
