"""systemd as the engines see it: whether it runs here, whether it runs a unit, the unit's main
process, and what a failed `systemctl` means in one line. Shared by Docker, containerd and
CRI-O (each engine's service.py decides what to restart or signal); every program is run
through nvdocker2.host.run."""

from __future__ import annotations

import os

from nvdocker2.host import run


def systemd_booted() -> bool:
    """Whether systemd is the init system here (sd_booted(3): /run/systemd/system exists)."""
    return os.path.isdir("/run/systemd/system")


def unit_active(unit: str) -> bool:
    """Whether systemctl knows `unit` as active (False without systemd or systemctl)."""
    if not run.safe_which("systemctl"):
        return False
    try:
        return run.run(["systemctl", "is-active", "--quiet", unit], timeout=15).returncode == 0
    except OSError:
        return False


def systemctl_failure(unit: str, stderr: str, verb: str = "restart") -> str:
    """What a failed `systemctl VERB UNIT` means, in one line of ours."""
    if "not been booted with systemd" in stderr or "Failed to connect to bus" in stderr:
        return f"systemd is not running on this host, so it cannot {verb} {unit}"
    return f"systemctl {verb} {unit} failed: " + (stderr.strip().splitlines()
                                                   or ["no reason given"])[-1]


def unit_main_pid(unit: str, systemctl: str = "systemctl", user: bool = False) -> int | None:
    """The unit's MainPID as systemd says it (`systemctl show -p MainPID`), or None: no such
    unit, no process (0), or no systemctl that is safe to run."""
    argv = [systemctl, *(["--user"] if user else []), "show", "-p", "MainPID", unit]
    try:
        shown = run.run(argv, timeout=15, text=True).stdout
    except (OSError, run.NotRun, run.Timeout):
        return None
    for line in shown.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MainPID" and value.strip().isdigit() and int(value) > 0:
            return int(value)
    return None
