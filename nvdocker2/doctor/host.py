"""The doctor's boundaries with the host: a root directory standing for `/`, and a command runner.

Every check reads `/proc`, `/dev`, `/sys` and `/etc` through a `HostRoot`, and runs programs
through a `Runner`, so tests point both at a prepared tree and never read the real host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from nvdocker2.host import run

# The PATH the hook and nvidia-container-cli are looked up on when nothing better is known
# (the same fixed PATH the runtime gives the hook it injects, docs/reference.md §3).
SYSTEM_PATH = run.SYSTEM_PATH

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
    """Run `argv` through the door (nvdocker2.host.run: a program only root could have put
    there, a clean environment plus `env`, cwd /, Python with -I), stdin closed; past
    `timeout` seconds its whole group is killed.

    Never raises for the program's failures: a missing or unsafe program, a permission error
    or a timeout come back as `error`, so one stuck tool cannot stop the doctor.
    """
    argv = tuple(str(a) for a in argv)
    try:
        ran = run.run(argv, timeout=timeout, text=True, env=env)
    except run.NotRun as exc:
        return CommandResult(argv, None, "", "", str(exc))
    except run.Timeout:
        return CommandResult(argv, None, "", "", f"{argv[0]} timed out after {timeout:g} s")
    except OSError as exc:
        return CommandResult(argv, None, "", "", f"cannot run {argv[0]}: {exc.strerror}")
    return CommandResult(argv, ran.returncode, ran.stdout, ran.stderr)
