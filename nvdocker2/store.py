"""Everything that writes to disk: the one atomic-write helper, the lock, backups, the journal.

The state directory (`$NVDOCKER2_STATE_DIR`, default /var/lib/nvdocker2) holds `lock`,
`backups/` and `journal/`. Every file, daemon.json and our own state alike, is written through
`stage()` + `StagedFile.commit()` (or `atomic_write()`, which does both): temp file in the same
directory, fsync, mode/owner/group of the file it replaces, rename, fsync of the directory. A
crash at any instant leaves the old or the new file; a temp file a killed run left behind is
removed by the next run (`clean_stale_temps`).

SPEC §8: the state directory is trusted only when it and everything in it belong to the
invoking user, writable by no one else (`check_state_dir`); its files are read and written
without following symlinks, and backup ids read from it are validated. Right before a rename
the target must still be what was read (`AsRead`), else `ChangedMeanwhile`. A file that cannot
be renamed over (a bind mount: EBUSY; EXDEV) is written in place, flushed and fsynced.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nvdocker2.errors import BadInput, EnvironmentProblem, NvDockerError
from nvdocker2.host import files, testing

DEFAULT_STATE_DIR = "/var/lib/nvdocker2"
TMP_MARK = ".nvdocker2-tmp-"
KEEP_BACKUPS = 20
PAUSE_HOOK = "NVDOCKER2_TEST_PAUSE_BEFORE_RENAME"
RUN_HOOK = "NVDOCKER2_TEST_RUN_BEFORE_RENAME"

_BACKUP_RE = re.compile(r"(\d{8}T\d{6}Z-[0-9a-f]{6})\.json$")
_ID_RE = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}\Z")
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


def state_dir() -> Path:
    """`$NVDOCKER2_STATE_DIR`, else /var/lib/nvdocker2 (root) or ~/.local/state/nvdocker2."""
    env = os.environ.get("NVDOCKER2_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() != 0:
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return Path(base) / "nvdocker2"
    return Path(DEFAULT_STATE_DIR)


def resolve_target(path: Path) -> Path:
    """The file a write must replace: a symlink's final target (the link itself stays)."""
    if os.path.islink(path):
        return Path(os.path.realpath(path))
    return path


_fsync_dir = files.fsync_dir


@dataclass(frozen=True)
class Ownership:
    """Mode, owner and group a file had, to give a recreated file back (SPEC §8)."""

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


def check_unchanged(target: Path, as_read: AsRead) -> None:
    """Raise ChangedMeanwhile unless `target` still has the identity and bytes it was read
    with (SPEC §8: compare before replace)."""
    try:
        with open(target, "rb") as f:
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
        raise os_error(e, str(target)) from None


class StagedFile:
    """A complete, fsynced temp file beside `target`, not yet renamed over it.

    Lets the caller validate the candidate (`dockerd --validate`, the daemon's checks) before it
    is put in place. Use as a context manager: on any exception the temp file is removed.
    """

    def __init__(self, target: Path, path: Path) -> None:
        self.target = target
        self.path = path
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
        try:
            if as_read is not None:
                check_unchanged(self.target, as_read)
            os.replace(self.path, self.target)
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
            _fsync_dir(self.target.parent)
        except OSError:
            pass

    def _write_in_place(self, why: OSError) -> None:
        """SPEC §8: the bytes of the temp file written over the target's own inode, flushed
        and fsynced (not atomic: a crash meanwhile can leave a partial file)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            fd = os.open(self.target, os.O_WRONLY | os.O_CLOEXEC)
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
                os.unlink(self.path)
            self.done = True

    def __enter__(self) -> "StagedFile":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.discard()


def stage(
    target: str | os.PathLike,
    data: bytes,
    new_mode: int = 0o644,
    *,
    owner: Ownership | None = None,
    follow: bool = True,
) -> StagedFile:
    """Write `data` to a temp file beside `target` (through a symlink unless `follow` is
    false), fsync it and give it the mode, owner and group of the file it will replace; for a
    new file `owner` (a recorded mode, owner and group) or else `new_mode`."""
    real = resolve_target(Path(target)) if follow else Path(target)
    d = real.parent
    tmp = d / f".{real.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = files.create_exclusive(tmp, 0o600)
    except OSError as e:
        raise os_error(e, str(real)) from None
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            try:
                st = os.stat(real) if follow else os.lstat(real)
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
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise os_error(e, str(real)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return StagedFile(real, tmp)


def atomic_write(
    target: str | os.PathLike,
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


def atomic_remove(target: str | os.PathLike, as_read: AsRead | None = None) -> None:
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


def clean_stale_temps(target: str | os.PathLike) -> list[Path]:
    """Remove temp files of ours beside `target` whose writer is gone; return what was removed.

    Called with the lock held, so no live writer of this state dir owns them; the pid in the
    name protects a writer that uses another state dir.
    """
    removed: list[Path] = []
    for d, name in {
        (Path(target).parent, Path(target).name),
        (resolve_target(Path(target)).parent, resolve_target(Path(target)).name),
    }:
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        prefix = f".{name}{TMP_MARK}"
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


def clean_state_temps(state: Path) -> list[Path]:
    """Remove temp files of ours that a killed run left in the state directory (backups/,
    journal/). Everything there is ours; the pid in the name protects a live writer."""
    removed: list[Path] = []
    for d in (state / "backups", state / "journal"):
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            m = _TMP_RE.search(e)
            if not m or _pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(d / e)
                removed.append(d / e)
    return removed


# --- trust in the state directory (SPEC §8) -----------------------------------------------------


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
    not writable by group/others unless sticky (like /tmp)."""
    uid = os.geteuid()
    paths = {Path(os.path.abspath(state)), Path(os.path.realpath(state))}
    for above in {a for p in paths for a in p.parents}:
        try:
            st = os.stat(above)
        except OSError:
            continue
        if st.st_uid not in (0, uid):
            raise _untrusted(state, above, f"(a directory above it) is owned by uid {st.st_uid}",
                             f"use a state directory under directories owned by root or you")
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


