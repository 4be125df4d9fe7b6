"""Who can reload or restart dockerd: systemd, a SysV init script, or a SIGHUP by pid.

Each manager does one thing per method and raises `EnvironmentProblem` with what to run by
hand when it cannot. Commands run with an argv list and a timeout, never through a shell.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from nvdocker2.engines.docker.service.logs import FileLog, JournalLog, LogSource, NoLog
from nvdocker2.engines.docker.service.process import is_dockerd, read_pidfile
from nvdocker2.engines.systemd import systemctl_failure, unit_main_pid
from nvdocker2.errors import EnvironmentProblem
from nvdocker2.host import run

COMMAND_TIMEOUT = 120.0  # `systemctl restart docker` waits for containers to stop


def run_command(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> run.Ran:
    """Run a service-manager command through the door (only a systemctl or service that no
    other user could have placed; clean environment; cwd /); a missing or unsafe binary or a
    hang is an EnvironmentProblem."""
    try:
        return run.run(argv, timeout=timeout, text=True)
    except run.NotRun as exc:
        raise EnvironmentProblem(
            str(exc), "install it, or choose another --reload mode"
        ) from exc
    except run.Timeout as exc:
        raise EnvironmentProblem(
            f"{' '.join(argv)} did not finish within {timeout:g}s",
            "look at dockerd's state with: systemctl status docker",
        ) from exc
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot run {argv[0]}: {exc.strerror}", "install it, or choose another --reload mode"
        ) from exc


def _failed(
    argv: Sequence[str], proc: run.Ran, hint: str
) -> EnvironmentProblem:
    text = proc.stderr or proc.stdout or ""
    if Path(argv[0]).name == "systemctl" and len(argv) >= 3:
        said = systemctl_failure(argv[-1], text, argv[1])
        if said.startswith("systemd is not running"):
            return EnvironmentProblem(said, "use --reload signal (SIGHUP to the dockerd in "
                                      "--pidfile) or --reload none")
    lines = text.strip().splitlines()
    detail = f": {lines[-1]}" if lines else ""
    return EnvironmentProblem(f"{' '.join(argv)} exited {proc.returncode}{detail}", hint)


class SystemdManager:
    """`systemctl reload|restart docker`; dockerd's pid is the unit's MainPID."""

    name = "systemd"

    def __init__(
        self, unit: str = "docker", systemctl: str = "systemctl", user: bool = False
    ) -> None:
        self.unit = unit
        self.systemctl = systemctl
        self.user = user  # rootless Docker: the user's systemd instance

    def systemctl_argv(self, *args: str) -> list[str]:
        return [self.systemctl, *(["--user"] if self.user else []), *args]

    def describe(self) -> str:
        return " ".join(self.systemctl_argv("is-active", self.unit))

    def available(self) -> bool:
        return run.safe_which(self.systemctl) is not None

    def is_active(self) -> bool:
        """True when systemd runs the unit (false too when systemd is not PID 1)."""
        if not self.available():
            return False
        try:
            proc = run_command(self.systemctl_argv("is-active", "--quiet", self.unit), timeout=15)
        except EnvironmentProblem:
            return False
        return proc.returncode == 0

    def main_pid(self) -> int | None:
        return unit_main_pid(self.unit, self.systemctl, self.user)

    def _run(self, action: str) -> None:
        argv = self.systemctl_argv(action, self.unit)
        proc = run_command(argv)
        if proc.returncode != 0:
            raise _failed(argv, proc, f"see: {' '.join(self.systemctl_argv('status', self.unit))}")

    def reload(self) -> None:
        self._run("reload")

    def restart(self) -> None:
        self._run("restart")

    def default_log(self) -> LogSource:
        return JournalLog(self.unit, user=self.user)


class SysvManager:
    """`service docker reload|restart` (SysV init scripts, and hosts where `service` wraps
    whatever runs dockerd); the pid comes from the pidfile."""

    name = "sysv"

    def __init__(
        self,
        pidfile: Path,
        service: str = "service",
        unit: str = "docker",
        proc: Path = Path("/proc"),
    ) -> None:
        self.pidfile = Path(pidfile)
        self.service = service
        self.unit = unit
        self.proc = proc

    def main_pid(self) -> int | None:
        pid = read_pidfile(self.pidfile)
        return pid if pid is not None and is_dockerd(pid, self.proc) else None

    def _run(self, action: str) -> None:
        argv = [self.service, self.unit, action]
        proc = run_command(argv)
        if proc.returncode != 0:
            raise _failed(argv, proc, f"see: service {self.unit} status; /var/log/docker.log")

    def reload(self) -> None:
        self._run("reload")

    def restart(self) -> None:
        self._run("restart")

    def default_log(self) -> LogSource:
        path = Path("/var/log/docker.log")
        return FileLog(path) if path.exists() else NoLog()


class SignalManager:
    """SIGHUP to the dockerd named by the pidfile, after checking it is a dockerd.

    Restarting needs something that starts dockerd again, which a signal is not; the
    factory refuses `--restart` with this manager before anything is written.
    """

    name = "signal"

    def __init__(self, pidfile: Path, proc: Path = Path("/proc")) -> None:
        self.pidfile = Path(pidfile)
        self.proc = proc

    def main_pid(self) -> int | None:
        pid = read_pidfile(self.pidfile)
        return pid if pid is not None and is_dockerd(pid, self.proc) else None

    def reload(self) -> None:
        pid = self.main_pid()
        if pid is None:
            raise EnvironmentProblem(
                f"no running dockerd found through {self.pidfile}",
                "start dockerd, or give its pidfile with --pidfile",
            )
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError as exc:
            raise EnvironmentProblem(
                f"dockerd (pid {pid}) exited before it could be reloaded",
                "start dockerd again; the new daemon.json is read at start",
            ) from exc
        except PermissionError as exc:
            raise EnvironmentProblem(
                f"not allowed to signal dockerd (pid {pid})", "run nvdocker2 as root"
            ) from exc

    def restart(self) -> None:
        raise EnvironmentProblem(
            "dockerd cannot be restarted by a signal", "use --reload systemd or --reload sysv"
        )

    def default_log(self) -> LogSource:
        return NoLog()
