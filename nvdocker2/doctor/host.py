"""The doctor's boundaries with the host: a root directory standing for `/`, and a command runner.

Every check reads `/proc`, `/dev`, `/sys` and `/etc` through a `HostRoot`, and runs programs
through a `Runner`, so tests point both at a prepared tree and never read the real host.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from nvdocker2.engines.docker.service.identity import unsafe_to_run

# The PATH the hook and nvidia-container-cli are looked up on when nothing better is known
# (the same fixed PATH the runtime gives the hook it injects, SPEC §3).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The most a check reads of one file: /proc files are small, config files stay under this.
READ_LIMIT = 1 << 20


@dataclass(frozen=True)
class HostRoot:
    """The directory that stands for `/`: `/` on a real host, a tmp tree in tests."""

    root: Path = Path("/")

    def path(self, host_path: str | PurePosixPath) -> Path:
        """The real path of `host_path` (an absolute path as the host sees it)."""
        rel = str(host_path).lstrip("/")
        return self.root / rel if rel else self.root

    def show(self, real: Path) -> str:
        """The host's name for a real path under the root (what a user should read)."""
        try:
            rel = real.relative_to(self.root)
        except ValueError:
            return str(real)
        return "/" + str(rel) if str(rel) != "." else "/"

    def unroot(self, text: str) -> str:
        """`text` (a message naming real paths) with the root taken off, as the host says it."""
        prefix = str(self.root).rstrip("/")
        return text.replace(prefix + "/", "/") if prefix else text

    def read_text(self, host_path: str | PurePosixPath) -> str | None:
        """The file's text, or None when it is missing or unreadable."""
        try:
            with open(self.path(host_path), "rb") as f:
                return f.read(READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            return None

    def read_bytes(self, host_path: str | PurePosixPath) -> bytes | None:
        try:
            with open(self.path(host_path), "rb") as f:
                return f.read(READ_LIMIT)
        except OSError:
            return None

    def is_char_device(self, host_path: str | PurePosixPath) -> os.stat_result | None:
        """The stat of `host_path` when it is a character device, else None."""
        try:
            st = os.stat(self.path(host_path))
        except OSError:
            return None
        return st if stat.S_ISCHR(st.st_mode) else None

    def which(self, name: str, search_path: str | None) -> Path | None:
        """The real path of the executable `name` on `search_path` (a PATH value), or None.

        An absolute `name` is checked as is (under the root).
        """
        if "/" in name:
            candidate = self.path(name)
            return candidate if is_executable(candidate) else None
        for entry in (search_path or "").split(":"):
            if not entry.startswith("/"):
                continue
            candidate = self.path(entry) / name
            if is_executable(candidate):
                return candidate
        return None


def is_executable(path: Path) -> bool:
    """True for a regular file (after symlinks) with an execute bit that we may run."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK)


@dataclass(frozen=True)
class CommandResult:
    """What running a program gave: `error` is set when it did not run to an exit."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0

    def first_line(self) -> str:
        """The first non-empty line of stderr, else stdout, else the error (for details)."""
        for text in (self.error or "", self.stderr, self.stdout):
            for line in text.splitlines():
                if line.strip():
                    return line.strip()
        return f"exit status {self.rc}"


Runner = Callable[[Sequence[str], float, "Mapping[str, str] | None"], CommandResult]


def run_command(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run `argv` (no shell) with stdin closed; past `timeout` seconds kill its whole group.

    A program that a user other than root (or us) could have placed or replaced is not run.

    Never raises for the program's failures: a missing program, a permission error or a
    timeout come back as `error`, so one stuck tool cannot stop the doctor.
    """
    argv = tuple(str(a) for a in argv)
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=(env or os.environ).get("PATH"))
    unsafe = unsafe_to_run(exe) if exe and os.path.lexists(exe) else None
    if unsafe is not None:
        # Another user could have put or replaced it (SPEC §8): not run, and said why.
        return CommandResult(argv, None, "", "", f"not run: {unsafe}")
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(argv, None, "", "", f"cannot run {argv[0]}: {exc.strerror}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return CommandResult(argv, None, "", "", f"{argv[0]} timed out after {timeout:g} s")
    return CommandResult(
        argv, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )
