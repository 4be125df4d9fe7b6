"""Which dockerd, and how to reload it: the CLI's daemon flags (reference §2 `--reload`) and
the host's setup (rootful, rootless, snap) turned into a `Dockerd` or a `NoReload`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nvdocker2 import locations
from nvdocker2.engines.docker.service.api import EngineClient, parse_docker_host
from nvdocker2.engines.docker.service.daemon import (
    DEFAULT_PIDFILE,
    UNCHECKED_FLAGS,
    Dockerd,
    Manager,
    NoReload,
)
from nvdocker2.engines.peer import untrusted_owner
from nvdocker2.engines.docker.service.logs import FileLog, LogSource, NoLog
from nvdocker2.engines.docker.service.managers import SignalManager, SystemdManager, SysvManager
from nvdocker2.engines.docker.service.process import is_dockerd, read_pidfile
from nvdocker2.engines.docker.service.progress import Reporter, SilentReporter
from nvdocker2.errors import BadInput, DaemonUnreachable

MODES = ("auto", "systemd", "sysv", "signal", "none")


@dataclass(frozen=True)
class DaemonOptions:
    """The CLI's daemon flags (reference §2), as given; None means "the default for this setup"."""

    mode: str = "auto"
    restart: bool = False
    verify: bool = True
    docker_host: str | None = None
    pidfile: Path | None = None
    dockerd_log: Path | None = None
    unit: str | None = None
    config: Path | None = None  # the daemon.json being changed: tells the snap setup apart


@dataclass(frozen=True)
class Setup:
    """Where this host's dockerd keeps its pid and socket, and which unit runs it."""

    name: str  # "rootful", "rootless", "snap"
    unit: str
    user: bool  # the unit belongs to the user's systemd (rootless)
    pidfile: Path
    docker_host: str | None  # None: DOCKER_HOST, else the rootful socket


def detect_setup(
    config: Path | None, environ: Mapping[str, str] | None = None, euid: int | None = None
) -> Setup:
    """Rootful, rootless (not root, `$XDG_RUNTIME_DIR/docker.sock` exists) or snap (the
    daemon.json is the snap's), with the locations of Docker's rootful, rootless and snap setups."""
    if config is not None and str(config) == locations.SNAP_CONFIG:
        return Setup(
            "snap", "snap.docker.dockerd", False, Path("/run/snap.docker/docker.pid"), None
        )
    sock = locations.rootless_socket(environ, euid)
    if sock is not None:
        return Setup("rootless", "docker", True, sock.parent / "docker.pid", f"unix://{sock}")
    return Setup("rootful", "docker", False, DEFAULT_PIDFILE, None)


def _stderr_log(pid: int | None, proc: Path) -> LogSource:
    """dockerd's stderr when it is a regular file (a hand-started or init-script dockerd)."""
    if pid is None:
        return NoLog()
    try:
        target = os.readlink(Path(proc) / str(pid) / "fd" / "2")
    except OSError:
        return NoLog()
    return FileLog(Path(target)) if target.startswith("/") and Path(target).is_file() else NoLog()


def make_daemon(
    options: DaemonOptions,
    reporter: Reporter | None = None,
    *,
    proc: Path = Path("/proc"),
    environ: Mapping[str, str] | None = None,
) -> Dockerd | NoReload:
    """Pick how to reload dockerd (docs/reference.md §2 `--reload`) and say why in `.reason`.

    Raises BadInput for flags that cannot work together (before anything is written).
    """
    reporter = reporter or SilentReporter()
    if options.mode not in MODES:
        raise BadInput(f"--reload {options.mode}: unknown mode", f"use one of: {', '.join(MODES)}")
    env = os.environ if environ is None else environ
    setup = detect_setup(options.config, env)
    host = parse_docker_host(
        options.docker_host or env.get("DOCKER_HOST") or setup.docker_host, env
    )
    client = EngineClient(host)
    pidfile = Path(options.pidfile) if options.pidfile is not None else setup.pidfile
    unit = options.unit or setup.unit
    systemd = SystemdManager(unit, user=setup.user)
    manager: Manager | None = None
    if options.mode == "auto":
        if systemd.is_active():
            manager = systemd
            reason = f"systemd runs {unit}.service ({systemd.describe()})"
        else:
            pid = read_pidfile(pidfile)
            if pid is not None and is_dockerd(pid, proc):
                manager = SignalManager(pidfile, proc)
                reason = f"{pidfile} names a running dockerd (pid {pid}); systemd does not run it"
            else:
                found = "names no running dockerd" if pid is not None else "is missing"
                distrust = untrusted_owner(pid, proc) if pid is not None else None
                if distrust is not None and pid is not None and Path(proc, str(pid)).exists():
                    found = f"names a process nvdocker2 does not trust ({distrust})"
                reason = (
                    f"no running dockerd found: systemd does not run {unit}.service "
                    f"and {pidfile} {found}"
                )
    elif options.mode == "systemd":
        manager, reason = systemd, "--reload systemd"
    elif options.mode == "sysv":
        manager, reason = SysvManager(pidfile, unit=unit, proc=proc), "--reload sysv"
    elif options.mode == "signal":
        manager, reason = SignalManager(pidfile, proc), "--reload signal"
    else:
        reason = "--reload none"

    if options.restart and (options.mode == "none" or isinstance(manager, SignalManager)):
        raise BadInput(
            f"--restart: {reason}, and dockerd cannot be restarted that way",
            "use --reload systemd or --reload sysv with --restart, or drop --restart",
        )

    if manager is None:
        pending = None
        if options.mode == "auto" and options.verify:
            pending = DaemonUnreachable(
                f"{reason}; the change could not be verified",
                "start dockerd (systemctl start docker), give its pidfile with --pidfile, "
                "or pass --no-verify to only write the file", UNCHECKED_FLAGS,
            )
        return NoReload(reason, pending=pending, pidfile=pidfile, proc=proc)

    if options.dockerd_log is not None:
        log: LogSource = FileLog(Path(options.dockerd_log))
    else:
        log = manager.default_log()
        if isinstance(log, NoLog):
            log = _stderr_log(manager.main_pid(), proc)
    return Dockerd(
        manager,
        client,
        restart=options.restart,
        verifies=options.verify,
        log=log,
        reporter=reporter,
        reason=reason,
        proc=proc,
    )
