"""CRI-O as a service: applying the drop-in and asking the running CRI-O what it runs.

`systemd` restarts the unit (containers keep running: conmon holds them); `signal` sends
SIGHUP, on which CRI-O ≥ 1.25.1 re-reads its runtime tables and default_runtime
(pkg/config/reload.go, ReloadRuntimes) into the configuration `crio status` shows, but not into
the copy its CRI runs pods from (cri-o/cri-o#10202, seen on 1.36.3): so `auto` restarts.
Either way the check after is `crio status config`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from nvdocker2.engines.base import Service, VerifyFailed, poll, runtime_mismatches
from nvdocker2.engines.peer import is_named, socket_peer, untrusted_owner
from nvdocker2.engines.systemd import systemctl_failure, unit_main_pid
from nvdocker2.engines.tomlread import tomllib
from nvdocker2.errors import EnvironmentProblem
from nvdocker2.host import run as door
from nvdocker2.host.run import safe_which

DEFAULT_SOCKET = "/var/run/crio/crio.sock"
# What a SIGHUP leaves undone: CRI-O's server keeps a copy of the configuration (server/server.go)
# whose runtimes the reload replaces, while pods are run from the one it started with.
SIGHUP_LEAVES_PODS = ("CRI-O's SIGHUP reload shows new runtimes in `crio status`, yet its pods "
                      "keep the runtimes it started with (cri-o/cri-o#10202)")


def runtimes_from_status(text: str) -> tuple[dict[str, str], str]:
    """(runtime → runtime_path, default) from `crio status config` (the running TOML)."""
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


class SignalCrio(SystemdCrio):
    """SIGHUP to the running CRI-O, which re-reads crio.conf and crio.conf.d (from 1.25.1 its
    runtime tables and default_runtime too, but only for `crio status`: SIGHUP_LEAVES_PODS),
    then the same check as after a restart: `crio status config` must show the change. The
    process signalled is the unit's MainPID, and only when it is the process serving CRI-O's
    socket, every uid of it is root's and it is a crio: a stale or user-started `crio` is never
    signalled (the rules nvdocker2 keeps for dockerd)."""

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
        other = "use --reload systemd to restart CRI-O instead"
        pid = unit_main_pid(self.unit, self.systemctl)
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
    """(service, why) for `--reload auto|systemd|signal` (why: what the output says of the
    choice). `signal` finds and checks CRI-O's process here, before anything is written, and
    says what its SIGHUP leaves undone; `auto` restarts, the one way a pod gets the new
    runtime. `exe`: the crio to ask what it runs ("": the one on PATH)."""
    restart = SystemdCrio(unit, socket, verify, run, exe or None)
    if reload == "systemd":
        return restart, None
    if reload == "signal":
        sig = SignalCrio(unit, socket, verify, run, systemctl, proc, exe or None)
        sig.find()
        return sig, SIGHUP_LEAVES_PODS + ": restart CRI-O for its pods to run with the change"
    return restart, SIGHUP_LEAVES_PODS + ": restarting"
