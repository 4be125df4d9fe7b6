"""Everything that writes to disk: the one atomic-write helper, the lock, backups, the journal.

The state directory (`$NVDOCKER2_STATE_DIR`, default /var/lib/nvdocker2) holds `lock`,
`backups/` and `journal/`. Every file, daemon.json and our own state alike, is written through
`stage()` + `StagedFile.commit()` (or `atomic_write()`, which does both): temp file in the same
directory, fsync, mode/owner/group of the file it replaces, rename, fsync of the directory. A
crash at any instant leaves the old or the new file; a temp file a killed run left behind is
removed by the next run (`clean_stale_temps`).
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

DEFAULT_STATE_DIR = "/var/lib/nvdocker2"
TMP_MARK = ".nvdocker2-tmp-"
KEEP_BACKUPS = 20
PAUSE_HOOK = "NVDOCKER2_TEST_PAUSE_BEFORE_RENAME"

_BACKUP_RE = re.compile(r"(\d{8}T\d{6}Z-[0-9a-f]{6})\.json$")
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
        return BadInput(f"{what}: a component of the path is not a directory")
    return EnvironmentProblem(f"{what}: {reason}")


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


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StagedFile:
    """A complete, fsynced temp file beside `target`, not yet renamed over it.

    Lets the caller validate the candidate (`dockerd --validate`, the daemon's checks) before it
    is put in place. Use as a context manager: on any exception the temp file is removed.
    """

    def __init__(self, target: Path, path: Path) -> None:
        self.target = target
        self.path = path
        self.done = False

    def commit(self) -> None:
        """Rename over the target and fsync the directory."""
        pause = os.environ.get(PAUSE_HOOK)
        if pause:
            # Test hook (fault-injection tests only): stop between the complete temp file and
            # the rename, so a test can SIGKILL the process at exactly this instant.
            sys.stderr.write(f"nvdocker2: test hook: pausing before rename of {self.path}\n")
            sys.stderr.flush()
            time.sleep(float(pause))
        try:
            os.replace(self.path, self.target)
        except OSError as e:
            self.discard()
            raise os_error(e, str(self.target)) from None
        self.done = True
        try:
            _fsync_dir(self.target.parent)
        except OSError:
            pass

    def discard(self) -> None:
        if not self.done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.done = True

    def __enter__(self) -> "StagedFile":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.discard()


def stage(target: str | os.PathLike, data: bytes, new_mode: int = 0o644) -> StagedFile:
    """Write `data` to a temp file beside `target` (through a symlink), fsync it and give it
    the mode, owner and group of the file it will replace (`new_mode` for a new file)."""
    real = resolve_target(Path(target))
    d = real.parent
    tmp = d / f".{real.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise os_error(e, str(real)) from None
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            try:
                st = os.stat(real)
            except FileNotFoundError:
                os.fchmod(fd, new_mode)
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


def atomic_write(target: str | os.PathLike, data: bytes, new_mode: int = 0o644) -> None:
    """Replace `target` with `data` atomically (see the module docstring)."""
    staged = stage(target, data, new_mode)
    with staged:
        staged.commit()


def atomic_remove(target: str | os.PathLike) -> None:
    """Remove `target` (the symlink's target when it is one) and fsync the directory."""
    real = resolve_target(Path(target))
    try:
        os.unlink(real)
    except FileNotFoundError:
        return
    except OSError as e:
        raise os_error(e, str(real)) from None
    with contextlib.suppress(OSError):
        _fsync_dir(real.parent)


def make_dirs(d: Path, mode: int = 0o700) -> None:
    """`mkdir -p` that makes each new directory durable (fsync of its parent), so a power cut
    cannot keep a file written later while losing the directory that holds it."""
    missing: list[Path] = []
    p = d
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for m in reversed(missing):
        try:
            m.mkdir(mode=mode)
        except FileExistsError:
            if not m.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(m)) from None
            continue
        with contextlib.suppress(OSError):
            _fsync_dir(m.parent)


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


# --- lock -------------------------------------------------------------------------------------


def ensure_state_dir(state: Path) -> Path:
    try:
        make_dirs(state)
    except OSError as e:
        raise os_error(e, f"state directory {state}") from None
    if not state.is_dir():
        raise EnvironmentProblem(
            f"state directory {state} is not a directory", "set NVDOCKER2_STATE_DIR to a directory"
        )
    return state


@contextlib.contextmanager
def locked(state: Path, timeout: float) -> Iterator[Path]:
    """Hold the exclusive nvdocker2 lock of `state` (waiting up to `timeout` s, else exit 3)."""
    from filelock import FileLock, Timeout

    ensure_state_dir(state)
    lock_path = state / "lock"
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


@dataclass(frozen=True)
class Backup:
    """One saved version of a config file. `existed` False: the file did not exist then."""

    id: str
    time: str
    reason: str
    sha256: str | None
    config: str
    existed: bool
    size: int
    file: Path

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
        }


