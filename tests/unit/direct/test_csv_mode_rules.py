"""CSV mode's decisions one function at a time (nvdocker2.direct.csv_mode): which CSV files
and lines count, which paths under the driver root become nodes, files, links and folder
mounts, and the refusals. Real files, symlinks and device nodes under tmp_path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fixtures.fake_driver import make_bundle

from nvdocker2.direct import DirectError
from nvdocker2.direct.csv_mode import (
    csv_edit_for_create,
    csv_files,
    csv_plan,
    mount_folders,
    read_specs,
    wanted,
)
from nvdocker2.direct.rootfs import UnsafePath
from nvdocker2.toolkit_config import parse


def tree(root: Path, files=(), links=(), nodes=(), dirs=()) -> str:
    for rel in dirs:
        (root / rel.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for rel in files:
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    for rel, target in links:
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, p)
    for minor, rel in enumerate(nodes):
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(250, minor))
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def planned(specs, root: str) -> tuple[list, list, list, list]:
    plan, folders = csv_plan(specs, root)
    return ([n.path for n in plan.nodes], [(f.path, f.host_path) for f in plan.files],
            list(plan.links), folders)


# --- the files and lines -----------------------------------------------------------------

def test_which_csv_files_are_read(tmp_path):
    d = tmp_path / "spec"
    for name in ("l4t.csv", "devices.csv", "x.CSV", ".csv", "notes.txt", "drivers.csv.bak"):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text("")
    (d / "dir.csv").mkdir()
    assert csv_files(str(d)) == [f"{d}/devices.csv", f"{d}/l4t.csv"]
    assert csv_files(str(d), all_files=True) == [
        f"{d}/devices.csv", f"{d}/l4t.csv", f"{d}/x.CSV"]
    assert csv_files(str(tmp_path / "none")) == []


def test_a_mount_spec_path_that_cannot_be_read_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(DirectError) as e:
        csv_files(str(tmp_path / "file"))
    assert (e.value.message, e.value.hint) == (
        f"cannot read {tmp_path}/file: Not a directory",
        "fix [nvidia-container-runtime.modes.csv] mount-spec-path")


def test_lines_are_read_in_order_once_absolute_only_bad_bytes_replaced(tmp_path):
    a = tmp_path / "a.csv"
    a.write_bytes(b"lib, /x\n\xff\xfe, /y\nlib, rel/z\nsym, /s\nlib, /x\ndir, /d\xff\n")
    b = tmp_path / "b.csv"
    b.write_text("sym, /s\ndev, /dev/n\n")
    assert read_specs([str(a), str(b)]) == [
        ("lib", "/x"), ("sym", "/s"), ("dir", "/d\ufffd"), ("dev", "/dev/n")]


def test_a_csv_file_that_cannot_be_read_is_refused(tmp_path):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(DirectError) as e:
        read_specs([str(tmp_path / "d.csv")])
    assert e.value.message == f"cannot read {tmp_path}/d.csv: Is a directory"


# --- what the lines bring ----------------------------------------------------------------

def test_nodes_files_links_and_folders_under_the_driver_root(tmp_path):
    root = tree(tmp_path / "r", files=["/lib/a.so.1", "/lib/b.so", "/opt/t/in.so",
                                       "/opt/t-extra.so", "/etc/nv_tegra_release"],
                links=[("/lib/a.so", "a.so.1"), ("/lib/top.so", "/lib/a.so"),
                       ("/lib/gone.so", "missing.so"), ("/lib/dir.so", "/opt"),
                       ("/opt/t/link.so", "in.so"), ("/opt/tl", "t")],
                nodes=["/dev/c1", "/dev/c2", "/dev/z"], dirs=["/opt/t", "/dev/notnode"])
    (tmp_path / "r/dev/file").write_text("")
    specs = [("dev", "/dev/c*"), ("dev", "/dev/z"), ("dev", "/dev/file"), ("dev", "/dev/none"),
             ("dev", "/dev/c1"), ("dev", "/dev/notnode"),
             ("lib", "/lib/b.so"), ("lib", "/lib/a.so"), ("lib", "/lib/none.so"),
             ("lib", "/opt/t/in.so"), ("lib", "/opt/t-extra.so"), ("lib", "/lib/b.so"),
             ("sym", "/lib/top.so"), ("sym", "/lib/gone.so"), ("sym", "/lib/b.so"),
             ("sym", "/lib/dir.so"), ("sym", "/opt/t/link.so"),
             ("dir", "/opt/tl"), ("dir", "/opt/t"), ("dir", "/lib/b.so"), ("dir", "/none")]
    nodes, files, links, folders = planned(specs, root)
    assert nodes == ["/dev/c1", "/dev/c2", "/dev/z"]
    assert files == [(p, f"{root}{p}") for p in (
        "/lib/b.so", "/lib/a.so.1", "/opt/t-extra.so", "/etc/nv_tegra_release")]
    assert links == [("/lib/top.so", "/lib/a.so"), ("/lib/a.so", "/lib/a.so.1")]
    assert folders == ["/opt/t"]
    plan, _ = csv_plan(specs, root)
    assert [(f.kind, f.capability) for f in plan.files] == [("lib", "csv")] * 3 + [
        ("file", "csv")]


def test_a_chain_of_39_links_is_followed_and_one_of_40_refused(tmp_path):
    root = tmp_path / "r"
    links = [(f"/l/{n}", f"{n + 1}") for n in range(39)]
    tree(root, files=["/l/39"], links=links)
    assert planned([("sym", "/l/0")], str(root))[2] == [(f"/l/{n}", f"/l/{n + 1}")
                                                       for n in range(39)]
    os.rename(root / "l/39", root / "l/40")
    os.symlink("40", root / "l/39")
    with pytest.raises(DirectError) as e:
        csv_plan([("sym", "/l/0")], str(root))
    assert e.value.message == f"too many levels of symlinks at {root}/l/0"


def test_a_link_target_is_read_from_the_links_resolved_folder(tmp_path):
    root = tree(tmp_path / "r", files=["/real/lib.so.1"],
                links=[("/alias", "real"), ("/real/lib.so", "lib.so.1")])
    assert planned([("sym", "/alias/lib.so")], root)[1:3] == (
        [("/real/lib.so.1", f"{root}/real/lib.so.1")], [("/alias/lib.so", "/real/lib.so.1")])


def test_globs_under_the_host_root(tmp_path):
    assert planned([("dev", "/dev/nul?")], "/")[0] == ["/dev/null"]
    assert planned([("dev", "/dev/nul?")], "/")[1] == [(
        "/etc/nv_tegra_release", "/etc/nv_tegra_release")] * os.path.isfile(
        "/etc/nv_tegra_release")


def test_a_folder_of_the_whole_root_takes_every_file_and_link(tmp_path):
    root = tree(tmp_path / "r", files=["/lib/b.so"], links=[("/lib/a.so", "b.so")])
    specs = [("dir", "/"), ("lib", "/lib/b.so"), ("sym", "/lib/a.so")]
    assert planned(specs, root) == ([], [], [], ["/"])


# --- the folder mounts -------------------------------------------------------------------

def test_folders_mount_read_only_where_the_image_resolves_them(tmp_path):
    bundle, rootfs, spec = make_bundle(tmp_path)
    os.symlink("/usr/lib", rootfs / "usr/lib64")
    spec["mounts"].append({"destination": "/usr/share/mine", "source": "/x"})
    mount_folders(spec, str(rootfs), ["/usr/lib64/t", "/usr/share/mine", "/usr/lib/t", "/o"],
                  "/drv")
    assert spec["mounts"][1:] == [
        {"destination": "/usr/share/mine", "source": "/x"},
        {"destination": "/usr/lib/t", "type": "bind", "source": "/drv/usr/lib64/t",
         "options": ["nosuid", "nodev", "rbind", "rprivate", "ro"]},
        {"destination": "/o", "type": "bind", "source": "/drv/o",
         "options": ["nosuid", "nodev", "rbind", "rprivate", "ro"]},
    ]
    fresh = {}
    mount_folders(fresh, str(rootfs), ["/o"], "/")
    assert fresh == {"mounts": [{"destination": "/o", "type": "bind", "source": "/o",
                                 "options": ["nosuid", "nodev", "rbind", "rprivate", "ro"]}]}


@pytest.mark.parametrize("link, target, folder, said", [
    # a symlink where the folder goes, even one that stays inside the image
    ("usr/lib/t", "/opt", "/usr/lib/t",
     "/usr/lib/t in the container image is a symlink; refusing to mount onto it"),
    # a symlink on the way that climbs out of the image
    ("usr/alias", "/../../../opt", "/usr/alias/t",
     "/usr/alias in the container image is a symlink to '/../../../opt', which leads outside"
     " the container's root; refusing it"),
])
def test_an_image_symlink_cannot_steer_a_folder_mount(tmp_path, link, target, folder, said):
    _bundle, rootfs, spec = make_bundle(tmp_path)
    (rootfs / "opt").mkdir()
    os.symlink(target, rootfs / link)
    with pytest.raises(UnsafePath) as e:
        mount_folders(spec, str(rootfs), [folder], "/drv")
    assert e.value.message == said and len(spec["mounts"]) == 1


def test_a_file_in_the_image_where_a_folder_goes_is_refused(tmp_path):
    _bundle, rootfs, spec = make_bundle(tmp_path)
    (rootfs / "usr/lib/t").write_text("")
    with pytest.raises(UnsafePath) as e:
        mount_folders(spec, str(rootfs), ["/usr/lib/t"], "/drv")
    assert (e.value.message, e.value.hint) == (
        "/usr/lib/t in the container image is not a directory; cannot mount the CSV directory"
        " there", "remove it from the image")


# --- the request -------------------------------------------------------------------------

@pytest.mark.parametrize("devices, want", [
    ("all", True), (("0",), True), (("all",), True), ("none", False), ((), False)])
def test_the_board_is_all_or_0(devices, want):
    assert wanted(devices) is want


@pytest.mark.parametrize("devices", [("0", "1"), ("GPU-4a2b",), "1"])
def test_another_gpu_is_refused(devices):
    with pytest.raises(DirectError) as e:
        wanted(devices)
    bad = [d for d in ([devices] if isinstance(devices, str) else devices) if d != "0"][0]
    assert (e.value.message, e.value.hint) == (
        f"NVIDIA_VISIBLE_DEVICES: csv mode serves the board's one GPU, {bad!r} is not it",
        "ask for NVIDIA_VISIBLE_DEVICES=all (or 0)")


def config_for(tmp_path: Path, root: str, spec_dir: Path) -> object:
    return parse(f'[nvidia-container-cli]\nroot = "{root}"\n[nvidia-container-runtime]\n'
                 f'mode = "csv"\n[nvidia-container-runtime.modes.csv]\n'
                 f'mount-spec-path = "{spec_dir}"\n'.encode(), path=str(tmp_path / "c.toml"))


def test_create_reads_every_csv_file_with_csv_mounts_all_spaced(tmp_path):
    root = tree(tmp_path / "r", files=["/lib/x.so"], dirs=["/folder"])
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    (spec_dir / "extra.csv").write_text("lib, /lib/x.so\ndir, /folder\n")
    cfg = config_for(tmp_path, root, spec_dir)
    bundle, _rootfs, spec = make_bundle(tmp_path, env=[
        "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_JETPACK= csv-mounts=all "])
    new = csv_edit_for_create(spec, str(bundle), cfg, "/usr/bin/nvidia-container-runtime")
    assert [m["destination"] for m in new["mounts"]] == ["/proc", "/usr/lib/x.so", "/folder"]
    assert len(spec["mounts"]) == 1
    bundle, _rootfs, spec = make_bundle(tmp_path / "b", env=["NVIDIA_VISIBLE_DEVICES=0"])
    new = csv_edit_for_create(spec, str(bundle), cfg, "/usr/bin/nvidia-container-runtime")
    assert [m["destination"] for m in new["mounts"]] == ["/proc"]


def test_create_refuses_a_bad_request_as_a_direct_error(tmp_path):
    cfg = config_for(tmp_path, tree(tmp_path / "r"), tmp_path / "spec")
    bundle, _rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=-1"])
    with pytest.raises(DirectError) as e:
        csv_edit_for_create(spec, str(bundle), cfg, "/usr/bin/nvidia-container-runtime")
    assert e.value.message.startswith("NVIDIA_VISIBLE_DEVICES: invalid device id '-1'")
    bundle, _rootfs, spec = make_bundle(tmp_path / "b", env=["NVIDIA_VISIBLE_DEVICES=none"])
    assert csv_edit_for_create(spec, str(bundle), cfg, "/x") is None
