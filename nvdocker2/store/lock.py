"""The state directory and its lock: where it is, whether it can be trusted (reference §8), and the
exclusive lock every change holds."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Iterator

from nvdocker2.errors import EnvironmentProblem
from nvdocker2.host import files
from nvdocker2.host.run import trusted_ids
from nvdocker2.store.atomic import make_dirs, os_error, remove_dead_temps

DEFAULT_STATE_DIR = "/var/lib/nvdocker2"


def state_dir() -> Path:
    """`$NVDOCKER2_STATE_DIR`, else /var/lib/nvdocker2 (root) or ~/.local/state/nvdocker2."""
    env = os.environ.get("NVDOCKER2_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() != 0:
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return Path(base) / "nvdocker2"
    return Path(DEFAULT_STATE_DIR)


def clean_state_temps(state: Path) -> list[Path]:
    """Remove temp files of ours that a killed run left in the state directory (backups/,
    journal/, probes/). Everything there is ours; the pid in the name protects a live writer."""
    removed: list[Path] = []
    for d in (state / "backups", state / "journal", state / "probes"):
        removed += remove_dead_temps(d)
    return removed


# --- trust in the state directory (reference §8) --------------------------------------------------


class UntrustedState(EnvironmentProblem):
    """The state directory, or something in it, could have been written by another user."""


def _untrusted(state: Path, path: Path, why: str, fix: str) -> UntrustedState:
    return UntrustedState(
        f"state directory {state}: {path} {why}; nothing was read from it or written to it",
        f"{fix}, then run again (or set NVDOCKER2_STATE_DIR to a directory only you can write)",
    )


def _writable_by_others(st: os.stat_result) -> str | None:
    who = [w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if
           st.st_mode & bit]
    return " and ".join(who) or None


def _check_ancestors(state: Path) -> None:
    """No directory above `state` may let another user swap it: owned by root or by us, and
    not writable by group/others unless sticky (like /tmp). Root's, as
    nvdocker2.host.run.trusted_ids counts them in this user namespace."""
    uid = os.geteuid()
    trusted = trusted_ids(uid).uids
    paths = {Path(os.path.abspath(state)), Path(os.path.realpath(state))}
    for above in {a for p in paths for a in p.parents}:
        try:
            st = os.stat(above)
        except OSError:
            continue
        if st.st_uid not in trusted:
            raise _untrusted(state, above, f"(a directory above it) is owned by uid {st.st_uid}",
                             "use a state directory under directories owned by root or you")
        who = _writable_by_others(st)
        if who and not st.st_mode & stat.S_ISVTX:
            raise _untrusted(state, above, f"(a directory above it) is writable by {who}",
                             f"chmod go-w {above}")


def check_state_dir(state: Path) -> None:
    """Raise UntrustedState (exit 3) unless the state directory (when it exists) and
    everything in it is owned by the invoking user, writable by no one else, and holds no
    symlink or special file; the directories above it must not let another user swap it."""
    uid = os.geteuid()
    _check_ancestors(state)
    try:
        st = os.stat(state)
    except FileNotFoundError:
        return
    except OSError as e:
        raise os_error(e, f"state directory {state}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise EnvironmentProblem(
            f"state directory {state} is not a directory", "set NVDOCKER2_STATE_DIR to a directory"
        )
    todo = [(Path(state), st, 0)]
    while todo:
        path, st, depth = todo.pop()
        if stat.S_ISLNK(st.st_mode):
            raise _untrusted(state, path, f"is a symlink (to {os.readlink(path)!r})",
                             f"remove it: rm {path}")
        if st.st_uid != uid:
            raise _untrusted(state, path, f"is owned by uid {st.st_uid}, not by you (uid {uid})",
                             f"remove it if you did not put it there (rm -r {path}), or: "
                             f"chown {uid} {path}")
        who = _writable_by_others(st)
        if who:
            raise _untrusted(state, path, f"is writable by {who} "
                             f"(mode {stat.S_IMODE(st.st_mode):04o})", f"chmod go-w {path}")
        if stat.S_ISDIR(st.st_mode):
            if depth >= 3:
                raise _untrusted(state, path, "is a directory nvdocker2 never makes",
                                 f"remove it: rm -r {path}")
            try:
                names = os.listdir(path)
            except OSError as e:
                raise os_error(e, f"state directory {path}") from None
            for name in names:
                child = path / name
                try:
                    todo.append((child, os.lstat(child), depth + 1))
                except FileNotFoundError:
                    continue
        elif not stat.S_ISREG(st.st_mode):
            raise _untrusted(state, path, "is not a regular file", f"remove it: rm {path}")


def read_state_file(path: Path, what: str) -> bytes | None:
    """The bytes of a file in the state directory, never through a symlink (None: absent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise EnvironmentProblem(
                f"{what} {path} is a symlink; nothing was read from it",
                f"remove it: rm {path}",
            ) from None
        raise os_error(e, f"{what} {path}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise EnvironmentProblem(f"{what} {path} is not a regular file",
                                     f"remove it: rm {path}")
        return f.read()


def ensure_state_dir(state: Path) -> Path:
    """Create the state directory (0700) and check that it can be trusted (docs/reference.md §8)."""
    check_state_dir(state)
    try:
        make_dirs(state)
    except OSError as e:
        raise os_error(e, f"state directory {state}") from None
    check_state_dir(state)
    return state


@contextlib.contextmanager
def locked(state: Path, timeout: float) -> Iterator[Path]:
    """Hold the exclusive nvdocker2 lock of `state` (waiting up to `timeout` s, else exit 3)."""
    from filelock import FileLock, Timeout

    ensure_state_dir(state)
    lock_path = state / "lock"
    try:  # ours, 0600 whatever the umask, never through a symlink
        files.open_lock_file(lock_path, 0o600)
    except OSError as e:
        raise os_error(e, f"lock {lock_path}") from None
    lock = FileLock(str(lock_path), timeout=max(0.0, timeout))
    try:
        lock.acquire(poll_interval=0.05)
    except Timeout:
        raise EnvironmentProblem(
            f"another nvdocker2 is changing the configuration (lock {lock_path}); "
            f"gave up after {timeout:g} s",
            "wait for it to finish and run again, or raise --timeout",
        ) from None
    except OSError as e:
        raise os_error(e, f"lock {lock_path}") from None
    try:
        yield lock_path
    finally:
        lock.release()
