"""Confining the host's ldconfig to the image's own files (docs/security.md, the hook).

runc runs the createContainer hook in the container's mount namespace once every mount of the
spec is in place: the operator's volumes, /etc/hosts, hostname, resolv.conf, secrets and procfs
sit below the root file system, where the image's symlinks steered them. The hook runs the
host's ldconfig there as root, so before it does, in the hook's own process:

- `mount_id` tells which mount a directory is on, so that soname links and ldconfig folders on
  anything but the root file system's own mount are refused;
- `private_view` moves the hook into a mount namespace of its own (private propagation) in
  which every mount below the root file system is detached except the driver's read-only files,
  and ldconfig's aux cache directory is covered by an empty read-only tmpfs;
- `drop_privileges` sets no_new_privs and leaves CAP_SYS_CHROOT alone (what `ldconfig -r`
  needs) in every capability set, so the ldconfig exec'd next gets nothing else.

The container itself never sees any of this: its mounts stay as runc made them. Linux only,
stdlib only (ctypes' C half through nvdocker2.host.load, imported when a hook runs as root).
"""

from __future__ import annotations

import errno
import os
import sys

from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.rootfs import resolve_in_root

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SYS_CHROOT = 18
_CAP_VERSION_3 = 0x20080522
AUX_CACHE_DIR = "/var/cache/ldconfig"


def mount_id(fd: int) -> int:
    """The id of the mount `fd` is on (mountinfo's first field), from /proc/self/fdinfo (read
    as bytes, unbuffered: the hook reads it for every directory it checks)."""
    with open(f"/proc/self/fdinfo/{fd}", "rb", buffering=0) as f:
        for line in f.readall().splitlines():
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/fdinfo/{fd} has no mnt_id")


# How the kernel writes these four characters in mountinfo's paths.
_MOUNTINFO_ESCAPES = {ord(c): f"\\{ord(c):03o}" for c in " \t\n\\"}


def unescape_mountinfo(field: str) -> str:
    r"""Mount points in mountinfo have space, tab, newline and backslash as \NNN octal."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_below(root: str, mountinfo: str) -> dict[str, bool]:
    """Mount points strictly below `root` in a /proc/self/mountinfo text -> whether the topmost
    mount there is read-only. A busy host has hundreds of mounts, none of them below a new
    container's root: a line without the root as mountinfo writes it is passed over unsplit."""
    below: dict[str, bool] = {}
    prefix = root.rstrip("/") + "/"
    escaped = prefix.translate(_MOUNTINFO_ESCAPES)
    for line in mountinfo.splitlines():
        if escaped not in line:  # its mount point cannot start with `prefix`
            continue
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        point = unescape_mountinfo(fields[4])
        if point.startswith(prefix):
            below.pop(point, None)  # a later mount at the same point is on top
            below[point] = "ro" in fields[5].split(",")
    return below