# --- lock -------------------------------------------------------------------------------------


def ensure_state_dir(state: Path) -> Path:
    """Create the state directory (0700) and check that it can be trusted (SPEC §8)."""
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


# --- backups ----------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_TAG_RE = re.compile(r" \[([0-9a-f]{8})\]$")


@dataclass(frozen=True)
class Backup:
    """One saved version of a config file. `existed` False: the file did not exist then.
    `ownership`: the file's mode, owner and group then (None in backups of version 0.1)."""

    id: str
    time: str
    reason: str
    sha256: str | None
    config: str
    existed: bool
    size: int
    file: Path
    ownership: Ownership | None = None

    @property
    def tag(self) -> str | None:
        """The tag a transaction that backs up several files puts at the end of each one's
        reason (`install CDI mode [1a2b3c4d]`), or None."""
        m = _TAG_RE.search(self.reason)
        return m.group(1) if m else None

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "time": self.time,
            "reason": self.reason,
            "sha256": self.sha256,
            "config": self.config,
            "existed": self.existed,
            "size": self.size,
            "file": str(self.file) if self.existed else None,
            "mode": f"{self.ownership.mode:04o}" if self.ownership else None,
            "uid": self.ownership.uid if self.ownership else None,
            "gid": self.ownership.gid if self.ownership else None,
        }


