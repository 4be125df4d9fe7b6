"""Power cut at any instant: which ordering of syscalls the atomic write relies on (reference §2).

A SIGKILL only loses what the process had not done yet; a power cut also loses what the kernel
had not yet put on disk. To reason about that, the writes of a real transaction are run
through a recording layer (os.open/write/fsync/replace/unlink/mkdir wrapped, the real calls
still made) and the recorded operations are replayed into a model of a file system after a
crash, at every prefix of the run:

- file data is durable only up to the last fsync of that file; data written after it may be
  lost or torn (the model treats it as unknown bytes);
- each directory's entries (create, rename, unlink, mkdir) are durable in order, and at least
  up to the last fsync of that directory; any later prefix of them may also have reached the
  disk (journaled file systems keep metadata in order, so no reordering within a directory).

Every possible post-crash state of every prefix must hold daemon.json as the exact old or the
exact new bytes; once the transaction has returned, only the new bytes. The same checker run on
a writer with an fsync removed finds the torn file, which shows what each fsync is for.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nvdocker2.engines import docker as docker_engine
from nvdocker2.store.atomic import TMP_MARK, atomic_write

OLD = b'{\n    "debug": true,\n    "log-driver": "journald"\n}\n'
RUNTIME = "/usr/bin/runc"
UNKNOWN = None  # contents of a file whose last writes were never fsynced


@dataclass(frozen=True)
class Op:
    """One recorded operation: kind, the directory and name it touches, the inode, data."""

    kind: str  # create, write, trunc, fsync, fsync_dir, rename, unlink, mkdir
    dir: str = ""
    name: str = ""
    ino: int = -1
    data: bytes = b""
    offset: int = 0
    dst: str = ""

    def __str__(self) -> str:
        if self.kind == "rename":
            return f"rename {self.dir}/{self.name} -> {self.dst}"
        if self.kind in ("write", "fsync", "trunc"):
            return f"{self.kind} inode {self.ino}"
        return f"{self.kind} {self.dir}/{self.name}".rstrip("/")


class Recorder:
    """Wraps the os functions the writer uses; records what happens under `root`.

    `skip_fsync(path) -> bool` turns chosen fsyncs into no-ops (not made, not recorded), to
    show what the checker finds when a writer forgets one.
    """

    def __init__(self, root: Path, skip_fsync: Callable[[str], bool] | None = None) -> None:
        self.root = str(root)
        self.ops: list[Op] = []
        self.ns: dict[str, dict[str, int]] = {}  # live namespace: dir -> name -> inode
        self.initial: dict[int, bytes] = {}  # inode -> bytes of files present at the start
        self.fds: dict[int, tuple[int, str, int]] = {}  # fd -> (inode or -1 for dir, path, offset)
        self.next_ino = 1
        self.skip = skip_fsync or (lambda p: False)
        for d, dirs, files in os.walk(root):
            self.ns[d] = {}
            for f in files:
                ino = self._new_ino()
                self.ns[d][f] = ino
                with open(os.path.join(d, f), "rb") as fh:
                    self.initial[ino] = fh.read()
            for sub in dirs:
                self.ns[d][sub] = -2  # a directory entry
        self.initial_ns = {d: dict(e) for d, e in self.ns.items()}

    def _new_ino(self) -> int:
        self.next_ino += 1
        return self.next_ino

    def _mine(self, path: object) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(self.root)

    @staticmethod
    def _split(path: object) -> tuple[str, str]:
        p = os.path.abspath(path)  # type: ignore[arg-type]
        return os.path.dirname(p), os.path.basename(p)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = {n: getattr(os, n) for n in ("open", "write", "fsync", "close", "replace", "rename",
                                             "unlink", "mkdir", "ftruncate")}

        def _open(path, flags, mode=0o777, *, dir_fd=None):
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            if dir_fd is None and self._mine(path):
                d, n = self._split(path)
                if flags & os.O_DIRECTORY or os.path.isdir(path):
                    self.fds[fd] = (-1, os.path.abspath(path), 0)
                    return fd
                entries = self.ns.setdefault(d, {})
                if n not in entries:
                    ino = self._new_ino()
                    entries[n] = ino
                    self.ops.append(Op("create", d, n, ino))
                ino = entries[n]
                if flags & os.O_TRUNC:
                    self.ops.append(Op("trunc", d, n, ino))
                self.fds[fd] = (ino, os.path.abspath(path), 0)
            return fd

        def _write(fd, data):
            n = real["write"](fd, data)
            if fd in self.fds and self.fds[fd][0] >= 0:
                ino, path, off = self.fds[fd]
                self.ops.append(Op("write", ino=ino, data=bytes(data[:n]), offset=off))
                self.fds[fd] = (ino, path, off + n)
            return n

        def _fsync(fd):
            if fd in self.fds:
                ino, path, _ = self.fds[fd]
                if self.skip(path):
                    return None
                real["fsync"](fd)
                if ino == -1:
                    self.ops.append(Op("fsync_dir", path))
                else:
                    self.ops.append(Op("fsync", ino=ino))
                return None
            return real["fsync"](fd)

        def _close(fd):
            self.fds.pop(fd, None)
            return real["close"](fd)

        def _move(kind):
            def move(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
                real[kind](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                if self._mine(src):
                    sd, sn = self._split(src)
                    dd, dn = self._split(dst)
                    assert sd == dd, "the atomic write renames within one directory"
                    ino = self.ns[sd].pop(sn)
                    self.ns[dd][dn] = ino
                    self.ops.append(Op("rename", sd, sn, ino, dst=dn))
            return move

        def _unlink(path, *, dir_fd=None):
            real["unlink"](path, dir_fd=dir_fd)
            if dir_fd is None and self._mine(path):
                d, n = self._split(path)
                self.ns[d].pop(n, None)
                self.ops.append(Op("unlink", d, n))

        def _mkdir(path, mode=0o777, *, dir_fd=None):
            real["mkdir"](path, mode, dir_fd=dir_fd)
            if dir_fd is None and self._mine(path):
                d, n = self._split(path)
                self.ns.setdefault(d, {})[n] = -2
                self.ns[os.path.abspath(path)] = {}
                self.ops.append(Op("mkdir", d, n))

        for name, fn in (("open", _open), ("write", _write), ("fsync", _fsync),
                         ("close", _close), ("replace", _move("replace")),
                         ("rename", _move("rename")), ("unlink", _unlink), ("mkdir", _mkdir)):
            monkeypatch.setattr(os, name, fn)


# --- the crash model ---------------------------------------------------------------------------


def _contents(ops: list[Op], initial: dict[int, bytes]) -> dict[int, bytes | None]:
    """What each inode holds after a crash following `ops`: its bytes if every write to it was
    followed by an fsync, else UNKNOWN."""
    live: dict[int, bytearray] = {i: bytearray(b) for i, b in initial.items()}
    dirty: set[int] = set()
    for op in ops:
        if op.kind == "create":
            live[op.ino] = bytearray()
        elif op.kind == "trunc":
            live[op.ino] = bytearray()
            dirty.add(op.ino)
        elif op.kind == "write":
            buf = live.setdefault(op.ino, bytearray())
            buf[op.offset:op.offset + len(op.data)] = op.data
            dirty.add(op.ino)
        elif op.kind == "fsync":
            dirty.discard(op.ino)
    out: dict[int, bytes | None] = {i: bytes(b) for i, b in live.items()}
    for i in dirty:
        out[i] = UNKNOWN
    # A created file whose data was never fsynced may be empty or torn: also UNKNOWN.
    return out


def _dir_states(ops: list[Op], initial_ns: dict[str, dict[str, int]], d: str
                ) -> Iterator[dict[str, int]]:
    """Every state directory `d` may be found in after a crash following `ops`."""
    meta = [op for op in ops if op.dir == d and op.kind in ("create", "rename", "unlink", "mkdir")]
    last_sync = max((i for i, op in enumerate(ops) if op.kind == "fsync_dir" and op.dir == d),
                    default=-1)
    durable = sum(1 for op in ops[:last_sync + 1]
                  if op.dir == d and op.kind in ("create", "rename", "unlink", "mkdir"))
    for k in range(durable, len(meta) + 1):
        entries = dict(initial_ns.get(d, {}))
        for op in meta[:k]:
            if op.kind in ("create",):
                entries[op.name] = op.ino
            elif op.kind == "mkdir":
                entries[op.name] = -2
            elif op.kind == "unlink":
                entries.pop(op.name, None)
            elif op.kind == "rename":
                entries[op.dst] = entries.pop(op.name)
        yield entries


def crash_states(rec: Recorder, prefix: int, d: str, name: str) -> set[bytes | None]:
    """Every content `d/name` may have after a power cut once `prefix` ops were made
    (b"<absent>" when the name does not exist)."""
    ops = rec.ops[:prefix]
    contents = _contents(ops, rec.initial)
    found: set[bytes | None] = set()
    for entries in _dir_states(ops, rec.initial_ns, d):
        ino = entries.get(name)
        found.add(b"<absent>" if ino is None else contents.get(ino, UNKNOWN))
    return found


def surely_present(rec: Recorder, prefix: int, d: str) -> dict[str, bytes | None]:
    """Names in `d` that exist in every post-crash state of `prefix`, with their contents."""
    ops = rec.ops[:prefix]
    contents = _contents(ops, rec.initial)
    states = list(_dir_states(ops, rec.initial_ns, d))
    common = set.intersection(*(set(s) for s in states)) if states else set()
    out = {}
    for n in common:
        inos = {s[n] for s in states}
        out[n] = contents.get(inos.pop(), UNKNOWN) if len(inos) == 1 else UNKNOWN
    return out


def bad_prefixes(rec: Recorder, d: str, name: str, allowed: set[bytes]) -> list[str]:
    """Prefixes after which a power cut could leave `d/name` other than `allowed`."""
    bad = []
    for p in range(len(rec.ops) + 1):
        for c in crash_states(rec, p, d, name):
            if c not in allowed:
                last = str(rec.ops[p - 1]) if p else "(start)"
                bad.append(f"after op {p} ({last}): {'torn/unknown' if c is None else c[:40]!r}")
    return bad


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """etc/daemon.json with OLD, and a state dir with its backups/ and journal/ (as an earlier
    run left them)."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "daemon.json").write_bytes(OLD)
    for d in ("state/backups", "state/journal"):
        (tmp_path / d).mkdir(parents=True)
    return tmp_path