class _Libc:
    """The few libc calls the standard library lacks, raising OSError like os does; bound
    through the one door that loads C code (`nvdocker2.host.load.Libc`: the process's own
    libc, ctypes' C half only)."""

    def __init__(self) -> None:
        from nvdocker2.host.load import Libc

        libc = Libc(("unshare", "setns", "mount", "umount2", "prctl", "capset"))
        self._errno = libc.errno
        self._ulong = libc.ulong
        self._call = libc.call

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            err = self._errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def unshare(self, flags: int) -> None:
        self._check(self._call["unshare"](flags), "unshare(CLONE_NEWNS)")

    def setns(self, fd: int, nstype: int, what: str) -> None:
        self._check(self._call["setns"](fd, nstype), what)

    def mount(self, source: bytes | None, target: str, fstype: bytes | None, flags: int,
              data: bytes | None, what: str) -> None:
        self._check(self._call["mount"](source, os.fsencode(target), fstype,
                                        self._ulong(flags), data), what)

    def umount2(self, target: str, flags: int) -> None:
        self._check(self._call["umount2"](os.fsencode(target), flags), f"detaching {target}")

    def prctl(self, option: int, arg: int, what: str, arg3: int = 0) -> int:
        u = self._ulong
        result = self._call["prctl"](option, u(arg), u(arg3), u(0), u(0))
        if result < 0:
            err = self._errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")
        return result

    def capset_only(self, cap: int) -> None:
        """Effective and permitted: `cap` alone; inheritable: nothing.

        The kernel reads a header {u32 version; int pid} and two {u32 effective, permitted,
        inheritable} records (bits 0-31, then 32-63), in the machine's byte order."""
        words = [0] * 6
        words[3 * (cap // 32)] = words[3 * (cap // 32) + 1] = 1 << (cap % 32)
        header = _u32(_CAP_VERSION_3) + _u32(0)  # pid 0: this process
        data = b"".join(_u32(w) for w in words)
        self._check(self._call["capset"](header, data), "capset")


def _u32(value: int) -> bytes:
    return value.to_bytes(4, sys.byteorder)


_LIBC: list[_Libc] = []


def _libc() -> _Libc:
    """The one `_Libc` of this process, bound at its first use."""
    if not _LIBC:
        _LIBC.append(_Libc())
    return _LIBC[0]


def libc_calls() -> _Libc:
    """The libc calls the standard library lacks (unshare, setns, mount, umount2, prctl,
    capset), bound once for this process; raises ImportError, AttributeError or OSError."""
    return _libc()


def bind_libc() -> None:
    """Bind the libc calls now, in the process that will fork the confined child: it calls
    none of them. Bound in the child instead, after the fork, it costs about twice as much
    (every page the binding writes is copied first), some 0.5 ms per container start. A binding
    that fails here is left to the child, which reports it as it reports any confinement
    failure."""
    try:
        _libc()
    except (ImportError, AttributeError, OSError):
        pass


def private_view(rootfs: str, keep: set[tuple[int, int]]) -> None:
    """Enter a mount namespace of our own where below `rootfs` only the image's files and the
    read-only mounts of files whose (st_dev, st_ino) is in `keep` remain, with ldconfig's aux
    cache directory covered read-only; raises OSError if that cannot be had."""
    libc = _libc()
    libc.unshare(CLONE_NEWNS)
    libc.mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making mounts private")
    root = os.path.realpath(rootfs)
    for _ in range(64):  # stacked mounts: detach until none but the kept ones is left
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            below = mounts_below(root, f.read())
        foreign = [p for p, ro in below.items() if not (ro and _identity(p) in keep)]
        if not foreign:
            break
        for point in sorted(foreign, key=len, reverse=True):  # a child before its parent
            try:
                libc.umount2(point, MNT_DETACH)
            except OSError as err:
                if err.errno != errno.EINVAL:  # already gone with a mount above it
                    raise
    else:
        raise OSError(0, f"mounts keep reappearing under {root}")
    cover = _aux_cache_cover(root)
    if cover is not None:
        libc.mount(b"tmpfs", cover, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   b"mode=0555", f"covering {cover}")


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if (st.st_mode & 0o170000) == 0o100000 else None


def _aux_cache_cover(root: str) -> str | None:
    """Where an empty read-only tmpfs stops ldconfig from writing its aux cache: the image's
    /var/cache/ldconfig, else /var/cache (ldconfig would make the directory there), else
    nowhere (ldconfig cannot make it)."""
    try:
        inside = resolve_in_root(root, AUX_CACHE_DIR, follow_final=True, refuse_escape=False)
    except DirectError:
        return None
    for candidate in (inside, os.path.dirname(inside)):
        host = os.path.join(root, candidate.lstrip("/"))
        if candidate != "/" and os.path.isdir(host) and not os.path.islink(host):
            return host
    return None


def drop_privileges() -> None:
    """no_new_privs, and CAP_SYS_CHROOT alone in the bounding, effective and permitted sets
    (inheritable and ambient empty): what this process execs next can chroot and nothing
    else a capability grants."""
    libc = _libc()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, "setting no_new_privs")
    for cap in range(64):
        if cap == CAP_SYS_CHROOT:
            continue
        try:
            libc.prctl(PR_CAPBSET_DROP, cap, f"dropping capability {cap}")
        except OSError as err:
            if err.errno == errno.EINVAL:  # past the kernel's last capability
                break
            raise
    try:
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clearing ambient capabilities")
    except OSError as err:
        if err.errno != errno.EINVAL:  # kernels before 4.3 have no ambient set
            raise
    libc.capset_only(CAP_SYS_CHROOT)
