"""The one door through which nvdocker2 creates files and directories.

What every path made here can rely on, whoever calls and whatever the umask:

- Its mode is the one given, set explicitly after creation (`fchmod`/`chmod`), never what
  the process umask leaves of it: umask 000 gives no world-writable directory, umask 077 no
  unreadable /etc/cdi.
- A directory is made one level at a time (no `mkdir -p` with an implicit mode), each new one
  made durable (fsync of its parent), and a component that exists but is not a directory is
  an error, never followed.
- A new file is created exclusively (`O_EXCL`, `O_NOFOLLOW`): never through a symlink or onto
  a file someone else put there first.
- A file built from other files gets no more permission than the strictest of them
  (`derived_mode`): a copy of a 0600 config.toml is 0600.

Replacing an existing file is the atomic write's (nvdocker2.store), which creates its temp
file through `create_exclusive` here. Stdlib only; the runtime's `create` imports this module
at every container start, so `errno` is imported on the error paths alone.
"""

from __future__ import annotations

import os
import stat
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Union

    PathLike = Union[str, "os.PathLike[str]"]


def fsync_dir(d: PathLike) -> None:
    """Make the entries of directory `d` durable."""
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(d: PathLike, mode: int) -> list[str]:
    """Create `d` and any missing parents, each with exactly `mode`; return those made,
    outermost first. Each new directory is made durable, so a power cut cannot keep a file
    written later while losing the directory that holds it."""
    missing: list[str] = []
    p = os.path.abspath(os.fspath(d))
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    made: list[str] = []
    for m in reversed(missing):
        try:
            os.mkdir(m, mode)
        except FileExistsError:
            if not os.path.isdir(m) or os.path.islink(m):
                import errno  # error paths only (see the module docstring)

                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", m) from None
            continue
        os.chmod(m, mode)  # the umask took bits off what mkdir was given
        made.append(m)
        try:
            fsync_dir(os.path.dirname(m))
        except OSError:
            pass
    return made


