"""Which engine process is trusted (docs/reference.md §8): the process serving its socket.

Shared by every engine that signals or asks a running daemon (dockerd, CRI-O) and by doctor.
A local user can start any program named `dockerd` or `crio`, give it `-H unix:///their/sock`,
leave its pid in a stale pidfile, or set its PATH to their own directory. None of that may make
root signal it, read flags from it, or run a program from its PATH or its executable. So:

- `socket_peer` asks the kernel who serves a unix socket (`SO_PEERCRED` on a connection):
  the pid and uid of the process that called listen(). That, not argv or a pidfile, says
  which process is the daemon. Under systemd socket activation the listener is init (pid 1):
  then the unit's MainPID (systemd's own word) is the hint to take.
- `untrusted_owner` refuses a process unless all its uids are root's (or the invoking user's,
  for rootless Docker), as `nvdocker2.host.run.trusted_ids` counts them: in a user namespace
  that maps its own `nobody` to the overflow uid (an LXD container's), that uid is nobody's.
- `is_named` says whether a process is the program it should be (comm, else exe).
- Where a program may be run from is the door's to say (`nvdocker2.host.run`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from nvdocker2.host.run import trusted_ids

INIT_PID = 1


@dataclass(frozen=True)
class Peer:
    """The credentials of the process that listens on a unix socket."""

    pid: int
    uid: int
    gid: int


def socket_peer(path: str | os.PathLike[str], timeout: float = 2.0) -> Peer | None:
    """Who serves the unix socket at `path`, or None when nothing accepts a connection there."""
    import socket  # only where a daemon is asked something

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
    trusted = trusted_ids(euid, os.fspath(proc)).uids
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


def is_named(pid: int, name: str, proc: Path = Path("/proc")) -> bool:
    """True when /proc/PID's command name, else its executable's file name, is `name`."""
    base = Path(proc) / str(pid)
    try:
        if (base / "comm").read_text().strip() == name:
            return True
    except OSError:
        return False
    try:
        exe = os.readlink(base / "exe")
    except OSError:
        return False
    return os.path.basename(exe.replace(" (deleted)", "")) == name
