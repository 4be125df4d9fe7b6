"""The `*at` writers of nvdocker2.host.files (our cli's folders in an image, the device nodes
of `system create-device-nodes`, /dev/char's links) and the trusted directory open, at their
edges: a name that is not a bare entry is refused before anything is made, the mode is
exactly the one asked for whatever the umask, a stale temporary link does not stop a
replacement, and a refused directory leaves no descriptor open."""

from __future__ import annotations

import os
import stat

import pytest

from nvdocker2.host import files

BAD_NAMES = ["", "a/b", "/abs", ".", ".."]


@pytest.fixture
def where(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


@pytest.fixture
def umask_077():
    old = os.umask(0o077)
    yield
    os.umask(old)


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("call", [
    lambda name, fd: files.make_dir_at(name, 0o755, fd),
    lambda name, fd: files.char_node_at(name, 0o666, 1, 3, fd),
    lambda name, fd: files.replace_symlink_at("/dev/null", name, fd),
    lambda name, fd: files.open_dir_at(name, fd),
    lambda name, fd: files.symlink_at("/dev/null", name, fd),
], ids=["make_dir_at", "char_node_at", "replace_symlink_at", "open_dir_at", "symlink_at"])
def test_a_name_that_is_not_a_bare_entry_is_refused_and_nothing_is_made(where, name, call):
    root, fd = where
    (root / "a").mkdir()
    before = sorted(p.name for p in root.rglob("*"))
    with pytest.raises(ValueError) as e:
        call(name, fd)
    assert str(e.value) == f"not an entry name: {name!r}"
    assert sorted(p.name for p in root.rglob("*")) == before


def test_a_folder_gets_exactly_its_mode_whatever_the_umask(where, umask_077):
    root, fd = where
    files.make_dir_at("d", 0o40755, fd)  # bits above the permissions are not a mode's
    assert stat.S_IMODE((root / "d").stat().st_mode) == 0o755
    files.make_dir_at("s", 0o1777, fd)
    assert stat.S_IMODE((root / "s").stat().st_mode) == 0o1777


def test_a_device_node_gets_exactly_its_mode_whatever_the_umask(where, umask_077):
    root, fd = where
    files.char_node_at("null", 0o666, 1, 3, fd)
    st = (root / "null").lstat()
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3
    assert stat.S_IMODE(st.st_mode) == 0o666
    files.char_node_at("caps", 0o20445, 1, 5, fd)
    assert stat.S_IMODE((root / "caps").lstat().st_mode) == 0o445
    with pytest.raises(FileExistsError):
        files.char_node_at("null", 0o600, 1, 3, fd)
    assert stat.S_IMODE((root / "null").lstat().st_mode) == 0o666


def test_a_stale_temporary_link_does_not_stop_a_replacement(where):
    root, fd = where
    os.symlink("/old", root / "195:0")
    os.symlink("/stale", root / ".195:0.nvdocker2-new")  # left by a run that was killed
    files.replace_symlink_at("/dev/nvidia0", "195:0", fd)
    assert os.readlink(root / "195:0") == "/dev/nvidia0"
    assert not os.path.lexists(root / ".195:0.nvdocker2-new")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_refused_directory_leaves_no_descriptor_open(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    before = _open_fds()
    for _ in range(20):
        with pytest.raises(files.Untrusted):
            files.open_trusted_dir(str(loose))
    assert _open_fds() == before


def test_a_trusted_directory_is_open_on_that_directory(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    good.chmod(0o755)
    fd = files.open_trusted_dir(str(good))
    try:
        assert (os.fstat(fd).st_ino, os.fstat(fd).st_dev) == (good.stat().st_ino,
                                                              good.stat().st_dev)
    finally:
        os.close(fd)
