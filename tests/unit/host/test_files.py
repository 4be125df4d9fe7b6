"""What the file door (nvdocker2/host/files.py) promises, seen in the files it leaves: the
exact modes whatever the umask, no write through a symlink or onto a file someone put there
first, the one-line error for a path in the way, no descriptor left open, and nothing left
behind when a mode cannot be set."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import pytest

from nvdocker2.host import files


def mode_of(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@contextlib.contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_fd_left():
    """The test must leave no descriptor open (a leak per file made ends in EMFILE)."""
    before = open_fds()
    yield
    assert open_fds() == before


def test_directories_are_made_outermost_first_with_exactly_their_mode(tmp_path, no_fd_left):
    for mask in (0o000, 0o077):
        top = tmp_path / f"umask{mask:o}"
        with umask(mask):
            made = files.make_dirs(top / "a" / "b", 0o751)
        assert made == [str(top), str(top / "a"), str(top / "a" / "b")]
        assert [mode_of(Path(d)) for d in made] == [0o751] * 3


def test_a_file_in_the_way_of_a_directory_is_named(tmp_path, no_fd_left):
    (tmp_path / "etc").write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as err:
        files.make_dirs(tmp_path / "etc" / "cdi", 0o755)
    assert str(err.value) == f"[Errno 20] Not a directory: '{tmp_path}/etc'"
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")  # a dangling link is not followed
    with pytest.raises(NotADirectoryError) as err:
        files.make_dirs(tmp_path / "link" / "cdi", 0o755)
    assert str(err.value) == f"[Errno 20] Not a directory: '{tmp_path}/link'"
    assert not (tmp_path / "nowhere").exists()


@contextlib.contextmanager
def made_first_by_another(path: Path, make):
    """Another process makes `path` (with `make`) just before make_dirs's mkdir of it."""
    real = os.mkdir
    raced = []

    def mkdir(p, *args, **kwargs):
        if os.fspath(p) == str(path) and not raced:
            raced.append(p)
            make(path)
        return real(p, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "mkdir", mkdir)
        yield


def test_a_directory_another_process_makes_first_is_left_as_it_is(tmp_path):
    with made_first_by_another(tmp_path / "a", lambda p: p.mkdir(mode=0o700)):
        assert files.make_dirs(tmp_path / "a" / "b", 0o755) == [str(tmp_path / "a" / "b")]
    assert (mode_of(tmp_path / "a"), mode_of(tmp_path / "a" / "b")) == (0o700, 0o755)


def test_a_symlink_another_process_puts_in_the_way_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    with made_first_by_another(tmp_path / "a", lambda p: p.symlink_to(victim)):
        with pytest.raises(NotADirectoryError) as err:
            files.make_dirs(tmp_path / "a" / "b", 0o755)
    assert str(err.value) == f"[Errno 20] Not a directory: '{tmp_path}/a'"
    assert (list(victim.iterdir()), mode_of(victim)) == ([], 0o700)


def test_new_files_get_exactly_their_mode_whatever_the_umask(tmp_path, no_fd_left):
    with umask(0o077):
        files.write_new(tmp_path / "spec.yaml", b"kind: x\n", 0o644)
        files.write_new(tmp_path / "tool", b"#!/bin/sh\n", 0o755)
        files.ensure_file(tmp_path / "marker", 0o644)
        files.append_text(tmp_path / "log", "one\n", 0o644)
    with umask(0o000):
        files.open_lock_file(tmp_path / "lock")
        files.write_new(tmp_path / "private", b"", 0o600)
    assert {p.name: mode_of(p) for p in tmp_path.iterdir()} == {
        "spec.yaml": 0o644, "tool": 0o755, "marker": 0o644, "log": 0o644, "lock": 0o600,
        "private": 0o600}
    assert (tmp_path / "spec.yaml").read_bytes() == b"kind: x\n"
    assert (tmp_path / "marker").read_bytes() == b""


def test_an_existing_file_is_kept_and_a_planted_symlink_refused(tmp_path, no_fd_left):
    target = tmp_path / "victim"
    target.write_bytes(b"root's\n")
    target.chmod(0o600)
    files.ensure_file(target, 0o644)
    files.open_lock_file(target)
    assert (target.read_bytes(), mode_of(target)) == (b"root's\n", 0o600)
    (tmp_path / "planted").symlink_to(target)
    for make in (lambda p: files.ensure_file(p, 0o644), files.open_lock_file):
        with pytest.raises(OSError) as err:
            make(tmp_path / "planted")
        assert (err.value.errno, str(err.value)) == (
            errno.ELOOP, f"[Errno 40] Too many levels of symbolic links: '{tmp_path}/planted'")
    with pytest.raises(FileExistsError):
        files.write_new(tmp_path / "planted", b"theirs\n", 0o644)
    with pytest.raises(OSError) as err:
        files.append_text(tmp_path / "planted", "theirs\n", 0o644)
    assert err.value.errno == errno.ELOOP
    assert (target.read_bytes(), mode_of(target)) == (b"root's\n", 0o600)


def test_a_log_is_appended_to_and_undecodable_names_are_kept_escaped(tmp_path, no_fd_left):
    log = tmp_path / "log"
    files.append_text(log, "one\n", 0o640)
    files.append_text(log, "bad name " + os.fsdecode(b"\xff") + " \u00e9\n", 0o600)
    assert log.read_bytes() == b"one\nbad name \\udcff \xc3\xa9\n"
    assert mode_of(log) == 0o640


def test_a_file_whose_mode_cannot_be_set_is_not_left_behind(tmp_path, monkeypatch, no_fd_left):
    def fchmod(fd, mode):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", fchmod)
    with pytest.raises(PermissionError):
        files.write_new(tmp_path / "new", b"x", 0o644)
    assert list(tmp_path.iterdir()) == []


def test_a_file_built_from_others_is_no_more_open_than_the_strictest(tmp_path, no_fd_left):
    private = tmp_path / "config.toml"
    private.write_bytes(b"[auth]\n")
    private.chmod(0o600)
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o755)
    missing = tmp_path / "missing"
    assert files.derived_mode(0o644, [missing, private]) == 0o600
    assert files.derived_mode(0o755, [missing, tool]) == 0o755
    assert files.derived_mode(0o1755, []) == 0o755
    with umask(0):
        files.copy_new(private, tmp_path / "copy.toml")
        files.copy_new(tool, tmp_path / "tool.copy")
        files.copy_new(tool, tmp_path / "tool.ro", 0o644)
    assert [(mode_of(tmp_path / n), (tmp_path / n).read_bytes()) for n in
            ("copy.toml", "tool.copy", "tool.ro")] == [
        (0o600, b"[auth]\n"), (0o755, b"#!/bin/sh\n"), (0o644, b"#!/bin/sh\n")]


def test_a_link_is_made_only_as_an_entry_of_the_open_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        files.symlink_at("libcuda.so.1", "libcuda.so", fd)
        for name in ("", "sub/evil", "/evil", ".", ".."):
            with pytest.raises(ValueError) as err:
                files.symlink_at("x", name, fd)
            assert str(err.value) == f"not an entry name: {name!r}"
    finally:
        os.close(fd)
    assert os.readlink(tmp_path / "libcuda.so") == "libcuda.so.1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libcuda.so", "sub"]
    assert list((tmp_path / "sub").iterdir()) == []
