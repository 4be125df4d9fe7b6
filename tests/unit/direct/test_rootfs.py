"""In-root resolution and in-root symlink creation against hostile image trees."""

from __future__ import annotations

import os

import pytest

from nvdocker2.direct import DirectError
from nvdocker2.direct.rootfs import UnsafePath, link_in_root, links_in_root, resolve_in_root


def resolve(root, path, final=False):
    return resolve_in_root(str(root), path, follow_final=final, refuse_escape=True)


def test_relative_symlinks_inside_the_root_are_followed(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True)
    os.symlink("usr/lib", tmp_path / "lib")
    assert resolve(tmp_path, "/lib/x86_64-linux-gnu/libcuda.so.1") == (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1")


def test_dotdot_inside_a_link_that_stays_inside_is_fine(tmp_path):
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "usr/lib").mkdir()
    os.symlink("../lib64", tmp_path / "usr/lib/x86_64-linux-gnu")
    assert resolve(tmp_path, "/usr/lib/x86_64-linux-gnu/x") == "/usr/lib64/x"


def test_absolute_links_restart_at_the_root_not_the_host(tmp_path):
    os.symlink("/", tmp_path / "up")
    assert resolve(tmp_path, "/up/etc/passwd") == "/etc/passwd"


def test_escape_through_dotdot_is_refused_even_when_hidden_in_a_chain(tmp_path):
    (tmp_path / "a").mkdir()
    os.symlink("..", tmp_path / "a/up")  # stays inside: /a/.. = /
    os.symlink("a/up/../x", tmp_path / "chain")  # /a/up/.. climbs above the root
    with pytest.raises(UnsafePath, match="leads outside the container's root"):
        resolve(tmp_path, "/chain/file")


def test_final_symlink_is_refused_unless_asked(tmp_path):
    os.symlink("target", tmp_path / "link")
    with pytest.raises(UnsafePath, match="/link in the container image is a symlink"):
        resolve(tmp_path, "/link")
    assert resolve(tmp_path, "/link", final=True) == "/target"


def test_a_file_in_the_middle_of_the_path_is_refused(tmp_path):
    (tmp_path / "usr").write_text("")
    with pytest.raises(UnsafePath, match="/usr in the container image is not a directory"):
        resolve(tmp_path, "/usr/lib/x")


def test_link_in_root_creates_replaces_and_keeps(tmp_path):
    (tmp_path / "lib").mkdir()
    assert link_in_root(str(tmp_path), "/lib/libcuda.so.1", "libcuda.so.9") == "created"
    assert os.readlink(tmp_path / "lib/libcuda.so.1") == "libcuda.so.9"
    assert link_in_root(str(tmp_path), "/lib/libcuda.so.1", "libcuda.so.9") == "kept"
    assert link_in_root(str(tmp_path), "/lib/libcuda.so.1", "libcuda.so.10") == "replaced"
    assert os.readlink(tmp_path / "lib/libcuda.so.1") == "libcuda.so.10"
    (tmp_path / "lib/libreal.so.1").write_text("image's own")
    assert link_in_root(str(tmp_path), "/lib/libreal.so.1", "x") == "exists"
    assert (tmp_path / "lib/libreal.so.1").read_text() == "image's own"


def test_links_in_one_directory_are_made_through_one_checked_opening(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/libreal.so.1").write_text("image's own")
    os.symlink("old", tmp_path / "lib/libold.so.1")
    checked = []
    entries = [("libcuda.so.1", "libcuda.so.9"), ("libreal.so.1", "x"), ("libold.so.1", "new")]
    assert links_in_root(str(tmp_path), "/lib", entries,
                         lambda path, resolved, fd: checked.append(path)) == [
        "created", "exists", "replaced"]
    assert checked == ["/lib"]
    assert os.readlink(tmp_path / "lib/libcuda.so.1") == "libcuda.so.9"
    assert os.readlink(tmp_path / "lib/libold.so.1") == "new"
    assert (tmp_path / "lib/libreal.so.1").read_text() == "image's own"
    with pytest.raises(DirectError, match=r"^cannot create /gone/a: /gone does not exist"):
        links_in_root(str(tmp_path), "/gone", [("a", "t"), ("b", "t")])


def test_link_in_root_never_writes_outside(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink("../outside", root / "lib")
    with pytest.raises(UnsafePath):
        link_in_root(str(root), "/lib/libcuda.so.1", "libcuda.so.9")
    os.unlink(root / "lib")
    os.symlink(str(outside), root / "lib")  # absolute: means <root>/<outside path> in-root
    with pytest.raises(DirectError, match=f"{outside} does not exist in the container"):
        link_in_root(str(root), "/lib/libcuda.so.1", "libcuda.so.9")
    assert os.listdir(outside) == []


def _symlinks_on(root, resolved):
    """The components of in-root path `resolved` that are symlinks in the image."""
    found, cur = [], str(root)
    for comp in resolved.strip("/").split("/"):
        cur = os.path.join(cur, comp)
        if os.path.islink(cur):
            found.append(cur)
    return found


def test_a_missing_component_popped_by_dotdot_does_not_hide_a_later_symlink(tmp_path):
    """Security review: `x86_64-linux-gnu -> nonexistent/../evil` and `evil -> /etc` made the
    shim place a mount under /usr/lib/evil, a symlink to /etc, while promising no symlink."""
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    os.symlink("nonexistent/../evil", tmp_path / "usr/lib/x86_64-linux-gnu")
    os.symlink("/etc", tmp_path / "usr/lib/evil")
    got = resolve(tmp_path, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert got == "/etc/libcuda.so.1"
    assert _symlinks_on(tmp_path, got) == []


def test_missing_then_dotdot_then_escaping_link_is_refused(tmp_path):
    (tmp_path / "usr").mkdir()
    os.symlink("nonexistent/../up", tmp_path / "usr/lib")
    os.symlink("../..", tmp_path / "usr/up")  # /usr/up/.. climbs above the root
    with pytest.raises(UnsafePath, match="leads outside the container's root"):
        resolve(tmp_path, "/usr/lib/x")


def test_components_below_a_missing_one_are_kept_as_written(tmp_path):
    (tmp_path / "usr").mkdir()
    assert resolve(tmp_path, "/usr/a/b/../c/d") == "/usr/a/c/d"
    assert _symlinks_on(tmp_path, "/usr/a/c/d") == []
