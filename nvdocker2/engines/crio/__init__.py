"""The CRI-O engine: nvdocker2's own drop-in /etc/crio/crio.conf.d/99-nvidia.conf.

CRI-O reads crio.conf and then every file of crio.conf.d in order, later files overriding
earlier keys, so the whole change is one file that nvdocker2 owns (it starts with `MARK`; a
file that does not is refused). The file holds every runtime nvdocker2 installed there: install
adds or replaces one `[crio.runtime.runtimes.NAME]` table (and `default_runtime` with
--set-default), uninstall removes one (and `default_runtime` when it named it), and the file
goes only when no runtime is left in it. The file is ours alone, so it is rendered from its
data: the same runtimes always give the same bytes.

Applying: `systemd` restarts the unit (containers keep running: conmon holds them); `signal`
sends SIGHUP, on which CRI-O ≥ 1.25.1 re-reads its runtime tables and default_runtime
(pkg/config/reload.go, ReloadRuntimes); `auto` takes signal where that holds, else restarts.
Unit-tested only: no CRI-O package is installed where this project is tested.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomlkit

from nvdocker2.changes import ABSENT, Change
from nvdocker2.host import run as door
from nvdocker2.host.run import safe_which
from nvdocker2.engines.base import (
    EngineBase,
    FileEdit,
    Plan,
    Reader,
    Request,
    Service,
    VerifyFailed,
    poll,
    runtime_mismatches,
    systemctl_failure,
)
from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.oneline import one_line

DEFAULT_DROPIN = Path("/etc/crio/crio.conf.d/99-nvidia.conf")
DEFAULT_SOCKET = "/var/run/crio/crio.sock"
SIGHUP_RELOADS_RUNTIMES = (1, 25, 1)  # ReloadRuntimes in pkg/config/reload.go: 1.25.1, 1.26.0
MARK = "# Written by nvdocker2; `nvdocker2 uninstall --engine crio` removes this file.\n"
RUNTIMES = "crio.runtime.runtimes"
DEFAULT_KEY = "crio.runtime.default_runtime"


def runtime_table(path: str) -> dict:
    return {"runtime_path": path, "runtime_type": "oci"}


def render(data: dict) -> bytes | None:
    """The drop-in's bytes for `data` (None: no runtime left, so no file)."""
    if not data.get("crio", {}).get("runtime", {}).get("runtimes"):
        return None
    return (MARK + tomlkit.dumps(data)).encode()


def _table(data: dict, key: str, where: str, path: Path) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise BadInput(f"{path}: {where} is a {type(value).__name__}, not a table",
                       f"fix {where} in that file, or remove the file and install again")
    return value


def parse(path: Path, raw: bytes | None) -> dict:
    """Our drop-in as plain data ({} when there is none); BadInput when it is not ours, not
    TOML, or holds a value of the wrong type where the runtimes go."""
    if raw is None:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or not text.startswith(MARK):
        raise BadInput(f"{path} exists and was not written by nvdocker2",
                       "move it away or pass --config with another drop-in name")
    try:
        data = tomlkit.parse(text).unwrap()
    except Exception as e:  # tomlkit's ParseError and the errors of its older releases
        raise BadInput(f"{path}: not valid TOML: {one_line(e)}",
                       "fix the file, or remove it and install again") from None
    rt = _table(_table(data, "crio", "crio", path), "runtime", "crio.runtime", path)
    for name, entry in _table(rt, "runtimes", RUNTIMES, path).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("runtime_path", ""), str):
            raise BadInput(f"{path}: {RUNTIMES}.{one_line(name)} is not a table with a string "
                           "runtime_path", "fix that table, or remove the file and install again")
    if not isinstance(rt.get("default_runtime", ""), str):
        raise BadInput(f"{path}: {DEFAULT_KEY} is not a string",
                       "fix it, or remove the file and install again")
    return data


def _runtimes(data: dict) -> dict:
    return data.get("crio", {}).get("runtime", {}).get("runtimes", {})


def _default(data: dict) -> str | None:
    return data.get("crio", {}).get("runtime", {}).get("default_runtime")


def _expect(data: dict, absent: str | None = None, default: bool = False) -> dict:
    """What CRI-O reports once it reads the drop-in holding `data`: its runtimes, not `absent`,
    and its default when the change is about the default (a later drop-in may set another)."""
    return {"present": {n: str(t.get("runtime_path", "")) for n, t in _runtimes(data).items()},
            "absent": [absent] if absent else [], "default": _default(data) if default else None}


def _record(path: Path, data: dict) -> dict:
    return {"config": str(path), "runtimes": {n: {"dropin": True} for n in _runtimes(data)}} \
        if _runtimes(data) else {}


