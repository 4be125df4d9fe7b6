"""WSL2 in direct mode and `cdi generate`, on the fake WSL2 tree (test fixture): /dev/dxg,
/usr/lib/wsl/lib and the Windows driver store, as NVIDIA's WSL spec gives them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import jsonschema
import pytest
from fixtures.fake_driver import WSL_STORE, build_fake_driver, build_fake_wsl, make_bundle
from .test_cdi import read_block_yaml
from .test_hook import _mount_like_runc, _state

from nvdocker2.direct import DirectError, direct_edit, discover
from nvdocker2.direct.cdi import cdi_spec, render
from nvdocker2.direct.hook import main as hook_main
from nvdocker2.direct.ldcache import parse_ld_cache
from nvdocker2.direct.wsl import is_wsl, missing

SCHEMA = json.loads((Path(__file__).parents[2] / "fixtures/cdi_schema.json").read_text())
RUNTIME = "/usr/bin/nvidia-container-runtime"
LIB = "/usr/lib/wsl/lib"


@pytest.fixture
def wsl(tmp_path):
    return build_fake_wsl(tmp_path / "wsl")


def test_wsl_is_dxg_and_the_lib_dir_not_proc_driver_nvidia(wsl, tmp_path):
    d = discover(str(wsl.root))
    assert d.wsl is not None and d.wsl.driver_store == WSL_STORE
    assert d.gpus == ()
    assert [(n.path, n.major, n.minor) for n in d.nodes] == [("/dev/dxg", 10, 63)]
    paths = [f.path for f in d.files]
    assert paths[0] == f"{LIB}/libdxcore.so"
    assert f"{WSL_STORE}/libcuda.so.1.1" in paths and f"{WSL_STORE}/nvcubins.bin" in paths
    assert f"{WSL_STORE}/nvdxgdmal64.dll" in paths and f"{WSL_STORE}/libnvwgf2umx.so" in paths
    # WSL's copies in /usr/lib/wsl/lib are not mounted: the driver store's files are.
    assert f"{LIB}/libcuda.so.1.1" not in paths
    assert d.wsl.links == (("/usr/bin/nvidia-smi", f"{WSL_STORE}/nvidia-smi"),)
    # A regular file named dxg is not WSL2; nor is /dev/dxg without the lib dir.
    other = build_fake_wsl(tmp_path / "other", dxg=False)
    (other.root / "dev/dxg").write_text("")
    assert not is_wsl(str(other.root))
    assert not is_wsl(str(build_fake_wsl(tmp_path / "nolib", lib_dir=False).root))
    with pytest.raises(DirectError, match="no NVIDIA driver found"):
        discover(str(other.root))


def test_a_linux_driver_tree_is_never_taken_for_wsl(tmp_path):
    driver = build_fake_driver(tmp_path / "driver")
    assert discover(str(driver.root)).wsl is None


def test_cdi_spec_is_nvidias_wsl_shape_and_validates(wsl, tmp_path):
    d = discover(str(wsl.root))
    spec = cdi_spec(d, runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    jsonschema.validate(spec, SCHEMA)
    assert [dev["name"] for dev in spec["devices"]] == ["all"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/dxg", "hostPath": str(wsl.root / "dev/dxg"), "type": "c",
         "major": 10, "minor": 63}]
    common = spec["containerEdits"]
    assert "deviceNodes" not in common
    mounts = {m["containerPath"]: m["hostPath"] for m in common["mounts"]}
    for name in ("libcuda.so.1.1", "libnvidia-ml.so.1", "nvidia-smi", "nvcubins.bin"):
        assert mounts[f"{WSL_STORE}/{name}"] == str(wsl.path(f"{WSL_STORE}/{name}"))
    assert mounts[f"{LIB}/libdxcore.so"] == str(wsl.path(f"{LIB}/libdxcore.so"))
    (hook,) = common["hooks"]
    args = hook["args"]
    folders = [args[i + 1] for i, a in enumerate(args) if a == "--folder"]
    links = [args[i + 1] for i, a in enumerate(args) if a == "--link"]
    assert folders == [LIB, WSL_STORE]
    assert links == [f"{WSL_STORE}/libcuda.so.1::libcuda.so.1.1",
                     f"/usr/bin/nvidia-smi::{WSL_STORE}/nvidia-smi"]
    out = tmp_path / "nvidia.yaml"
    out.write_text(render(spec, str(out)))
    assert read_block_yaml(out.read_text()) == spec


def test_direct_mode_gives_dxg_the_store_and_an_ld_cache_with_libcuda(wsl, tmp_path, capsys):
    bundle, rootfs, spec = make_bundle(tmp_path)
    new = direct_edit(spec, str(bundle), "all", {"compute", "utility"},
                      driver_root=str(wsl.root), runtime_path="/x/nvidia-container-runtime")
    assert [(d["path"], d["major"], d["minor"]) for d in new["linux"]["devices"]] == [
        ("/dev/dxg", 10, 63)]
    assert {"allow": True, "type": "c", "major": 10, "minor": 63, "access": "rwm"} in \
        new["linux"]["resources"]["devices"]
    (bundle / "config.json").write_text(json.dumps(new))
    _mount_like_runc(new, rootfs)
    args = new["hooks"]["createContainer"][0]["args"]
    assert hook_main(args[2:], _state(bundle)) == 0, capsys.readouterr().err
    assert os.readlink(rootfs / "usr/bin/nvidia-smi") == f"{WSL_STORE}/nvidia-smi"
    entries = {(e.name, e.path) for e in parse_ld_cache((rootfs / "etc/ld.so.cache").read_bytes())}
    assert ("libcuda.so.1", f"{WSL_STORE}/libcuda.so.1") in entries
    assert ("libnvidia-ml.so.1", f"{WSL_STORE}/libnvidia-ml.so.1") in entries
    assert ("libdxcore.so", f"{LIB}/libdxcore.so") in entries


def test_the_nvidia_smi_link_gets_its_folder_where_the_image_has_no_usr_bin(wsl, tmp_path,
                                                                           capsys):
    bundle, rootfs, spec = make_bundle(tmp_path)
    (rootfs / "usr/bin").rmdir()
    new = direct_edit(spec, str(bundle), "all", {"utility"}, driver_root=str(wsl.root),
                      runtime_path="/x/nvidia-container-runtime")
    (bundle / "config.json").write_text(json.dumps(new))
    _mount_like_runc(new, rootfs)
    assert hook_main(new["hooks"]["createContainer"][0]["args"][2:], _state(bundle)) == 0
    assert os.readlink(rootfs / "usr/bin/nvidia-smi") == f"{WSL_STORE}/nvidia-smi"
    assert stat.S_IMODE(os.lstat(rootfs / "usr/bin").st_mode) == 0o755


@pytest.mark.parametrize("target", ["../etc/passwd", "/a/../b", "/a//b", "/", "/a/./b"])
def test_the_hook_refuses_a_link_target_that_climbs_or_is_not_plain(tmp_path, capsys, target):
    bundle, _rootfs, _spec = make_bundle(tmp_path)
    argv = ["update-ldcache", "--ldconfig", "/sbin/ldconfig", "--link", f"/usr/bin/x::{target}"]
    assert hook_main(argv, _state(bundle)) == 1
    assert f"error: direct-hook: bad --link '/usr/bin/x::{target}'" in capsys.readouterr().err


def test_a_gpu_index_is_refused_on_wsl_with_the_way_that_works(wsl, tmp_path):
    bundle, _rootfs, spec = make_bundle(tmp_path)
    with pytest.raises(DirectError) as err:
        direct_edit(spec, str(bundle), ["0"], {"compute"}, driver_root=str(wsl.root),
                    runtime_path=RUNTIME)
    assert err.value.message == ("NVIDIA_VISIBLE_DEVICES: GPU '0' cannot be chosen on WSL2:"
                                 " /dev/dxg gives a container every GPU of the Windows host")
    assert err.value.hint == "use NVIDIA_VISIBLE_DEVICES=all (docker run --gpus all)"


def test_none_gives_no_node(wsl, tmp_path):
    bundle, _rootfs, spec = make_bundle(tmp_path)
    new = direct_edit(spec, str(bundle), "none", {"utility"}, driver_root=str(wsl.root),
                      runtime_path=RUNTIME)
    assert "devices" not in new["linux"] or new["linux"]["devices"] == []


def test_a_store_without_libcuda_names_what_is_missing(tmp_path):
    wsl = build_fake_wsl(tmp_path / "wsl", skip=(f"{WSL_STORE}/libcuda.so.1.1",
                                                 f"{WSL_STORE}/nvcubins.bin"))
    bundle, _rootfs, spec = make_bundle(tmp_path)
    with pytest.raises(DirectError, match=r"libcuda\.so\.1\.1 not found in the WSL2 driver store"):
        direct_edit(spec, str(bundle), "all", {"compute"}, driver_root=str(wsl.root),
                    runtime_path=RUNTIME)
    assert missing(str(wsl.root)) == [
        f"no NVIDIA driver store with libcuda.so.1.1 ({WSL_STORE})"]
    full = build_fake_wsl(tmp_path / "full", skip=(f"{WSL_STORE}/nvcubins.bin",
                                                   f"{LIB}/libdxcore.so"))
    assert missing(str(full.root)) == [f"{LIB}/libdxcore.so is missing",
                                       f"{WSL_STORE}/nvcubins.bin is missing"]
    assert missing(str(build_fake_wsl(tmp_path / "ok").root)) == []
