"""The one error type of the installer side, and its exit codes (docs/reference.md §2).

Every failure a user can cause or meet is raised as an `NvDockerError` subclass carrying the
exit code and a hint; `nvdocker2.cli` alone turns it into the two stderr lines.
The runtime and the hook do not import this module: they are stdlib-only and report with
their own one-line messages.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_REJECTED = 4
EXIT_ROLLBACK_FAILED = 5


class NvDockerError(Exception):
    """A known failure: `message` is the `error:` line, `hint` the `hint:` line."""

    exit_code = EXIT_INTERNAL
    # Set by the transaction it stopped: the engine's file, and the backup that remains of the
    # change (exit 4 and 5), for `--json` (reference §2: these keys whatever happens).
    config: str | None = None
    backup: str | None = None

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadInput(NvDockerError):
    """daemon.json unreadable as JSON, wrong types, a result that would not validate, bad flags."""

    exit_code = EXIT_BAD_INPUT


class EnvironmentProblem(NvDockerError):
    """Permission denied, read-only file system, no space, lock timeout, dockerd unreachable."""

    exit_code = EXIT_ENVIRONMENT


class DaemonUnreachable(EnvironmentProblem):
    """The engine's daemon cannot be asked (not running, no systemd): a change that is to be
    verified stops before anything is written (exit 3); a dry run reports `unchecked`, what it
    could not check without the daemon, and goes on (unless --require-daemon)."""

    def __init__(self, message: str, hint: str | None = None, unchecked: str = "") -> None:
        super().__init__(message, hint)
        self.unchecked = unchecked or "whether the running engine takes the change"


class DockerdRejected(NvDockerError):
    """dockerd did not accept the change; the old file was restored and verified."""

    exit_code = EXIT_REJECTED


class RollbackFailed(NvDockerError):
    """Restoring the old state failed; the message names the backup file to restore by hand."""

    exit_code = EXIT_ROLLBACK_FAILED


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP stopped a change; `state` says exactly what the files hold
    ("... unchanged: interrupted before writing", "... restored the previous bytes ...")."""

    config: str | None = None
    backup: str | None = None

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state