class Backups:
    """`STATE/backups/ID.json` (the bytes) and `ID.meta.json` (what they are); the newest
    KEEP_BACKUPS per config path are kept. The meta file is written last: a backup without it
    is incomplete and ignored."""

    def __init__(self, state: Path) -> None:
        self.dir = state / "backups"

    def create(self, config: Path, data: bytes | None, reason: str) -> Backup:
        now = _dt.datetime.now(_dt.timezone.utc)
        bid = now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"backup directory {self.dir}") from None
        file = self.dir / f"{bid}.json"
        if data is not None:
            atomic_write(file, data, new_mode=0o600)
        meta = {
            "id": bid,
            "time": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "reason": reason,
            "sha256": sha256(data) if data is not None else None,
            "config": str(config),
            "existed": data is not None,
            "size": len(data) if data is not None else 0,
        }
        atomic_write(
            self.dir / f"{bid}.meta.json",
            (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode(),
            0o600,
        )
        return self._from_meta(meta)

    def _from_meta(self, meta: dict) -> Backup:
        return Backup(
            id=meta["id"],
            time=meta["time"],
            reason=meta.get("reason", ""),
            sha256=meta.get("sha256"),
            config=meta["config"],
            existed=bool(meta.get("existed")),
            size=int(meta.get("size", 0)),
            file=self.dir / f"{meta['id']}.json",
        )

    def all(self, config: Path | None = None) -> list[Backup]:
        """Backups (of `config` when given), newest first."""
        out: list[Backup] = []
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
                with open(self.dir / n, "rb") as f:
                    meta = json.loads(f.read())
                b = self._from_meta(meta)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if config is None or b.config == str(config):
                out.append(b)
        out.sort(key=lambda b: (b.time, b.id), reverse=True)
        return out

    def get(self, bid: str) -> Backup:
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
        try:
            with open(b.file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise os_error(e, f"backup {b.file}") from None
        if sha256(data) != b.sha256:
            raise EnvironmentProblem(
                f"backup {b.file} is damaged (sha256 does not match {b.sha256})",
                "choose another backup: nvdocker2 backups",
            )
        return data

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
            for p in (self.dir / f"{b.id}.meta.json", b.file):
                with contextlib.suppress(OSError):
                    os.unlink(p)
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
        self.dir = state / "journal"
        self.path = self.dir / f"{key}.json"
        self.config = config

    def read_bytes(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise os_error(e, f"journal {self.path}") from None

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
        atomic_write(self.path, document.dumps(record, document.Style(indent="  ")).encode(), 0o600)

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
        atomic_write(self.path, data, 0o600)


def slot(value: Any) -> dict:
    """Journal form of a value that may be ABSENT."""
    from nvdocker2.daemonjson.edit import ABSENT

    return {"present": False} if value is ABSENT else {"present": True, "value": value}


def unslot(s: Any) -> Any:
    from nvdocker2.daemonjson.edit import ABSENT

    if isinstance(s, dict) and s.get("present"):
        return s.get("value")
    return ABSENT
