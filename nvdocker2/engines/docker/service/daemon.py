"""The transaction's `Daemon`: check a candidate file, reload or restart dockerd, verify.

Two objects of the same shape: `Dockerd` (a manager that can reload it, an Engine API client
to verify) or `NoReload` (strategy "none": tell the user what to run). Both say why they were
picked in `reason`; `select.make_daemon` picks one from the CLI's daemon flags.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from nvdocker2 import locations
from nvdocker2.engines.docker.service.api import (
    EngineClient,
    EngineError,
    EngineUnavailable,
)
from nvdocker2.engines.peer import INIT_PID, socket_peer
from nvdocker2.engines.docker.service.logs import (
    RELOADED_MARKERS,
    STARTED_MARKERS,
    LogSource,
    NoLog,
    errors_in,
    find_refusal,
    has_marker,
    last_words,
)
from nvdocker2.engines.docker.service.managers import SignalManager, SystemdManager, SysvManager
from nvdocker2.host import run
from nvdocker2.engines.docker.service.process import (
    DockerdProcess,
    Served,
    identify,
    flag_conflicts,
    is_dockerd,
    read_pidfile,
    read_process,
    start_time,
)
from nvdocker2.engines.docker.service.progress import Reporter, SilentReporter
from nvdocker2.engines.base import EngineDied
from nvdocker2.host import testing
from nvdocker2.errors import BadInput, DaemonUnreachable, EnvironmentProblem
from nvdocker2.engines.docker.service import (
    Expectation,
    VerifyFailed,
    describe_expectation,
    expected_state,
    mismatches,
)

# Test hook (fault-injection tests only): a shell command run right before dockerd is reloaded.
RELOAD_HOOK = "NVDOCKER2_TEST_RUN_BEFORE_RELOAD"
DEFAULT_PIDFILE = Path("/var/run/docker.pid")
# After /info matches, how long to wait for the log to confirm the reload before trusting
# /info alone (dockerd logs "Reloaded configuration" within milliseconds at level info).
LOG_GRACE = 1.0
POLL_FIRST = 0.05
POLL_MAX = 0.5

Manager = Union[SystemdManager, SysvManager, SignalManager]


def _dockerd_major(server_version: str | None) -> int | None:
    """dockerd's major version: from /info, else from `dockerd --version` of a dockerd binary
    that only root can have put there (never /proc/PID/exe of a process, docs/reference.md §8)."""
    text = server_version
    if not text:
        exe = run.find("dockerd", locations.DOCKERD_PLACES)
        if exe is None:
            return None
        try:
            text = run.run([exe, "--version"], timeout=15, text=True).stdout
        except OSError:
            return None
    found = re.search(r"(\d+)\.\d+", text or "")
    return int(found.group(1)) if found else None


def check_candidate_against(
    process: DockerdProcess | None,
    config_path: Path,
    candidate: dict[str, Any],
    candidate_file: Path,
    server_version: str | None = None,
) -> None:
    """Refuse (BadInput) a candidate the running dockerd would refuse, before it is written.

    Without a readable dockerd process only the file-only checks run: the reload and its
    verification catch the rest, and the transaction rolls back. (`dockerd --validate` on the
    candidate file, Docker >= 23, is run by the transaction for every strategy.)
    """
    if process is not None:
        given = process.config_file()
        if (
            given
            and os.path.isabs(given)
            and os.path.realpath(given) != os.path.realpath(config_path)
        ):
            raise BadInput(
                f"dockerd (pid {process.pid}) reads {given} (its --config-file), not {config_path}",
                f"pass --config {given}",
            )
        conflicts = flag_conflicts(candidate, process)
        if conflicts:
            keys = ", ".join(f'"{key}" (flag {flag})' for key, flag in conflicts)
            raise BadInput(
                f"{config_path}: {keys} also set on the command line of dockerd (pid "
                f"{process.pid}), which refuses a setting given both as a flag and in the file",
                "remove the key from daemon.json, or the flag from dockerd's command line "
                "(systemctl edit docker), then run this again",
            )
    default = candidate.get("default-runtime")
    runtimes = candidate.get("runtimes")
    defined = set(runtimes) if isinstance(runtimes, dict) else set()
    if isinstance(default, str) and default and default != "runc" and default not in defined:
        if "." in default and (_dockerd_major(server_version) or 0) >= 23:
            return  # from 23.0 a containerd shim name (io.containerd.runc.v2) is a valid default
        raise BadInput(
            f'{config_path}: "default-runtime" is "{default}", which "runtimes" does not define; '
            "dockerd refuses to start with it",
            f'define runtime "{default}" in "runtimes" or set "default-runtime" to "runc"',
        )


class Dockerd:
    """A dockerd that a manager can reload or restart and the Engine API can verify."""

    def __init__(
        self,
        manager: Manager,
        client: EngineClient,
        *,
        restart: bool = False,
        verifies: bool = True,
        log: LogSource | None = None,
        reporter: Reporter | None = None,
        reason: str = "",
        proc: Path = Path("/proc"),
    ) -> None:
        self.manager = manager
        self.client = client
        self.restart = restart
        self.verifies = verifies
        self.strategy = manager.name
        # A SIGHUP keeps runtimes the file no longer names; a restart reads the file afresh.
        self.needs_transition = not restart
        self.reason = reason
        self.proc = proc
        self.reporter = reporter or SilentReporter()
        self.log = log if log is not None else NoLog()
        self._old_pid: int | None = None
        self._acted = False
        self._reloads = 0
        self._restart_error: str | None = None
        self._before: Mapping[str, Any] | None = None  # /info before a reload
        self._flags_checked = False
        self._watched: tuple[int, str, tuple[str, ...]] | None = None  # pid, start, argv
        self._first_info: dict[str, str] | None = None
        self.served: Served | None = None

    @property
    def log_description(self) -> str | None:
        """Where dockerd's own words about a refused change can be read, for the user's hint.

        The log file or the journalctl command this daemon reads; None when nothing says
        where dockerd logs (then only /info was consulted).
        """
        if isinstance(self.log, NoLog):
            return None
        return self.log.description

    # -- before anything is written -------------------------------------------------------

    def server_version(self) -> str | None:
        """The running dockerd's version (GET /info, asked once); None when not verifying or
        when it does not answer (check_candidate then says so)."""
        return self._asked("ServerVersion") if self.verifies else None

    def running_default(self) -> str | None:
        """The default runtime the running dockerd uses (GET /info `DefaultRuntime`, asked
        once); None when not verifying or when it does not answer. A reload keeps it when the
        file has no "default-runtime", so the plan must keep it valid."""
        return self._asked("DefaultRuntime") if self.verifies and self.needs_transition else None

    def _asked(self, key: str) -> str | None:
        """A field of /info before anything is changed, asked once for all of them."""
        if self._first_info is None:
            try:
                info = self.client.info()
            except (EngineUnavailable, EngineError):
                return None
            self._first_info = {k: str(info.get(k) or "") for k in ("ServerVersion",
                                                                  "DefaultRuntime")}
        return self._first_info[key] or None

    def check_candidate(self, config_path: Path, candidate: dict[str, Any],
                        candidate_file: Path) -> None:
        version = None
        if self.verifies:
            try:
                version = self.client.info().get("ServerVersion")
            except (EngineUnavailable, EngineError) as exc:
                raise DaemonUnreachable(
                    f"dockerd does not answer on {self.client.host.describe()} ({exc}); "
                    "the change could not be verified",
                    "start dockerd (systemctl start docker), point --docker-host at its socket, "
                    "or pass --no-verify to only write the file", UNCHECKED_FLAGS,
                ) from exc
        hint = self.manager.main_pid()
        if hint is None and isinstance(self.manager, SignalManager):
            raise DaemonUnreachable(
                f"{self.manager.pidfile} names no running dockerd, so there is nothing to signal",
                "start dockerd, give its pidfile with --pidfile, or use --reload systemd",
                UNCHECKED_FLAGS,
            )
        served = identify(self.client.host, hint, self._hint_name(), self.proc)
        self.served = served
        check_candidate_against(served.process, config_path, candidate, candidate_file, version)
        # The flags check ran on the dockerd behind the socket and passed: positive evidence
        # that it takes this file (docs/reference.md §8), even when /info already showed the change.
        self._flags_checked = served.process is not None and served.by_socket

    def _hint_name(self) -> str:
        if isinstance(self.manager, SystemdManager):
            return f"systemd's MainPID of {self.manager.unit}"
        return str(self.manager.pidfile)

    def _current_pid(self) -> int | None:
        """The pid of the dockerd serving the socket now (else the manager's word)."""
        sock = self.client.host.socket_path
        peer = socket_peer(sock, timeout=1.0) if sock is not None else None
        if peer is not None and peer.pid != INIT_PID and is_dockerd(peer.pid, self.proc):
            return peer.pid
        return self.manager.main_pid()

    def lags_behind(self, expect: Expectation) -> bool:
        """True when dockerd answers and does not report `expect` (the file is ahead of it)."""
        if not self.verifies:
            return False
        try:
            info = self.client.info(timeout=5)
        except (EngineUnavailable, EngineError):
            return False
        return bool(mismatches(info, expect))

    # -- acting ---------------------------------------------------------------------------

    def reload(self) -> None:
        """Reload (or restart) dockerd; the log is marked first so verify reads only new lines."""
        self.log.mark()
        self._reloads += 1
        self._restart_error = None
        self._before = None
        if self.restart:
            self._old_pid = self._current_pid()
            self._warn_before_restart()
            self._acted = True
            try:
                self.manager.restart()
            except EnvironmentProblem as exc:
                # A dockerd that went down and did not come back most likely refused the new
                # file: verify reports it (with the journal's words) and the transaction rolls
                # back. One still answering was never restarted: the command itself failed.
                if not self.verifies or self._answers():
                    raise
                self._restart_error = exc.message
        else:
            self._before = self._info_now() if self.verifies else None
            self._watched = self._watch()
            command = testing.hook(RELOAD_HOOK)
            if command:
                run.run(["/bin/sh", "-c", command], timeout=60)
            try:
                self.manager.reload()
            except EnvironmentProblem:
                died = self._died("before it could be reloaded")  # as verify would say
                if died is None:
                    raise
                raise died from None
            self._acted = True

    def _watch(self) -> tuple[int, str, tuple[str, ...]] | None:
        """The dockerd a reload goes to, as pid, start time and command line: verify watches
        it, so a dockerd that dies on the new file is noticed at once."""
        process = self.served.process if self.served is not None else None
        pid = process.pid if process is not None else self.manager.main_pid()
        if pid is None:
            return None
        started = start_time(pid, self.proc)
        if process is None or process.pid != pid:
            process = read_process(pid, self.proc)
        if started is None:
            return None
        return pid, started, process.argv if process is not None else ()

    def _died(self, when: str = "after the reload") -> EngineDied | None:
        """EngineDied when the dockerd the reload went to has exited, quoting its last words."""
        if self._watched is None or self.restart:
            return None
        pid, started, argv = self._watched
        if start_time(pid, self.proc) == started:
            return None
        said = last_words(self.log.lines())
        why = f": {said}" if said else f" (see {self.log.description})"
        return EngineDied(f"dockerd (pid {pid}) exited {when}{why}",
                          f"dockerd is not running; start it again: {self.start_command(argv)}")

    def start_command(self, argv: tuple[str, ...] = ()) -> str:
        """How to start this dockerd again: its manager's start, else the command line the
        dead process ran with."""
        if isinstance(self.manager, SystemdManager):
            return " ".join(self.manager.systemctl_argv("start", self.manager.unit))
        if isinstance(self.manager, SysvManager):
            return f"{self.manager.service} {self.manager.unit} start"
        if argv:
            import shlex  # here: only a dead dockerd's message needs it

            return shlex.join(argv)
        return "start dockerd the way this host starts it (systemctl start docker)"

    def _info_now(self) -> Mapping[str, Any] | None:
        try:
            return self.client.info(timeout=2)
        except (EngineUnavailable, EngineError):
            return None

    def _answers(self) -> bool:
        try:
            return self.client.ping(timeout=2)
        except (EngineUnavailable, EngineError):
            return False

    def _warn_before_restart(self) -> None:
        try:
            info = self.client.info(timeout=5)
        except (EngineUnavailable, EngineError):
            return
        running = info.get("ContainersRunning") or 0
        if not info.get("LiveRestoreEnabled") and running:
            self.reporter.note(
                f"warning: live-restore is off: restarting dockerd stops the {running} running "
                'container(s) (set "live-restore": true to keep them)'
            )
        else:
            self.reporter.note("restarting dockerd (containers without live-restore stop)")

    def verify(self, expect: Expectation, timeout: float) -> str | None:
        """Poll /info until dockerd reports `expect`; raise VerifyFailed with dockerd's words.

        A refusal line in dockerd's log after the first reload fails verify at once, even if
        /info looks right: that file would stop dockerd from starting next time. After a later
        reload (the transaction's way back) /info alone decides: dockerd keeping the previous
        state is exactly what the way back needs, whichever file it refused on the way.

        Returns None when dockerd is proven to run the file (reference §8: its log's reload line,
        the flags check of the dockerd behind the socket, /info changing as expected, a new
        dockerd after a restart), else the warning that its acceptance could not be seen.
        """
        start = time.monotonic()
        deadline = start + timeout
        interval = POLL_FIRST
        matched_at: float | None = None
        markers = STARTED_MARKERS if self.restart else RELOADED_MARKERS
        state = "no answer yet"
        while True:
            died = self._died()
            if died is not None:
                self.reporter.done(False, died.reason)
                raise died
            lines = self.log.lines() if self._acted else []
            refusal = find_refusal(lines)
            now = time.monotonic()
            try:
                info = self.client.info(timeout=min(self.client.timeout, max(0.5, deadline - now)))
            except (EngineUnavailable, EngineError) as exc:
                problems = [f"dockerd not answering ({exc})"]
            else:
                problems = mismatches(info, expect)
                if not problems and not self._is_new_process():
                    problems = ["the old dockerd is still running"]
            if refusal and (problems or self._reloads <= 1):
                self.reporter.done(False, "dockerd refused the configuration")
                raise VerifyFailed(f"dockerd refused the configuration: {refusal}")
            if problems:
                state = "; ".join(problems)
                matched_at = None
            else:
                reports = "dockerd reports " + describe_expectation(expect)
                state = f"{reports}; waiting for its log to confirm the reload"
                if matched_at is None:
                    matched_at = now
                proven = (
                    not self._acted
                    or refusal is not None
                    or self._reloads > 1
                    or has_marker(lines, markers)
                    or (
                        self._before is not None
                        and expected_state(info, expect) != expected_state(self._before, expect)
                    )
                    or (self.restart and self._old_pid is not None)
                )
                waited = isinstance(self.log, NoLog) or now - matched_at >= LOG_GRACE
                if proven or (waited and self._flags_checked):
                    self.reporter.done(True, f"{reports} ({now - start:.1f}s)")
                    return None
                if waited:
                    self.reporter.done(
                        True, f"{reports}, as before the reload ({now - start:.1f}s)"
                    )
                    return (
                        f"dockerd already reported {describe_expectation(expect)} "
                        f"before the {'restart' if self.restart else 'reload'}, and its "
                        "acceptance of the new file could not be seen (no reload line in "
                        f"{self.log.description}, no dockerd identified behind "
                        f"{self.client.host.describe()}): not verified; check dockerd's log"
                    )
            now = time.monotonic()
            if now >= deadline:
                self.reporter.done(False, state)
                said = errors_in(self.log.lines() if self._acted else [])
                detail = f"; dockerd logged: {said[-1]}" if said else ""
                if self._restart_error:
                    detail += f"; {self._restart_error}"
                raise VerifyFailed(
                    f"dockerd did not report {describe_expectation(expect)} within {timeout:g}s: "
                    f"{state}{detail}"
                )
            self.reporter.waiting(now - start, state)
            time.sleep(min(interval, max(0.0, deadline - now)))
            interval = min(interval * 1.5, POLL_MAX)

    def _is_new_process(self) -> bool:
        if not (self.restart and self._acted and self._old_pid is not None):
            return True
        pid = self._current_pid()
        return pid is not None and pid != self._old_pid


UNCHECKED_FLAGS = "the running dockerd's flags (dockerd refuses a key also given as a flag)"


class NoReload:
    """Strategy "none": the file is written and dockerd is left alone (the transaction tells
    the user what to run). `reason` says why nothing is reloaded.

    When auto found no dockerd and verification was asked, `check_candidate` refuses with
    `pending` (exit 3) before anything is written.
    """

    strategy = "none"
    verifies = False

    def __init__(
        self,
        reason: str,
        *,
        pending: DaemonUnreachable | None = None,
        pidfile: Path = DEFAULT_PIDFILE,
        proc: Path = Path("/proc"),
    ) -> None:
        self.reason = reason
        self.pending = pending
        self.pidfile = Path(pidfile)
        self.proc = proc

    def check_candidate(self, config_path: Path, candidate: dict[str, Any],
                        candidate_file: Path) -> None:
        if self.pending is not None:
            raise self.pending
        pid = read_pidfile(self.pidfile)
        process = read_process(pid, self.proc) if pid is not None else None
        check_candidate_against(process, config_path, candidate, candidate_file)

    def reload(self) -> None:
        return None

    def verify(self, expect: Expectation, timeout: float) -> None:
        return None
