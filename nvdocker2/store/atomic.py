"""The one atomic-write helper: every file nvdocker2 writes goes through `stage()`/`atomic_write()`.

The state directory (`$NVDOCKER2_STATE_DIR`, default /var/lib/nvdocker2) holds `lock`,
`backups/` and `journal/`. Every file, daemon.json and our own state alike, is written through
`stage()` + `StagedFile.commit()` (or `atomic_write()`, which does both): temp file in the same
directory, fsync, mode/owner/group of the file it replaces, rename, fsync of the directory. A
crash at any instant leaves the old or the new file; a temp file a killed run left behind is
removed by the next run (`clean_stale_temps`).

docs/reference.md §8: the state directory is trusted only when it and everything in it belong to the
invoking user, writable by no one else (`check_state_dir`); its files are read and written
without following symlinks, and backup ids read from it are validated. Right before a rename
the target must still be what was read (`AsRead`), else `ChangedMeanwhile`. A file that cannot
be renamed over (a bind mount: EBUSY; EXDEV) is written in place, flushed and fsynced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2.errors import BadInput, EnvironmentProblem, NvDockerError
from nvdocker2.host import files, testing

TMP_MARK = ".nvdocker2-tmp-"
PAUSE_HOOK = "NVDOCKER2_TEST_PAUSE_BEFORE_RENAME"
RUN_HOOK = "NVDOCKER2_TEST_RUN_BEFORE_RENAME"
IN_PLACE_ERRNOS = (errno.EBUSY, errno.EXDEV)
_TMP_RE = re.compile(re.escape(TMP_MARK) + r"(\d+)-[0-9a-f]+$")


def os_error(e: OSError, what: str) -> NvDockerError:
    """Turn an OSError into the exit-3 error a user can act on (`what` names the file)."""
    code = e.errno
    reason = e.strerror or str(e)
    if code in (errno.EACCES, errno.EPERM):
        return EnvironmentProblem(
            f"{what}: permission denied",
            "run as root (sudo nvdocker2 ...); if you are root, check for an immutable file "
            "(lsattr) or a read-only mount",
        )
    if code == errno.EROFS:
        return EnvironmentProblem(
            f"{what}: read-only file system",
            "remount it read-write, or pass --config for a writable daemon.json",
        )
    if code in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentProblem(
            f"{what}: no space left on device", "free some space and run again"
        )
    if code == errno.ENOTDIR:
        return BadInput(
            f"{what}: a component of the path is not a directory", "check the path and run again"
        )
    if code == errno.EBUSY:
        return EnvironmentProblem(
            f"{what}: device or resource busy (a mount point?)",
            "if the file is bind-mounted, change it where it is mounted from, or unmount it",
        )
    return EnvironmentProblem(
        f"{what}: {reason}", "check the file and the file system it is on, then run again"
    )


def resolve_target(path: Path) -> Path:
    """The file a write must replace: a symlink's final target (the link itself stays)."""
    if os.path.islink(path):
        return Path(os.path.realpath(path))
    return path


_fsync_dir = files.fsync_dir