class CrioEngine(EngineBase):
    name = "crio"
    process = "crio"

    def __init__(self, dropin: Path = DEFAULT_DROPIN) -> None:
        super().__init__(dropin)

    def plan_install(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = read(self.config)
        data = parse(self.config, old)
        before = _runtimes(data).get(req.runtime_name, ABSENT)
        new_data = {**data, "crio": {**data.get("crio", {}), "runtime": {
            **data.get("crio", {}).get("runtime", {})}}}
        rt = new_data["crio"]["runtime"]
        table = runtime_table(req.runtime_path)
        rt["runtimes"] = {**rt.get("runtimes", {}), req.runtime_name: table}
        changes = [Change(f"{RUNTIMES}.{req.runtime_name}", "unchanged" if before == table else
                          ("added" if before is ABSENT else "replaced"), before, table)]
        if req.set_default:
            was = _default(data)
            rt["default_runtime"] = req.runtime_name
            changes.append(Change(DEFAULT_KEY, "unchanged" if was == req.runtime_name else
                                  ("added" if was is None else "replaced"),
                                  ABSENT if was is None else was, req.runtime_name))
        # Nothing to change keeps the bytes as they are (a comment added by hand included).
        new = old if all(not c.changed for c in changes) else render(new_data)
        rec = _record(self.config, new_data) if new != old else None
        return Plan((FileEdit(self.config, old, new),), tuple(changes),
                    f"install runtime {req.runtime_name} (crio)", rec,
                    _expect(new_data, None, req.set_default),
                    _expect(data, req.runtime_name if before is ABSENT else None,
                            req.set_default and _default(data) is not None), check=req)

    def plan_uninstall(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = read(self.config)
        data = parse(self.config, old)
        name = req.runtime_name
        before = _runtimes(data).get(name, ABSENT)
        if before is ABSENT:
            return Plan((FileEdit(self.config, old, old),),
                        (Change(f"{RUNTIMES}.{name}", "unchanged"),),
                        f"uninstall runtime {name} (crio)", None,
                        _expect(data, name), _expect(data))
        rt = {**data["crio"]["runtime"],
              "runtimes": {n: t for n, t in _runtimes(data).items() if n != name}}
        changes = [Change(f"{RUNTIMES}.{name}", "removed", before, ABSENT)]
        was_default = rt.get("default_runtime") == name
        if was_default:
            del rt["default_runtime"]
            changes.append(Change(DEFAULT_KEY, "removed", name, ABSENT))
        new_data = {**data, "crio": {**data["crio"], "runtime": rt}}
        new = render(new_data)
        if new is None:
            changes.append(Change(str(self.config), "removed", "drop-in", ABSENT))
        return Plan((FileEdit(self.config, old, new),), tuple(changes),
                    f"uninstall runtime {name} (crio)", _record(self.config, new_data),
                    _expect(new_data, name), _expect(data, None, was_default),
                    journal_before_write=False)

    def check_candidate(self, ctx: Any, plan: Plan, staged: Sequence[Any]) -> None:
        for f in plan.files:
            if f.new is not None:
                tomlkit.parse(f.new.decode())
        req = plan.check  # install's request (uninstall leaves no runtime to check)
        path = req.runtime_path if req is not None else ""
        if not path or not os.path.isabs(path) or (os.path.isfile(path) and
                                                   os.access(path, os.X_OK)):
            return
        # CRI-O checks every runtime_path: at start it refuses to run, on SIGHUP it logs the
        # reload as failed yet keeps the new runtime table (pkg/config/reload.go).
        ctx.warn(f"{path} is not an executable file (yet): CRI-O does not start with such a "
                 "runtime_path, and its SIGHUP reload fails on it")


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

    def __init__(self, unit: str = "crio", socket: str = DEFAULT_SOCKET,
                 verify: bool = True, run: Any = door.as_run, crio: str | None = None) -> None:
        self.unit, self.socket, self.verifies, self._run = unit, socket, verify, run
        self.crio = crio  # the crio program to ask; None: the one on PATH that is safe to run
        self.log_description = f"journalctl -u {unit}"

    def apply(self) -> None:
        p = self._run(["systemctl", "restart", self.unit], capture_output=True, text=True,
                      timeout=120)
        if p.returncode != 0:
            raise VerifyFailed(systemctl_failure(self.unit, p.stderr or ""))

    def verify(self, expect: Any, timeout: float) -> None:
        crio = self.crio or safe_which("crio")
        if crio is None:
            raise VerifyFailed("no crio program safe to run on PATH to ask CRI-O what it runs")

        def probe() -> str | None:
            p = self._run([crio, "status", "--socket", self.socket, "config"],
                          capture_output=True, text=True, timeout=30)
            if p.returncode != 0:
                return ""
            if expect is None:
                return None
            bad = runtime_mismatches(expect, *runtimes_from_status(p.stdout))
            return "CRI-O reports: " + "; ".join(bad) if bad else None

        poll(probe, timeout, f"CRI-O did not answer on {self.socket}")


def crio_version(exe: str | None, run: Any = door.as_run) -> tuple[int, int, int] | None:
    """(major, minor, patch) that `exe --version` says ("crio version 1.30.4"), or None."""
    if exe is None:
        return None
    try:
        p = run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    m = re.search(r"crio version (\d+)\.(\d+)\.(\d+)", p.stdout or "")
    return (int(m[1]), int(m[2]), int(m[3])) if p.returncode == 0 and m else None


class SignalCrio(SystemdCrio):
    """SIGHUP to the running CRI-O, which re-reads crio.conf and crio.conf.d (from 1.25.1 its
    runtime tables and default_runtime too), then the same check as after a restart: `crio
    status config` must show the change. The process signalled is the unit's MainPID, and only
    when it is the process serving CRI-O's socket, every uid of it is root's and it is a crio:
    a stale or user-started `crio` is never signalled (the rules nvdocker2 keeps for dockerd)."""

    strategy = "signal"
    verb = "reload"
    # A signal that could not be sent never reached CRI-O: only the file goes back.
    reapply_after_failed_apply = False

    def __init__(self, unit: str = "crio", socket: str = DEFAULT_SOCKET, verify: bool = True,
                 run: Any = door.as_run, systemctl: str = "systemctl",
                 proc: Path = Path("/proc"), crio: str | None = None) -> None:
        super().__init__(unit, socket, verify, run, crio)
        self.systemctl, self.proc = systemctl, Path(proc)

    def find(self) -> int:
        """CRI-O's pid; EnvironmentProblem (nothing signalled) when it cannot be trusted."""
        from nvdocker2.engines.docker.service.identity import socket_peer, untrusted_owner
        from nvdocker2.engines.docker.service.managers import SystemdManager
        from nvdocker2.engines.docker.service.process import is_named

        other = "use --reload systemd to restart CRI-O instead"
        pid = SystemdManager(self.unit, self.systemctl).main_pid()
        if pid is None:
            raise EnvironmentProblem(f"systemd names no running process for the {self.unit} "
                                     "unit", f"start it (systemctl start {self.unit}), or {other}")
        peer = socket_peer(self.socket)
        if peer is None:
            raise EnvironmentProblem(f"CRI-O does not answer on {self.socket}",
                                     f"pass its socket with --containerd-address, or {other}")
        if peer.pid != pid:
            raise EnvironmentProblem(f"{self.socket} is served by pid {peer.pid}, not by the "
                                     f"{self.unit} unit's MainPID {pid}", other)
        why = untrusted_owner(pid, self.proc, euid=0, uid=peer.uid)
        if why is not None:
            raise EnvironmentProblem(f"not signalling CRI-O: {why}", other)
        if not is_named(pid, "crio", self.proc):
            raise EnvironmentProblem(f"not signalling pid {pid}: it is not a crio process", other)
        return pid

    def apply(self) -> None:
        pid = self.find()
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            raise VerifyFailed(f"CRI-O (pid {pid}) exited before it could be signalled") from None


def make_service(reload: str, unit: str, socket: str, verify: bool,
                 run: Any = door.as_run, systemctl: str = "systemctl",
                 proc: Path = Path("/proc"), exe: str | None = "") -> tuple[Any, str | None]:
    """(service, why) for `--reload auto|systemd|signal` (why: what auto chose it for).
    `signal` finds and checks CRI-O's process here, before anything is written. `exe`: the
    crio whose version auto asks ("": the one on PATH)."""
    restart = SystemdCrio(unit, socket, verify, run, exe or None)
    if reload == "systemd":
        return restart, None
    sig = SignalCrio(unit, socket, verify, run, systemctl, proc, exe or None)
    if reload == "signal":
        sig.find()
        return sig, None
    version = crio_version(safe_which("crio") if exe == "" else exe, run)
    if version is None:
        return restart, "crio on PATH did not say its version; restarting is what every CRI-O takes"
    named = "CRI-O " + ".".join(map(str, version))
    if version < SIGHUP_RELOADS_RUNTIMES:
        return restart, f"{named} re-reads its runtimes only when it starts"
    try:
        pid = sig.find()
    except EnvironmentProblem as e:
        return restart, f"{e.message}; restarting instead"
    return sig, f"{named} (pid {pid}) re-reads its runtimes on SIGHUP"
