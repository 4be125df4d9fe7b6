"""In-root resolution at its edges: the symlink budget (40 followed, the 41st refused, a loop
refused rather than followed forever), `.` components, `..` at the root without a symlink, the
hints, descriptors not leaked, and a parent that is not a directory when the link is made."""

from __future__ import annotations

import errno
import os

import pytest

from nvdocker2.direct import rootfs
from nvdocker2.direct.rootfs import UnsafePath, link_in_root, open_dir_in_root, resolve_in_root


def resolve(root, path, final=True):
    return resolve_in_root(str(root), path, follow_final=final, refuse_escape=True)


def chain(root, length):
    """/l0 -> l1 -> ... -> l<length-1> -> target/ : `length` symlinks to follow."""
    (root / "target").mkdir()
    for n in range(length):
        os.symlink(f"l{n + 1}" if n + 1 < length else "target", root / f"l{n}")


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


def test_forty_symlinks_are_followed(tmp_path):
    chain(tmp_path, 40)
    assert resolve(tmp_path, "/l0/lib") == "/target/lib"


def test_the_forty_first_symlink_is_refused(tmp_path):
    chain(tmp_path, 41)
    with pytest.raises(UnsafePath) as raised:
        resolve(tmp_path, "/l0/lib")
    assert raised.value.message == "too many levels of symlinks resolving /l0/lib in the image"


def test_a_symlink_loop_is_refused(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("/a", tmp_path / "b")
    with pytest.raises(UnsafePath, match="^too many levels of symlinks"):
        resolve(tmp_path, "/a/x")


def test_dot_components_are_dropped(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True)
    assert resolve(tmp_path, "/./usr/./lib/.") == "/usr/lib"


def test_dotdot_at_the_root_without_a_symlink_is_clamped(tmp_path):
    (tmp_path / "etc").mkdir()
    assert resolve(tmp_path, "/../etc/x") == "/etc/x"


def test_the_refusals_carry_their_hints(tmp_path):
    (tmp_path / "a").mkdir()
    os.symlink("../..", tmp_path / "a/up")
    with pytest.raises(UnsafePath) as raised:
        resolve(tmp_path, "/a/up/x")
    assert raised.value.hint == "fix or remove that symlink in the image"
    os.symlink("/a", tmp_path / "link")
    with pytest.raises(UnsafePath) as raised:
        resolve(tmp_path, "/link", final=False)
    assert raised.value.message == (
        "/link in the container image is a symlink; refusing to mount onto it")
    assert raised.value.hint == (
        "remove the symlink from the image, or do not request this capability")


def test_open_dir_in_root_leaks_no_descriptor(tmp_path):
    (tmp_path / "a/b").mkdir(parents=True)
    os.symlink("/a", tmp_path / "a/link")
    before = open_fds()
    fd = open_dir_in_root(str(tmp_path), "/a/b")
    try:
        assert os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "a/b")
        assert len(open_fds()) == len(before) + 1
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        open_dir_in_root(str(tmp_path), "/a/link/b")
    assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert open_fds() == before


@pytest.mark.parametrize("existing,result", [(None, "created"), ("t", "kept"),
                                             ("other", "replaced")])
def test_link_in_root_leaks_no_descriptor(tmp_path, existing, result):
    (tmp_path / "d").mkdir()
    if existing:
        os.symlink(existing, tmp_path / "d/x")
    before = open_fds()
    assert link_in_root(str(tmp_path), "/d/x", "t") == result
    assert os.readlink(tmp_path / "d/x") == "t"
    assert open_fds() == before


def test_a_parent_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    before = open_fds()
    with pytest.raises(UnsafePath, match=r"^/f in the container image changed under us"):
        link_in_root(str(tmp_path), "/f/x", "t")
    assert open_fds() == before


def test_other_errors_opening_the_parent_are_not_hidden(tmp_path, monkeypatch):
    def failing(root, resolved):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(rootfs, "open_dir_in_root", failing)
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError) as raised:
        link_in_root(str(tmp_path), "/d/x", "t")
    assert raised.value.errno == errno.EIO and not isinstance(raised.value, UnsafePath)
    assert not (tmp_path / "d/x").exists()


@pytest.mark.parametrize("spec", [{}, {"root": None}, {"root": "rootfs"}, {"root": {}},
                                  {"root": {"path": ""}}, {"root": {"path": 7}},
                                  {"root": {"path": ["rootfs"]}}, {"root": {"path": None}}],
                         ids=["no root", "root null", "root a string", "root empty",
                              "path empty", "path a number", "path a list", "path null"])
def test_a_config_without_a_usable_root_path_is_refused(spec):
    with pytest.raises(rootfs.DirectError) as raised:
        rootfs.rootfs_of(spec, "/run/b")
    assert raised.value.message == "/run/b/config.json has no root.path"
    assert not isinstance(raised.value, UnsafePath)


@pytest.mark.parametrize("path,expected", [("rootfs", "/run/b/rootfs"),
                                           ("./a/../rootfs/", "/run/b/rootfs"),
                                           ("/var/lib/c/rootfs", "/var/lib/c/rootfs"),
                                           ("/var/lib/c/./rootfs/", "/var/lib/c/rootfs")])
def test_root_path_is_relative_to_the_bundle_unless_absolute(path, expected):
    assert rootfs.rootfs_of({"root": {"path": path}}, "/run/b") == expected


def test_a_missing_directory_is_named_and_leaks_no_descriptor(tmp_path):
    (tmp_path / "usr").mkdir()
    os.symlink("/usr/lib64", tmp_path / "lib")
    before = open_fds()
    with pytest.raises(FileNotFoundError) as raised:
        rootfs.open_dir_checked(str(tmp_path), "/lib/x86_64")
    assert (raised.value.errno, raised.value.strerror, raised.value.filename) == (
        errno.ENOENT, "does not exist", "/usr/lib64/x86_64")
    assert str(raised.value) == "[Errno 2] does not exist: '/usr/lib64/x86_64'"
    assert open_fds() == before


def test_a_refusing_on_mount_closes_the_descriptor_and_raises(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True)
    seen = []

    def refuse(path, resolved, fd):
        seen.append((path, resolved, os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "usr/lib")))
        raise UnsafePath(f"{resolved} is a mount point of the host")

    before = open_fds()
    with pytest.raises(UnsafePath, match=r"^/usr/lib is a mount point of the host$"):
        rootfs.open_dir_checked(str(tmp_path), "/usr/lib", on_mount=refuse)
    assert seen == [("/usr/lib", "/usr/lib", True)]
    assert open_fds() == before


def test_an_accepting_on_mount_gets_the_open_directory(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True)
    os.symlink("usr/lib", tmp_path / "lib")
    calls = []
    resolved, fd = rootfs.open_dir_checked(str(tmp_path), "/lib",
                                           on_mount=lambda p, r, d: calls.append((p, r)))
    try:
        assert resolved == "/usr/lib" and calls == [("/lib", "/usr/lib")]
        assert os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "usr/lib")
    finally:
        os.close(fd)


def test_other_errors_opening_a_checked_directory_are_not_hidden(tmp_path, monkeypatch):
    def failing(root, resolved):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(rootfs, "open_dir_in_root", failing)
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError) as raised:
        rootfs.open_dir_checked(str(tmp_path), "/d")
    assert raised.value.errno == errno.EACCES and not isinstance(raised.value, UnsafePath)