@dataclass(frozen=True)
class Ownership:
    """Mode, owner and group a file had, to give a recreated file back (docs/reference.md §8)."""

    mode: int
    uid: int
    gid: int

    @classmethod
    def of(cls, st: os.stat_result | None) -> "Ownership | None":
        if st is None:
            return None
        return cls(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


@dataclass(frozen=True)
class AsRead:
    """A file as the transaction read it: `raw` None when it did not exist, `stat` the fstat
    of the open file (None: compare the bytes only)."""

    raw: bytes | None
    stat: os.stat_result | None = None


class ChangedMeanwhile(EnvironmentProblem):
    """Another program changed the file between our read and our rename; nothing was written."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"{path} was changed by another program while nvdocker2 was editing it ({why}); "
            "nothing was written",
            "run again when the other program is done; programs that edit daemon.json should "
            "go through nvdocker2 (it holds a lock)",
        )
        self.why = why


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _at(path: Path, dir_fd: int | None) -> Path | str:
    """What names `path` for an `*at` call: itself, or with `dir_fd` its entry in that
    directory."""
    return path if dir_fd is None else path.name


def _open_read(target: Path, dir_fd: int | None) -> Any:
    """`target` open for reading; with `dir_fd`, its entry in that directory, never through
    a symlink (ELOOP) and never blocking on a FIFO."""
    if dir_fd is None:
        return open(target, "rb")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return os.fdopen(os.open(_at(target, dir_fd), flags, dir_fd=dir_fd), "rb")


def check_unchanged(target: Path, as_read: AsRead, dir_fd: int | None = None) -> None:
    """Raise ChangedMeanwhile unless `target` still has the identity and bytes it was read
    with (docs/reference.md §8: compare before replace). With `dir_fd`, `target` is its
    name's entry in that directory, and a symlink there is a change."""
    try:
        with _open_read(target, dir_fd) as f:
            st = os.fstat(f.fileno())
            if as_read.raw is None:
                raise ChangedMeanwhile(target, "it was created")
            if as_read.stat is not None and _identity(st) != _identity(as_read.stat):
                raise ChangedMeanwhile(target, "its size, time or inode changed")
            if f.read(len(as_read.raw) + 1) != as_read.raw:
                raise ChangedMeanwhile(target, "its bytes changed")
    except FileNotFoundError:
        if as_read.raw is not None:
            raise ChangedMeanwhile(target, "it was removed") from None
    except OSError as e:
        if e.errno == errno.ELOOP and dir_fd is not None:
            raise ChangedMeanwhile(target, "it was replaced by a symlink") from None
        raise os_error(e, str(target)) from None


class StagedFile:
    """A complete, fsynced temp file beside `target`, not yet renamed over it.

    Lets the caller validate the candidate (`dockerd --validate`, the daemon's checks) before it
    is put in place. Use as a context manager: on any exception the temp file is removed.
    With `dir_fd` both are entries of the directory open as that descriptor (`stage`).
    """

    def __init__(self, target: Path, path: Path, dir_fd: int | None = None) -> None:
        self.target = target
        self.path = path
        self.dir_fd = dir_fd
        self.done = False
        self.in_place: str | None = None  # why the rename could not be used, when it was not

    def commit(self, as_read: AsRead | None = None) -> None:
        """Rename over the target and fsync the directory.

        With `as_read`, first check that the target is still what was read (else
        ChangedMeanwhile, nothing written). When the target cannot be renamed over (EBUSY: a
        bind mount; EXDEV), its bytes are written in place instead and `in_place` says why.
        """
        pause = testing.hook(PAUSE_HOOK)
        if pause:
            # Test hook (fault-injection tests only): stop between the complete temp file and
            # the rename, so a test can SIGKILL the process at exactly this instant.
            sys.stderr.write(f"nvdocker2: test hook: pausing before rename of {self.path}\n")
            sys.stderr.flush()
            time.sleep(float(pause))
        run = testing.hook(RUN_HOOK) if as_read is not None else None
        if run:
            # Test hook (fault-injection tests only): another program's write at this instant.
            from nvdocker2.host import run as door

            door.run(["/bin/sh", "-c", run], timeout=60)
        at = self.dir_fd
        try:
            if as_read is not None:
                check_unchanged(self.target, as_read, at)
            if at is None:
                os.replace(self.path, self.target)
            else:
                os.replace(self.path.name, self.target.name, src_dir_fd=at, dst_dir_fd=at)
        except OSError as e:
            if e.errno not in IN_PLACE_ERRNOS:
                self.discard()
                raise os_error(e, str(self.target)) from None
            self._write_in_place(e)
            return
        except BaseException:
            self.discard()
            raise
        self.done = True
        try:
            if at is None:
                _fsync_dir(self.target.parent)
            else:
                os.fsync(at)
        except OSError:
            pass

    def _write_in_place(self, why: OSError) -> None:
        """reference §8: the bytes of the temp file written over the target's own inode, flushed
        and fsynced (not atomic: a crash meanwhile can leave a partial file)."""
        try:
            with _open_read(self.path, self.dir_fd) as f:
                data = f.read()
            no_follow = 0 if self.dir_fd is None else os.O_NOFOLLOW
            fd = os.open(_at(self.target, self.dir_fd), os.O_WRONLY | no_follow | os.O_CLOEXEC,
                         dir_fd=self.dir_fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.ftruncate(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise os_error(e, str(self.target)) from None
        finally:
            self.discard()
        self.in_place = why.strerror or errno.errorcode.get(why.errno or 0, "rename refused")

    def discard(self) -> None:
        if not self.done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_at(self.path, self.dir_fd), dir_fd=self.dir_fd)
            self.done = True

    def __enter__(self) -> "StagedFile":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.discard()


def stage(
    target: str | os.PathLike[str],
    data: bytes,
    new_mode: int = 0o644,
    *,
    owner: Ownership | None = None,
    follow: bool = True,
    dir_fd: int | None = None,
) -> StagedFile:
    """Write `data` to a temp file beside `target` (through a symlink unless `follow` is
    false), fsync it and give it the mode, owner and group of the file it will replace; for a
    new file `owner` (a recorded mode, owner and group) or else `new_mode`.

    With `dir_fd` (the open directory of `target`, whose path names it in messages only),
    everything happens by name in that directory and nothing follows a symlink: the temp
    file, the stat of the file replaced, the check before the rename and the rename."""
    follow = follow and dir_fd is None
    real = resolve_target(Path(target)) if follow else Path(target)
    d = real.parent
    tmp = d / f".{real.name}{TMP_MARK}{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = files.create_exclusive(_at(tmp, dir_fd), 0o600, dir_fd=dir_fd)
    except OSError as e:
        raise os_error(e, str(real)) from None
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            try:
                st = os.stat(_at(real, dir_fd), dir_fd=dir_fd, follow_symlinks=follow)
                if not follow and stat.S_ISLNK(st.st_mode):
                    raise FileNotFoundError(real)  # the link itself is replaced
            except FileNotFoundError:
                if owner is None:
                    os.fchmod(fd, new_mode)
                else:
                    if (owner.uid, owner.gid) != (os.geteuid(), os.getegid()):
                        with contextlib.suppress(PermissionError):
                            os.fchown(fd, owner.uid, owner.gid)
                    os.fchmod(fd, owner.mode)
            else:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
                if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fd, st.st_uid, st.st_gid)
                    except PermissionError:
                        pass
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(_at(tmp, dir_fd), dir_fd=dir_fd)
        if isinstance(e, OSError):
            raise os_error(e, str(real)) from None
        raise
    return StagedFile(real, tmp, dir_fd)


def atomic_write(
    target: str | os.PathLike[str],
    data: bytes,
    new_mode: int = 0o644,
    *,
    owner: Ownership | None = None,
    follow: bool = True,
) -> str | None:
    """Replace `target` with `data` atomically (see the module docstring). Returns None, or
    why it had to be written in place (see `StagedFile.commit`)."""
    staged = stage(target, data, new_mode, owner=owner, follow=follow)
    with staged:
        staged.commit()
    return staged.in_place


def atomic_remove(target: str | os.PathLike[str], as_read: AsRead | None = None) -> None:
    """Remove `target` (the symlink's target when it is one) and fsync the directory; with
    `as_read`, only when it is still what was read (else ChangedMeanwhile)."""
    real = resolve_target(Path(target))
    if as_read is not None:
        check_unchanged(real, as_read)
    try:
        os.unlink(real)
    except FileNotFoundError:
        return
    except OSError as e:
        raise os_error(e, str(real)) from None
    with contextlib.suppress(OSError):
        _fsync_dir(real.parent)


def make_dirs(d: Path, mode: int = 0o700) -> None:
    """`mkdir -p` with exactly `mode` for each new directory, made durable (the door:
    nvdocker2.host.files.make_dirs)."""
    files.make_dirs(d, mode)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(target: str | os.PathLike[str]) -> list[Path]:
    """Remove temp files of ours beside `target` whose writer is gone; return what was removed.

    Called with the lock held, so no live writer of this state dir owns them; the pid in the
    name protects a writer that uses another state dir.
    """
    removed: list[Path] = []
    for d, name in {
        (Path(target).parent, Path(target).name),
        (resolve_target(Path(target)).parent, resolve_target(Path(target)).name),
    }:
        removed += remove_dead_temps(d, f".{name}{TMP_MARK}")
    return removed


def remove_dead_temps(d: Path, prefix: str = "") -> list[Path]:
    """Remove the temp files of ours in `d` (names starting with `prefix`) whose writer (the
    pid in the name) is gone; return what was removed."""
    try:
        entries = os.listdir(d)
    except OSError:
        return []
    removed: list[Path] = []
    for e in entries:
        if not e.startswith(prefix):
            continue
        m = _TMP_RE.search(e)
        if not m or _pid_alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(d / e)
            removed.append(d / e)
    return removed
