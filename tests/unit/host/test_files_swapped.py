"""The file door against a path swapped at the one moment its checks leave open: a trusted
directory replaced after it was opened, a file of a trusted directory replaced between its
stat and its open (by a symlink, a FIFO, a socket, or nothing), a device node replaced just
after mknod made it. Each swap is real (rename, symlink, mkfifo, bind) and made at exactly that
moment by wrapping the step before it, so no test races the clock: the refusal, its one line
and the files left are what is asserted."""

from __future__ import annotations

import errno
import os
import socket
import stat

import pytest

from nvdocker2.host import files
from nvdocker2.host import run as run_door


@pytest.fixture
def no_fd_left():
    """The test must leave no descriptor open (a refused file or directory is closed)."""
    before = set(os.listdir("/proc/self/fd"))
    yield
    assert set(os.listdir("/proc/self/fd")) == before


@pytest.fixture
def where(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    yield d, fd
    os.close(fd)


def after(monkeypatch, owner, name: str, when, swap) -> None:
    """Run `swap()` once, right after `owner.name` returns for the first call that
    `when(args, kwargs)` accepts."""
    real = getattr(owner, name)
    done = []

    def wrapped(*args, **kwargs):
        got = real(*args, **kwargs)
        if not done and when(args, kwargs):
            done.append(True)
            swap()
        return got

    monkeypatch.setattr(owner, name, wrapped)


def test_a_trusted_directory_replaced_after_its_open_is_refused(tmp_path, monkeypatch,
                                                                 no_fd_left):
    """The walk sees the new directory (root's, 0755: trusted), the descriptor holds the old
    one: what the caller would read is not what was checked."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir(mode=0o755)
    (spec_dir / "planted.json").write_bytes(b"{}")

    def swap():
        os.rename(spec_dir, tmp_path / "cdi.old")
        spec_dir.mkdir(mode=0o755)

    after(monkeypatch, os, "open", lambda args, _: args[0] == str(spec_dir), swap)
    with pytest.raises(files.Untrusted) as refused:
        files.open_trusted_dir(str(spec_dir))
    assert str(refused.value) == f"{spec_dir} was replaced while it was checked"
    assert run_door.unsafe_to_run(str(spec_dir), want_dir=True) is None  # the walk's answer
    assert os.listdir(spec_dir) == [] and os.listdir(tmp_path / "cdi.old") == ["planted.json"]


def _regular(where, data: bytes = b'{"cdiVersion": "0.6.0"}'):
    d, fd = where
    (d / "spec.json").write_bytes(data)
    return d / "spec.json", fd


def _swap_after_stat(monkeypatch, fd: int, swap) -> None:
    after(monkeypatch, os, "stat",
          lambda args, kwargs: args == ("spec.json",) and kwargs.get("dir_fd") == fd, swap)


@pytest.mark.parametrize("replace", [
    lambda p, d: (p.unlink(), p.symlink_to(d / "other.json")),
    lambda p, d: p.unlink(),
    lambda p, d: (p.unlink(), os.mkfifo(p, 0o644)),
], ids=["symlink", "gone", "fifo"])
def test_a_file_replaced_between_its_stat_and_its_open_is_refused(where, monkeypatch, replace,
                                                                   no_fd_left):
    path, fd = _regular(where)
    (where[0] / "other.json").write_bytes(b"planted")
    _swap_after_stat(monkeypatch, fd, lambda: replace(path, where[0]))
    with pytest.raises(files.Untrusted) as refused:
        files.read_entry(fd, "spec.json", "/etc/cdi/spec.json")
    assert str(refused.value) == "/etc/cdi/spec.json was replaced while it was read"


def test_a_socket_swapped_in_is_its_own_error_not_a_replacement(where, monkeypatch,
                                                                 no_fd_left):
    """open(2) of a socket is ENXIO: not a swap the door names, so it is passed on as it is."""
    path, fd = _regular(where)
    listener = socket.socket(socket.AF_UNIX)

    def swap():
        path.unlink()
        listener.bind(str(path))

    _swap_after_stat(monkeypatch, fd, swap)
    try:
        with pytest.raises(OSError) as failed:
            files.read_entry(fd, "spec.json", "/etc/cdi/spec.json")
    finally:
        listener.close()
    assert not isinstance(failed.value, files.Untrusted)
    assert failed.value.errno == errno.ENXIO


def test_a_file_left_alone_is_read_whole(where, no_fd_left):
    data = bytes(range(256)) * 300
    path, fd = _regular(where, data)
    got, st = files.read_entry(fd, "spec.json", "/etc/cdi/spec.json")
    assert got == data and (st.st_ino, st.st_size) == (path.stat().st_ino, len(data))


@pytest.mark.parametrize("planted", ["symlink to a device", "file"])
def test_a_node_replaced_right_after_mknod_is_not_chmodded_through(where, monkeypatch,
                                                                    planted, no_fd_left):
    """What is at the name after mknod is not what mknod made: its mode, and the mode of what
    a symlink there points at, stay as they were."""
    d, fd = where
    target = d.parent / "target"
    if planted == "file":
        target.write_bytes(b"root's file\n")
    else:
        os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    target.chmod(0o600)

    def swap():
        os.unlink(d / "nvidia0")
        if planted == "file":
            os.link(target, d / "nvidia0")
        else:
            os.symlink(target, d / "nvidia0")

    after(monkeypatch, os, "mknod",
          lambda args, kwargs: args[0] == "nvidia0" and kwargs.get("dir_fd") == fd, swap)
    old = os.umask(0o077)
    try:
        files.char_node_at("nvidia0", 0o666, 195, 0, fd)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.path.islink(d / "nvidia0") == (planted != "file")
