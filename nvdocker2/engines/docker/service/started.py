"""Who started a running dockerd, and so the command that reloads or restarts it: the systemd
unit whose cgroup holds it, else its parent process. `status` and `doctor` say these commands;
neither ever runs them. Everything takes a `proc` root, so tests point it at a directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from nvdocker2 import locations

# The last `NAME.service` in a cgroup path: system.slice/docker.service,
# user.slice/user-1000.slice/user@1000.service/app.slice/docker.service.
_UNIT = re.compile(r"/([^/]+)\.service(?:/|$)")


@dataclass(frozen=True)
class Starter:
    """How dockerd `pid` runs: the docker systemd `unit` holding it (None: none), whether
    that is the user's own systemd, and its parent process (pid, name) when it has one."""

    pid: int
    unit: str | None
    user_unit: bool
    parent_pid: int | None
    parent_name: str | None

    def describe_parent(self) -> str:
        if self.parent_pid is None:
            return "an unknown parent"
        return f"{self.parent_name or '?'} (pid {self.parent_pid})"


def started_by(pid: int, proc: Path = Path("/proc")) -> Starter:
    """What /proc/PID says about who runs `pid`; what cannot be read is None."""
    base = Path(proc) / str(pid)
    unit = None
    user_unit = False
    try:
        cgroups = (base / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cgroups = ""
    for line in cgroups.splitlines():
        path = line.split(":", 2)[-1]
        names = _UNIT.findall(path)
        # Only a docker unit counts: a dockerd started by hand from a shell inside another
        # service's cgroup (an ssh or CI runner unit) is not restarted by restarting that.
        if names and not names[-1].startswith("user@") and "docker" in names[-1]:
            unit = names[-1]
            user_unit = any(n.startswith("user@") for n in names)
            break
    parent_pid = parent_name = None
    try:
        stat = (base / "stat").read_text(encoding="utf-8", errors="replace")
        parent_pid = int(stat.rsplit(")", 1)[1].split()[1]) or None  # 0: none it can see
    except (OSError, IndexError, ValueError):
        pass
    if parent_pid is not None:
        try:
            parent_name = (Path(proc) / str(parent_pid) / "comm").read_text(
                encoding="utf-8", errors="replace").strip() or None
        except OSError:
            parent_name = None
    return Starter(pid, unit, user_unit, parent_pid, parent_name)


def _unit_command(s: Starter, verb: str) -> str:
    if s.unit == "snap.docker.dockerd":
        return "sudo snap restart docker"  # snap has no reload of its own
    if s.user_unit:
        return f"systemctl --user {verb} {s.unit}"
    return f"sudo systemctl {verb} {s.unit}"


def reload_command(pid: int | None, config: Path, proc: Path = Path("/proc"),
                   env: Optional[Mapping[str, str]] = None) -> str:
    """The command that makes dockerd `pid` (None: not found) re-read its file."""
    if pid is None:
        return locations.reload_hint(config, env)
    s = started_by(pid, proc)
    if s.unit is not None:
        return _unit_command(s, "reload")
    return f"sudo kill -HUP {pid}"


def restart_command(pid: int | None, config: Path, proc: Path = Path("/proc"),
                    env: Optional[Mapping[str, str]] = None) -> str:
    """The command (or, for a dockerd no service manager runs, the words) that restart
    dockerd `pid` (None: not found) as it was started."""
    if pid is None:
        if str(config) == locations.SNAP_CONFIG:
            return "sudo snap restart docker"
        hint = locations.reload_hint(config, env)
        if hint.startswith("systemctl --user"):
            return "systemctl --user restart docker"
        if str(config) == locations.ROOTFUL_CONFIG:
            return "sudo systemctl restart docker"
        return "restart the dockerd that reads this file"
    s = started_by(pid, proc)
    if s.unit is not None:
        return _unit_command(s, "restart")
    return (f"restart dockerd the way it was started (pid {pid}, started by "
            f"{s.describe_parent()}; no systemd unit runs it)")
