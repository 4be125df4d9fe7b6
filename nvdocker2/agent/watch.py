"""Noticing that someone else rewrote the engine's config: inotify on the config's directory
(and its conf.d, where containerd ≥ 2 and CRI-O keep drop-ins) through this process's own
libc where the kernel and libc have it (nvdocker2.host.load: no library searched for, no
program run), a timed poll otherwise. Either way the verdict comes from the files' bytes
(`fingerprint`), so a missed or spurious event costs at most one poll interval, never a wrong
decision.
"""

from __future__ import annotations

import errno
import hashlib
import os
import select
import struct
from pathlib import Path
from typing import Optional

from nvdocker2.host.load import Libc

# inotify(7): a file written and closed, moved in or out, created, deleted, its mode changed.
_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
         | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF)
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC


def watched_dirs(config: Path) -> list[Path]:
    """The config's directory and its conf.d (drop-ins), those that exist."""
    return [d for d in (config.parent, config.parent / "conf.d") if d.is_dir()]


def fingerprint(config: Path) -> str:
    """A digest of the config and of every file in the watched directories (name and bytes):
    equal fingerprints mean nothing the engine reads there changed. Temporary files of an
    atomic write (ours or another tool's) are part of it only for their short lifetime."""
    h = hashlib.sha256()
    for d in [config.parent, config.parent / "conf.d"]:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            h.update(b"\0no-dir\0" + str(d).encode())
            continue
        for name in names:
            p = d / name
            try:
                if not p.is_file():
                    continue
                data = p.read_bytes()
            except OSError:
                continue
            h.update(str(p).encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


class Watcher:
    """`wait(timeout, wake_fd)` returns when the watched directories may have changed, when
    `wake_fd` is readable (a signal), or after `timeout` seconds. `how` says which mechanism
    runs: "inotify" or "polling every N s"."""

    def __init__(self, config: Path, poll: float) -> None:
        self.config = config
        self.poll = poll
        self._fd: Optional[int] = None
        self._dirs: list[Path] = []
        self._libc: Optional[Libc] = None
        self.why_polling = ""
        try:
            libc = Libc(("inotify_init1", "inotify_add_watch"))
        except (ImportError, OSError, AttributeError) as e:
            self.why_polling = f"no inotify in libc ({e})"
            return
        fd = libc.call["inotify_init1"](_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            self.why_polling = f"inotify_init1: {os.strerror(libc.errno())}"
            return
        self._libc, self._fd = libc, fd
        self.rearm()

    @property
    def how(self) -> str:
        if self._fd is not None:
            return "inotify on " + ", ".join(str(d) for d in self._dirs)
        return f"polling every {self.poll:g} s ({self.why_polling})"

    def rearm(self) -> None:
        """Watch the directories that exist now (conf.d may appear after an install)."""
        if self._fd is None or self._libc is None:
            return
        want = watched_dirs(self.config)
        if want == self._dirs:
            return
        for d in want:
            if self._libc.call["inotify_add_watch"](self._fd, os.fsencode(str(d)), _MASK) < 0:
                err = self._libc.errno()
                if err not in (errno.ENOENT, errno.ENOTDIR):
                    self.close()
                    self.why_polling = f"inotify_add_watch {d}: {os.strerror(err)}"
                    return
        self._dirs = want

    def wait(self, timeout: float, wake_fd: Optional[int] = None) -> None:
        fds = [f for f in (self._fd, wake_fd) if f is not None]
        limit = max(0.0, min(timeout, self.poll))
        try:
            ready, _, _ = select.select(fds, [], [], limit)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; a handler may raise
            return
        if self._fd is not None and self._fd in ready:
            self._drain()

    def _drain(self) -> None:
        assert self._fd is not None
        while True:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            if not buf:
                return
            off = 0
            while off + 16 <= len(buf):  # struct inotify_event: wd, mask, cookie, len, name
                _, mask, _, n = struct.unpack_from("iIII", buf, off)
                off += 16 + n
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    self._dirs = []  # a watched directory went away: watch again on next pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