def create_exclusive(path: PathLike, mode: int, dir_fd: int | None = None) -> int:
    """Create the new file `path` (never an existing one, never through a symlink) with
    exactly `mode`; return its descriptor, open for writing. With `dir_fd`, `path` is an
    entry of the directory open as that descriptor."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode & 0o7777, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode & 0o7777)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    return fd


def write_new(path: PathLike, data: bytes, mode: int) -> None:
    """Create the new file `path` holding `data`, with exactly `mode`, flushed to disk."""
    fd = create_exclusive(path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def open_lock_file(path: PathLike, mode: int = 0o600) -> None:
    """Make sure the lock file `path` exists (created with exactly `mode`; an existing one,
    never a symlink, is kept as it is)."""
    ensure_file(path, mode)


def ensure_file(path: PathLike, mode: int) -> None:
    """Make sure the file `path` exists: created empty with exactly `mode`, or an existing
    one (never a symlink: ELOOP) kept as it is."""
    try:
        os.close(create_exclusive(path, mode))
    except FileExistsError:
        if os.path.islink(path):
            import errno  # error paths only (see the module docstring)

            raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path)) from None


def derived_mode(default: int, sources: Iterable[PathLike]) -> int:
    """The mode of a new file built from `sources`: `default`, less every permission bit
    that any existing source lacks (what one of them keeps private, the new file keeps
    private too)."""
    mode = default & 0o777
    for src in sources:
        try:
            st = os.stat(src)
        except FileNotFoundError:
            continue
        mode &= stat.S_IMODE(st.st_mode)
    return mode


def copy_new(src: PathLike, dst: PathLike, mode: int | None = None) -> None:
    """Copy the bytes of `src` into the new file `dst`, with `mode` or else `src`'s own
    permission bits (never more open than the file it copies)."""
    with open(src, "rb") as f:
        data = f.read()
    keep = stat.S_IMODE(os.stat(src).st_mode) & 0o777
    write_new(dst, data, keep if mode is None else mode & keep)


def append_text(path: PathLike, text: str, mode: int) -> None:
    """Append `text` to the file `path` (a log), creating it with exactly `mode` when it does
    not exist; never through a symlink."""
    data = text.encode("utf-8", "backslashreplace")
    try:
        fd = create_exclusive(path, mode)
    except FileExistsError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def symlink_at(target: str, name: str, dir_fd: int) -> None:
    """Create the symlink `name` -> `target` in the directory open as `dir_fd`. The caller
    opened that directory itself (a container's rootfs: nvdocker2.direct.rootfs resolves and
    checks it without following the image's symlinks), so `name` is a bare entry in it."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not an entry name: {name!r}")
    os.symlink(target, name, dir_fd=dir_fd)


def make_dir_at(name: str, mode: int, dir_fd: int) -> None:
    """Create the directory `name` with exactly `mode` in the directory open as `dir_fd` (a
    container's rootfs, opened by the caller without following the image's symlinks)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not an entry name: {name!r}")
    os.mkdir(name, mode & 0o7777, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode & 0o7777)  # the umask took bits off what mkdir was given
    finally:
        os.close(fd)


def _entry(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not an entry name: {name!r}")


def char_node_at(name: str, mode: int, major: int, minor: int, dir_fd: int) -> None:
    """Create the character device `name` (major:minor) with exactly `mode` in the directory
    open as `dir_fd` (a /dev the caller opened without following symlinks); an existing
    entry is FileExistsError, never replaced."""
    _entry(name)
    os.mknod(name, stat.S_IFCHR | (mode & 0o7777), os.makedev(major, minor), dir_fd=dir_fd)
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISCHR(st.st_mode):  # what mknod made, not something put there since
        os.chmod(name, mode & 0o7777, dir_fd=dir_fd)  # the umask took bits off mknod's mode


def replace_symlink_at(target: str, name: str, dir_fd: int) -> None:
    """Make `name` in the directory open as `dir_fd` the symlink -> `target`, atomically: a
    new symlink beside it is renamed over the old entry (a symlink, never followed)."""
    _entry(name)
    temp = f".{name}.nvdocker2-new"
    try:
        os.unlink(temp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    os.symlink(target, temp, dir_fd=dir_fd)
    os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def open_dir_at(name: str, dir_fd: int) -> int:
    """A descriptor of the directory `name` in the directory open as `dir_fd`, never through
    a symlink (OSError ELOOP or ENOTDIR where `name` is one)."""
    _entry(name)
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=dir_fd)


class Untrusted(OSError):
    """A file that another user could have written; the message says who and how."""


def read_own_file(path: str, limit: int, euid: int | None = None) -> bytes | None:
    """The bytes of `path` (at most `limit` + 1 of them), a user's own settings, or None when
    there is no such file.

    Read only when no other user could have written it: the file (symlinks followed) belongs
    to this user or root and is writable by neither its group nor others, and no directory on
    the way lets another user replace it (nvdocker2.host.run.unsafe_to_run). Untrusted says
    why not. In a user namespace without the host's root, "this user" is the namespace's root
    (the host user it maps): the overflow owner may be anyone and is never trusted here."""
    from nvdocker2.host.run import unsafe_to_run

    euid = os.geteuid() if euid is None else euid
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    owners = (0, euid)
    why = unsafe_to_run(path, euid, owners=owners)
    if why is not None:
        raise Untrusted(why)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{path} is not a regular file")
        if st.st_uid not in owners:
            raise Untrusted(f"{path} belongs to uid {st.st_uid}")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Untrusted(f"{path} is writable by its group or others "
                            f"(mode {stat.S_IMODE(st.st_mode):04o})")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_trusted_dir(path: str) -> int:
    """A descriptor of the directory `path`, open for the `*at` calls, when no other user
    could have written it or swapped it: it and every directory on the way to it, symlinks
    followed, belong to root (or this user) and are writable by no one else, as a program
    must be to be run (nvdocker2.host.run.unsafe_to_run). Untrusted says why not. The check
    is made after the open, on the directory the descriptor holds."""
    from nvdocker2.host.run import unsafe_to_run

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        why = unsafe_to_run(path, want_dir=True)
        if why is None:
            here, there = os.fstat(fd), os.stat(path)
            if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
                why = f"{path} was replaced while it was checked"
        if why is not None:
            raise Untrusted(why)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_entry(dir_fd: int, name: str, what: str) -> tuple[bytes, os.stat_result] | None:
    """The bytes and fstat of the regular file `name` in the directory open as `dir_fd`,
    never through a symlink (None: no such entry). Untrusted, naming the file as `what`,
    for a symlink or anything but a regular file, which is never opened (a FIFO, a device)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    try:
        if stat.S_ISLNK(st.st_mode):
            raise Untrusted(f"{what} is a symlink")
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{what} is not a regular file")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError as e:  # a symlink or a FIFO put there since the stat
        import errno  # error paths only (see the module docstring)

        if isinstance(e, Untrusted) or e.errno not in (errno.ELOOP, errno.ENOENT):
            raise
        raise Untrusted(f"{what} was replaced while it was read") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{what} was replaced while it was read")
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks), st
            chunks.append(chunk)
    finally:
        os.close(fd)