class Backups:
    """`STATE/backups/ID.json` (the bytes) and `ID.meta.json` (what they are); the newest
    KEEP_BACKUPS per config path are kept. The meta file is written last: a backup without it
    is incomplete and ignored."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.dir = state / "backups"

    def create(
        self, config: Path, data: bytes | None, reason: str, ownership: Ownership | None = None
    ) -> Backup:
        now = _dt.datetime.now(_dt.timezone.utc)
        bid = now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"backup directory {self.dir}") from None
        file = self.dir / f"{bid}.json"
        if data is not None:
            atomic_write(file, data, new_mode=0o600, follow=False)
        meta = {
            "id": bid,
            "time": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "reason": reason,
            "sha256": sha256(data) if data is not None else None,
            "config": str(config),
            "existed": data is not None,
            "size": len(data) if data is not None else 0,
        }
        if data is not None and ownership is not None:
            meta.update(mode=f"{ownership.mode:04o}", uid=ownership.uid, gid=ownership.gid)
        atomic_write(
            self.dir / f"{bid}.meta.json",
            (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode(),
            0o600,
            follow=False,
        )
        return self._from_meta(meta)

    def _from_meta(self, meta: dict) -> Backup:
        """A Backup from its metadata; ValueError for an id that is not one of ours (a file
        name built from it must stay in this directory) or a malformed field."""
        bid = meta["id"]
        if not isinstance(bid, str) or not _ID_RE.match(bid):
            raise ValueError(f"not a backup id: {bid!r}")
        if not isinstance(meta["config"], str) or not isinstance(meta["time"], str):
            raise ValueError("malformed backup metadata")
        ownership = None
        if isinstance(meta.get("mode"), str) and all(
            isinstance(meta.get(k), int) for k in ("uid", "gid")
        ):
            ownership = Ownership(int(meta["mode"], 8) & 0o7777, meta["uid"], meta["gid"])
        return Backup(
            id=bid,
            time=meta["time"],
            reason=str(meta.get("reason", "")),
            sha256=meta.get("sha256"),
            config=meta["config"],
            existed=bool(meta.get("existed")),
            size=int(meta.get("size", 0)),
            file=self.dir / f"{bid}.json",
            ownership=ownership,
        )

    def all(self, config: Path | None = None) -> list[Backup]:
        """Backups (of `config` when given), newest first."""
        out: list[Backup] = []
        check_state_dir(self.state)
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        except OSError as e:
            raise os_error(e, f"backup directory {self.dir}") from None
        for n in names:
            if not n.endswith(".meta.json"):
                continue
            try:
                meta = json.loads(read_state_file(self.dir / n, "backup") or b"")
                b = self._from_meta(meta)
            except (ValueError, KeyError, TypeError):
                continue
            if n != f"{b.id}.meta.json":
                continue
            if config is None or b.config == str(config):
                out.append(b)
        out.sort(key=lambda b: (b.time, b.id), reverse=True)
        return out

    def group(self, b: Backup, every: list[Backup] | None = None) -> list[Backup]:
        """`b` and the other backups of its transaction (the same tag), oldest first; `every`:
        the backups already listed by `all()`."""
        if b.tag is None:
            return [b]
        return sorted((x for x in (self.all() if every is None else every) if x.tag == b.tag),
                      key=lambda x: (x.time, x.id))

    def get(self, bid: str) -> Backup:
        if not _ID_RE.match(bid):
            raise BadInput(
                f"no backup with id {bid!r}: not a backup id (like 20260101T120000Z-0a1b2c)",
                "list them with: nvdocker2 backups",
            )
        for b in self.all():
            if b.id == bid:
                return b
        raise BadInput(
            f"no backup with id {bid!r} in {self.dir}", "list them with: nvdocker2 backups"
        )

    def read(self, b: Backup) -> bytes | None:
        """The saved bytes (None: the file did not exist); checked against the sha256."""
        if not b.existed:
            return None
        check_state_dir(self.state)
        data = read_state_file(b.file, "backup")
        if data is None:
            raise EnvironmentProblem(
                f"backup {b.file} is missing", "choose another backup: nvdocker2 backups"
            )
        if sha256(data) != b.sha256:
            raise EnvironmentProblem(
                f"backup {b.file} is damaged (sha256 does not match {b.sha256})",
                "choose another backup: nvdocker2 backups",
            )
        return data

    def discard(self, b: Backup) -> None:
        """Remove one backup (metadata first, so no half of it is ever listed)."""
        for p in (self.dir / f"{b.id}.meta.json", b.file):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def prune(self, config: Path, keep: int = KEEP_BACKUPS) -> list[str]:
        """Keep the newest `keep` backups of `config`; also remove the bytes of backups whose
        metadata was never written (a run killed between the two writes). Called with the
        lock held, so no backup is being created meanwhile."""
        removed = []
        with contextlib.suppress(OSError):
            names = set(os.listdir(self.dir))
            for n in names:
                m = _BACKUP_RE.match(n)
                if m and f"{m.group(1)}.meta.json" not in names:
                    with contextlib.suppress(OSError):
                        os.unlink(self.dir / n)
                        removed.append(m.group(1))
        for b in self.all(config)[keep:]:
            with contextlib.suppress(OSError):
                self.discard(b)
            removed.append(b.id)
        return removed


# --- journal ----------------------------------------------------------------------------------


class Journal:
    """What install replaced, per config path, so uninstall can put exactly that back.

    `STATE/journal/<sha256 of the path>.json`:
    {"config": PATH,
     "runtimes_key": {"present": bool},                  # did "runtimes" exist before us
     "runtimes": {NAME: {"previous": SLOT, "installed": ENTRY}},
     "default_runtime": {"previous": SLOT, "installed": NAME} | absent}
    where SLOT is {"present": false} or {"present": true, "value": ...}. Values are written
    with the document writer, so numbers keep their exact text.
    """

    def __init__(self, state: Path, config: Path) -> None:
        key = hashlib.sha256(str(config).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        self.state = state
        self.dir = state / "journal"
        self.path = self.dir / f"{key}.json"
        self.config = config

    def read_bytes(self) -> bytes | None:
        check_state_dir(self.state)
        return read_state_file(self.path, "journal")

    def load(self) -> dict:
        from nvdocker2.daemonjson import document

        data = self.read_bytes()
        if data is None:
            return {}
        try:
            rec = document.parse(data, str(self.path)).data
        except BadInput:
            raise EnvironmentProblem(
                f"journal {self.path} is damaged",
                f"remove it (uninstall then only removes entries pointing at this package's "
                f"runtime): rm {self.path}",
            ) from None
        return rec if rec.get("config") == str(self.config) else {}

    def write(self, record: dict | None) -> None:
        """Replace the record (None or empty: remove the file)."""
        from nvdocker2.daemonjson import document

        if not record or (not record.get("runtimes") and not record.get("default_runtime")):
            self.restore(None)
            return
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"journal directory {self.dir}") from None
        atomic_write(
            self.path,
            document.dumps(record, document.Style(indent="  ")).encode(),
            0o600,
            follow=False,
        )

    def restore(self, data: bytes | None) -> None:
        """Put back bytes from `read_bytes()` (None: no journal)."""
        if data is None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise os_error(e, f"journal {self.path}") from None
            return
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"journal directory {self.dir}") from None
        atomic_write(self.path, data, 0o600, follow=False)


def slot(value: Any) -> dict:
    """Journal form of a value that may be ABSENT."""
    from nvdocker2.daemonjson.edit import ABSENT

    return {"present": False} if value is ABSENT else {"present": True, "value": value}


def unslot(s: Any) -> Any:
    from nvdocker2.daemonjson.edit import ABSENT

    if isinstance(s, dict) and s.get("present"):
        return s.get("value")
    return ABSENT
