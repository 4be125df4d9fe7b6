"""The file door's reader of a user's own settings (nvdocker2.host.files.read_own_file): what
it returns at each size around its limit, whose files it reads, and that the opened file is
checked again (a file swapped in after the path was walked is still refused)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from nvdocker2.host import run as run_door
from nvdocker2.host.files import Untrusted, read_own_file

USER = 1000


@pytest.fixture
def home():
    """A root-owned 0755 directory outside /tmp's sticky rules, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="nvd2-own-file-"))
    base.chmod(0o755)
    yield base
    for p in sorted(base.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
    base.rmdir()


def _file(base: Path, size: int, name: str = "config.toml") -> Path:
    f = base / name
    f.write_bytes(bytes(i % 251 for i in range(size)))
    f.chmod(0o644)
    return f


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("size, limit, got", [
    (0, 10, 0), (9, 10, 9), (10, 10, 10), (11, 10, 11), (5000, 10, 11),
    # Several reads: a file one byte over a limit of one read's size is seen as over it.
    (65537, 65536, 65537), (65536, 65536, 65536), (200000, 150000, 150001),
    (150000, 200000, 150000),
])
def test_it_returns_the_whole_file_or_one_byte_more_than_the_limit(home, size, limit, got):
    f = _file(home, size)
    data = read_own_file(str(f), limit)
    assert data == f.read_bytes()[:got] and len(data) == got


def test_no_file_is_none_and_no_descriptor_is_left_open(home):
    f = _file(home, 100)
    before = _fds()
    assert read_own_file(str(home / "absent.toml"), 10) is None
    assert read_own_file(str(f / "below"), 10) is None  # a file where a directory should be
    for _ in range(3):
        assert read_own_file(str(f), 1000) == f.read_bytes()
    assert _fds() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="files of other owners need root")
def test_a_user_reads_roots_file_and_its_own_but_no_one_elses(home):
    f = _file(home, 3)
    assert read_own_file(str(f), 10, euid=USER) == f.read_bytes()  # root's
    os.chown(f, USER, USER)
    assert read_own_file(str(f), 10, euid=USER) == f.read_bytes()  # the user's own
    os.chown(f, USER + 1, USER + 1)
    with pytest.raises(Untrusted, match=f"^{f} belongs to uid {USER + 1}$"):
        read_own_file(str(f), 10, euid=USER)


def test_a_fifo_is_refused_without_blocking(home):
    fifo = home / "config.toml"
    os.mkfifo(fifo, 0o644)
    before = _fds()
    with pytest.raises(Untrusted, match=f"^{fifo} is not a regular file$"):
        read_own_file(str(fifo), 10)
    assert _fds() == before


def test_the_opened_file_is_checked_again_after_the_walk(home, monkeypatch):
    """A file replaced between the walk and the open (here: a walk that saw nothing wrong) is
    still refused by what the open descriptor says."""
    f = _file(home, 3)
    monkeypatch.setattr(run_door, "unsafe_to_run", lambda *a, **k: None)
    os.chown(f, USER + 1, USER + 1)
    with pytest.raises(Untrusted, match=f"^{f} belongs to uid {USER + 1}$"):
        read_own_file(str(f), 10, euid=USER)
    os.chown(f, 0, 0)
    f.chmod(0o664)
    with pytest.raises(Untrusted, match=rf"^{f} is writable by its group or others \(mode 0664\)$"):
        read_own_file(str(f), 10, euid=USER)
    f.unlink()
    os.mkfifo(f, 0o644)
    with pytest.raises(Untrusted, match=f"^{f} is not a regular file$"):
        read_own_file(str(f), 10, euid=USER)
