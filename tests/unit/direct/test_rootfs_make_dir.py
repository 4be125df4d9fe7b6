"""make_dir_in_root, which our nvidia-container-cli uses to make the folders it writes into in
a container's image: each missing component made with its mode, the directory handed back
open, an image symlink or file in the way refused with its one-line message, other errors not
hidden, and no descriptor left open on any path (read from /proc/self/fd)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from nvdocker2.direct.rootfs import UnsafePath, make_dir_in_root


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_missing_components_are_made_with_the_default_mode_and_the_last_is_open(tmp_path):
    (tmp_path / "etc").mkdir(mode=0o700)
    before = open_fds()
    fd = make_dir_in_root(str(tmp_path), "/etc/a/b/c")
    try:
        assert isinstance(fd, int)
        assert os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "etc/a/b/c")
        assert len(open_fds()) == len(before) + 1  # the components on the way are closed
    finally:
        os.close(fd)
    assert open_fds() == before
    assert [mode_of(tmp_path / p) for p in ("etc", "etc/a", "etc/a/b", "etc/a/b/c")] == [
        0o700, 0o755, 0o755, 0o755]


def test_a_given_mode_is_exact_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        fd = make_dir_in_root(str(tmp_path), "/x/y", 0o751)
    finally:
        os.umask(old)
    os.close(fd)
    assert (mode_of(tmp_path / "x"), mode_of(tmp_path / "x/y")) == (0o751, 0o751)


def test_existing_directories_are_opened_and_kept(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True, mode=0o700)
    (tmp_path / "usr/lib/keep").write_text("image's own")
    fd = make_dir_in_root(str(tmp_path), "/usr/lib")
    try:
        assert sorted(os.listdir(fd)) == ["keep"]
    finally:
        os.close(fd)
    assert mode_of(tmp_path / "usr/lib") == 0o700


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_an_image_entry_in_the_way_is_refused_and_nothing_is_made(tmp_path, planted):
    (tmp_path / "outside").mkdir()
    if planted == "symlink":
        os.symlink(str(tmp_path / "outside"), tmp_path / "etc")
    else:
        (tmp_path / "etc").write_text("not a folder")
    before = open_fds()
    with pytest.raises(UnsafePath) as raised:
        make_dir_in_root(str(tmp_path), "/etc/nvidia")
    assert str(raised.value) == "/etc/nvidia in the container image changed under us; refusing"
    assert isinstance(raised.value.__cause__, OSError)
    # O_DIRECTORY with O_NOFOLLOW: Linux says ENOTDIR for a symlink too, some kernels ELOOP.
    assert raised.value.__cause__.errno in (errno.ELOOP, errno.ENOTDIR)
    assert open_fds() == before
    assert os.listdir(tmp_path / "outside") == []


def test_other_errors_are_raised_as_they_are_and_leak_no_descriptor(tmp_path):
    before = open_fds()
    with pytest.raises(OSError) as raised:
        make_dir_in_root(str(tmp_path), "/a/" + "n" * 300)
    assert raised.value.errno == errno.ENAMETOOLONG
    assert not isinstance(raised.value, UnsafePath)
    assert open_fds() == before
    assert os.path.isdir(tmp_path / "a")  # made before the name that is too long


def test_an_error_that_is_no_oserror_leaks_no_descriptor(tmp_path):
    before = open_fds()
    with pytest.raises(ValueError, match="null"):
        make_dir_in_root(str(tmp_path), "/a/b\0c")
    assert open_fds() == before
