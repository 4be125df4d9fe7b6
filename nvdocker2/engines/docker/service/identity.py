"""Which dockerd is trusted (SPEC §8): the process serving the Engine API socket.

A local user can start any program named `dockerd`, give it `-H unix:///their/sock`, leave its
pid in a stale pidfile, or set its PATH to their own directory. None of that may make root
signal it, read flags from it, or run a program from its PATH or its executable. So:

- `socket_peer` asks the kernel who serves a unix socket (`SO_PEERCRED` on a connection):
  the pid and uid of the process that called listen(). That, not argv or a pidfile, says
  which process is dockerd. Under systemd socket activation the listener is init (pid 1):
  then the unit's MainPID (systemd's own word) is the hint to take.
- `untrusted_owner` refuses a process unless all its uids are root's (or the invoking user's,
  for rootless Docker).
- `unsafe_to_run` refuses an executable that a user other than root (or the invoking user)
  could have placed or replaced: the file and every directory on the way to it, symlinks
  followed, must be owned by a trusted user and not writable by others (a sticky directory
  such as /tmp counts as safe for entries a trusted user owns).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

INIT_PID = 1
_MAX_LINKS = 40


@dataclass(frozen=True)
class Peer:
    """The credentials of the process that listens on a unix socket."""

    pid: int
    uid: int
    gid: int


def socket_peer(path: str | os.PathLike, timeout: float = 2.0) -> Peer | None:
    """Who serves the unix socket at `path`, or None when nothing accepts a connection there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    finally:
        sock.close()
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid) if pid > 0 else None


def trusted_uids(euid: int | None = None) -> frozenset[int]:
    """Root's processes are trusted; a non-root caller (rootless Docker) also trusts its own."""
    euid = os.geteuid() if euid is None else euid
    return frozenset({0, euid})


def process_uids(pid: int, proc: Path = Path("/proc")) -> tuple[int, ...] | None:
    """The real, effective, saved and filesystem uids of `pid` (/proc/PID/status), or None."""
    try:
        text = (Path(proc) / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            try:
                return tuple(int(u) for u in line.split()[1:])
            except ValueError:
                return None
    return None


def untrusted_owner(
    pid: int, proc: Path = Path("/proc"), euid: int | None = None, uid: int | None = None
) -> str | None:
    """Why the process `pid` must not be trusted (owner), or None when root (or we) own it.

    `uid` is an owner already known (from `SO_PEERCRED`); /proc is read too when it can be.
    """
    trusted = trusted_uids(euid)
    uids = set(process_uids(pid, proc) or ())
    if uid is not None:
        uids.add(uid)
    if not uids:
        return f"the owner of pid {pid} cannot be read"
    bad = sorted(uids - trusted)
    if bad:
        whose = "root" if trusted == {0} else "root or uid " + str(max(trusted))
        return f"pid {pid} belongs to uid {bad[0]}, not {whose}"
    return None


def _others_may_write(st: os.stat_result) -> bool:
    """Writable by someone untrusted: by everyone, or by a group other than root's."""
    return bool(st.st_mode & stat.S_IWOTH) or (
        bool(st.st_mode & stat.S_IWGRP) and st.st_gid != 0
    )


def unsafe_to_run(path: str | os.PathLike, euid: int | None = None) -> str | None:
    """Why the executable at `path` must not be run as us, or None when it is safe.

    Walks the path from `/`, following symlinks: every directory must be owned by a trusted
    user and not writable by others (or be sticky, with the entry inside owned by a trusted
    user), and the file itself owned by a trusted user and not writable by others.
    """
    trusted = trusted_uids(euid)
    pending = os.fspath(path)
    if not pending.startswith("/"):
        return f"{pending} is not an absolute path"
    links = 0
    while True:
        parts = [p for p in pending.split("/") if p not in ("", ".")]
        current = "/"
        try:
            parent = os.lstat("/")
        except OSError as exc:
            return f"cannot read /: {exc.strerror}"
        if parent.st_uid not in trusted or _others_may_write(parent):
            return "/ is writable by other users"
        restart = None
        for i, name in enumerate(parts):
            if name == "..":  # every link up to here is resolved: `..` is the real parent
                current = os.path.dirname(current)
                parent = os.lstat(current)
                if i == len(parts) - 1:
                    return f"{path} is not a file"
                continue
            entry = os.path.join(current, name)
            try:
                st = os.lstat(entry)
            except OSError as exc:
                return f"cannot read {entry}: {exc.strerror}"
            if _others_may_write(parent):
                sticky = bool(parent.st_mode & stat.S_ISVTX)
                if not sticky or st.st_uid not in trusted:
                    return f"{current} is writable by other users"
            if st.st_uid not in trusted:
                return f"{entry} belongs to uid {st.st_uid}"
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    return f"{path}: too many symbolic links"
                target = os.readlink(entry)
                base = target if target.startswith("/") else os.path.join(current, target)
                restart = os.path.join(base, *parts[i + 1 :])
                break
            last = i == len(parts) - 1
            if not last and not stat.S_ISDIR(st.st_mode):
                return f"{entry} is not a directory"
            if last:
                if not stat.S_ISREG(st.st_mode):
                    return f"{entry} is not a regular file"
                if _others_may_write(st):
                    return f"{entry} is writable by other users"
                return None
            current, parent = entry, st
        if restart is None:
            return f"{path} is not a file"
        pending = restart


def first_safe(candidates: Iterable[str], euid: int | None = None) -> str | None:
    """The first executable of `candidates` that exists and is safe to run."""
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and unsafe_to_run(candidate, euid) is None:
            return candidate
    return None


def safe_which(name: str, path: str | None = None, euid: int | None = None) -> str | None:
    """`shutil.which(name)`, but only a program safe to run: the first one on PATH that no
    user other than root (or the invoking user) could have placed (see `unsafe_to_run`); a
    planted one earlier on PATH is passed over, never run."""
    dirs = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    return first_safe((os.path.join(d, name) for d in dirs if d.startswith("/")), euid)