def _install(root: Path) -> docker_engine.Result:
    return docker_engine.install(root / "etc" / "daemon.json", runtime_path=RUNTIME,
                               set_default=True, state=root / "state")


def _record(root: Path, monkeypatch: pytest.MonkeyPatch, fn: Callable[[], object],
            skip_fsync: Callable[[str], bool] | None = None) -> Recorder:
    rec = Recorder(root, skip_fsync)
    with monkeypatch.context() as m:
        rec.install(m)
        fn()
    return rec


# --- the ordering relied on --------------------------------------------------------------------


def test_rename_comes_after_the_temp_fsync_and_the_dir_fsync_after_the_rename(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etc = str(root / "etc")
    new = b'{"debug": false}\n'
    rec = _record(root, monkeypatch, lambda: atomic_write(root / "etc" / "daemon.json", new))
    kinds = [(op.kind, op.dir or "") for op in rec.ops]
    print("\n".join(map(str, rec.ops)))
    assert [k for k, _ in kinds] == ["create", "write", "fsync", "rename", "fsync_dir"]
    create, write, fsync, rename, fsync_dir = rec.ops
    assert create.dir == etc and create.name.startswith(".daemon.json" + TMP_MARK)
    assert write.ino == fsync.ino == rename.ino == create.ino and write.data == new
    assert (rename.name, rename.dst) == (create.name, "daemon.json")
    assert fsync_dir.dir == etc
    assert (root / "etc" / "daemon.json").read_bytes() == new
    assert os.listdir(etc) == ["daemon.json"]


def test_every_power_cut_during_install_leaves_old_or_new_daemon_json(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _record(root, monkeypatch, lambda: _install(root))
    new = (root / "etc" / "daemon.json").read_bytes()
    assert b'"nvidia"' in new and new != OLD
    etc = str(root / "etc")
    assert bad_prefixes(rec, etc, "daemon.json", {OLD, new}) == []
    # Every prefix was tried, and both outcomes occur.
    assert len(rec.ops) >= 15
    assert crash_states(rec, 0, etc, "daemon.json") == {OLD}
    # Once install returned, a power cut can no longer bring the old file back.
    assert crash_states(rec, len(rec.ops), etc, "daemon.json") == {new}


def test_every_power_cut_during_uninstall_leaves_new_or_restored_daemon_json(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(root)
    installed = (root / "etc" / "daemon.json").read_bytes()
    rec = _record(root, monkeypatch, lambda: docker_engine.uninstall(
        root / "etc" / "daemon.json", state=root / "state"))
    assert (root / "etc" / "daemon.json").read_bytes() == OLD
    etc = str(root / "etc")
    assert bad_prefixes(rec, etc, "daemon.json", {OLD, installed}) == []
    assert crash_states(rec, len(rec.ops), etc, "daemon.json") == {OLD}


def test_backup_and_journal_are_on_disk_before_daemon_json_can_change(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record before acting: in every post-crash state in which daemon.json may already be new,
    the backup of the old bytes and the journal entry are certainly there."""
    rec = _record(root, monkeypatch, lambda: _install(root))
    new = (root / "etc" / "daemon.json").read_bytes()
    etc = str(root / "etc")
    backups, journal = str(root / "state/backups"), str(root / "state/journal")
    checked = 0
    for p in range(len(rec.ops) + 1):
        if new not in crash_states(rec, p, etc, "daemon.json"):
            continue
        checked += 1
        saved = surely_present(rec, p, backups)
        assert OLD in saved.values(), f"after op {p} ({rec.ops[p - 1]}): backup not durable"
        assert any(n.endswith(".meta.json") and c for n, c in saved.items())
        recorded = surely_present(rec, p, journal)
        assert len(recorded) == 1 and b'"nvidia"' in next(iter(recorded.values())), p
    assert checked >= 2


def test_first_install_makes_its_new_state_dirs_durable_before_daemon_json_changes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "state" / "backups").rmdir()
    (root / "state" / "journal").rmdir()
    rec = _record(root, monkeypatch, lambda: _install(root))
    new = (root / "etc" / "daemon.json").read_bytes()
    for p in range(len(rec.ops) + 1):
        if new in crash_states(rec, p, str(root / "etc"), "daemon.json"):
            names = surely_present(rec, p, str(root / "state"))
            assert {"backups", "journal"} <= set(names), f"after op {p} ({rec.ops[p - 1]})"


# --- the checker finds what a missing fsync breaks ---------------------------------------------


def test_without_the_temp_fsync_a_power_cut_can_tear_daemon_json(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _record(root, monkeypatch, lambda: _install(root),
                  skip_fsync=lambda p: os.path.basename(p).startswith(".daemon.json"))
    new = (root / "etc" / "daemon.json").read_bytes()
    bad = bad_prefixes(rec, str(root / "etc"), "daemon.json", {OLD, new})
    assert bad and all("torn/unknown" in b for b in bad), bad
    first = bad[0].split(" ", 3)[2]
    assert rec.ops[int(first) - 1].kind == "rename"


def test_without_the_dir_fsync_a_finished_install_can_be_undone_by_a_power_cut(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etc = str(root / "etc")
    rec = _record(root, monkeypatch, lambda: _install(root), skip_fsync=lambda p: p == etc)
    new = (root / "etc" / "daemon.json").read_bytes()
    assert bad_prefixes(rec, etc, "daemon.json", {OLD, new}) == []  # never torn...
    assert crash_states(rec, len(rec.ops), etc, "daemon.json") == {OLD, new}  # ...not durable


# --- readers during a slow rename ---------------------------------------------------------------


def test_a_reader_sees_old_or_new_bytes_while_the_rename_is_delayed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dockerd, doctor or a fleet tool reading daemon.json during an install never sees a
    partial or missing file, even when the rename is slow to come."""
    config = root / "etc" / "daemon.json"
    real_replace = os.replace
    staged = threading.Event()

    def slow_replace(src, dst, **kw):
        staged.set()
        time.sleep(0.3)
        return real_replace(src, dst, **kw)

    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.append(config.read_bytes())
            except FileNotFoundError:
                seen.append(b"<absent>")

    monkeypatch.setattr(os, "replace", slow_replace)
    t = threading.Thread(target=reader)
    t.start()
    try:
        _install(root)
    finally:
        stop.set()
        t.join()
    new = config.read_bytes()
    assert staged.is_set()
    assert set(seen) <= {OLD, new}, {s[:60] for s in set(seen) - {OLD, new}}
    assert OLD in seen and len(seen) > 10


def test_model_sanity_prefix_count() -> None:
    """The replay tries len(ops)+1 prefixes and, per prefix, every directory state."""
    ops = [Op("create", "/d", "t", 5), Op("write", ino=5, data=b"x"), Op("fsync", ino=5),
           Op("rename", "/d", "t", 5, dst="f"), Op("fsync_dir", "/d")]
    states = [list(_dir_states(ops[:p], {"/d": {"f": 1}}, "/d")) for p in range(len(ops) + 1)]
    assert [len(s) for s in states] == [1, 2, 2, 2, 3, 1]
    assert list(itertools.chain.from_iterable(states))[-1] == {"f": 5}
