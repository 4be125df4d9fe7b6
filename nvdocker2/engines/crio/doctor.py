"""doctor's checks for CRI-O (reference §5, §11): its drop-in and what the running CRI-O reports,
two checks of the shared doctor model that depend on nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nvdocker2.engines.crio.service import DEFAULT_SOCKET
from nvdocker2.host import run as door
from nvdocker2.host.run import safe_which
from nvdocker2.doctor.model import CheckPlan, Checks, Facts, Outcome, fail, ok, warn

CHECKS = Checks()
check = CHECKS.check


def _exe_ok(path: object) -> bool:
    return isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK)


@dataclass
class CrioFacts(Facts):
    """What the CRI-O checks read."""

    dropin: Path
    runtime: str = "nvidia"
    socket: str = DEFAULT_SOCKET


def crio_checks(dropin: Path, runtime: str = "nvidia",
                socket: str = DEFAULT_SOCKET) -> CheckPlan:
    """CRI-O's checks against the drop-in `dropin` and the CRI-O serving `socket`."""
    return CheckPlan(CrioFacts(dropin, runtime, socket), list(CHECKS))


@check("crio-dropin", "CRI-O drop-in")
def drop(f: CrioFacts) -> Outcome:
    from nvdocker2.engines.crio.document import MARK
    from nvdocker2.engines.tomlread import tomllib

    dropin, runtime = f.dropin, f.runtime
    try:
        text = dropin.read_text()
    except FileNotFoundError:
        return fail(f"{dropin} does not exist", "run: nvdocker2 install --engine crio")
    except (OSError, UnicodeDecodeError) as e:
        return fail(f"{dropin}: {e}", "check the file")
    if not text.startswith(MARK):
        return warn(f"{dropin} was not written by nvdocker2", "compare it with what "
                    "nvdocker2 install --engine crio --dry-run would write")
    try:
        rts = tomllib.loads(text)["crio"]["runtime"]["runtimes"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        return fail(f"{dropin}: {e}", "reinstall: nvdocker2 install --engine crio")
    path = (rts.get(runtime) or {}).get("runtime_path")
    if not _exe_ok(path):
        return fail(f"{dropin}: runtime_path {path!r} is not an executable file",
                    "reinstall the package")
    return ok(f"{dropin}: {runtime} → {path}")


@check("crio-running", "running CRI-O")
def running(f: CrioFacts) -> Outcome:
    runtime = f.runtime
    exe = safe_which("crio")
    if not exe:
        return warn("no crio on PATH that is safe to run (owned by root, in directories no "
                    "other user can write)", "install CRI-O, or ignore on a host without it")
    try:
        p = door.run([exe, "status", "--socket", f.socket, "config"], timeout=15, text=True)
    except OSError as e:
        return warn(f"crio status failed: {e}", "systemctl status crio")
    if p.returncode != 0:
        return fail(f"CRI-O does not answer on {f.socket}",
                    "systemctl status crio, or name its socket with --containerd-address")
    if f"runtimes.{runtime}]" not in p.stdout:
        return fail(f"the running CRI-O does not report runtime {runtime}",
                    "systemctl restart crio")
    return ok(f"the running CRI-O reports runtime {runtime}")
