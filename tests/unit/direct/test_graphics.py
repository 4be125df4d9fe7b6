"""Graphics, display, video and NGX in direct mode and `cdi generate`, and CUDA forward
compatibility, on the TEST FIXTURE fake driver (real nodes, real files, a real ld cache)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fixtures.fake_driver import (
    LIB64_DIR,
    add_compat,
    add_dri,
    add_graphics,
    make_bundle,
)

from nvdocker2 import toolkit_config
from nvdocker2.direct import DirectError
from nvdocker2.direct.cdi import cdi_spec
from nvdocker2.direct.create import edit_for_create
from nvdocker2.direct.discover import discover
from nvdocker2.hook.cli_argv import argv_before_pid
from nvdocker2.hook.request import request_from_spec

RUNTIME = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def driver(driver):
    """The fake driver tree (tests/unit/conftest.py) with DRI nodes and graphics files."""
    driver.dri = add_dri(driver)
    add_graphics(driver)
    return driver


def config_for(driver, tmp_path, extra=""):
    path = tmp_path / "config.toml"
    path.write_text(f'{extra}[nvidia-container-runtime]\nmode = "direct"\n'
                    f'driver-root = "{driver.root}"\n')
    return toolkit_config.load(str(path))


def create(driver, tmp_path, env, extra=""):
    bundle, rootfs, spec = make_bundle(tmp_path, env=env)
    return edit_for_create(spec, str(bundle), config_for(driver, tmp_path, extra), RUNTIME)


def mounts(new):
    return {m["destination"]: m["source"] for m in new["mounts"][1:]}


def test_graphics_for_gpu_1_gives_only_its_dri_nodes_and_the_loaders_json(driver, tmp_path):
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=1",
                                    "NVIDIA_DRIVER_CAPABILITIES=graphics"])
    card, render = driver.dri[driver.gpus[1].uuid]
    assert [(d["path"], d["major"], d["minor"]) for d in new["linux"]["devices"]] == [
        ("/dev/nvidia1", 195, 1), ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", 509, 0), ("/dev/nvidia-uvm-tools", 509, 1),
        ("/dev/nvidia-modeset", 195, 254), (f"/dev/dri/{card}", 226, 2),
        (f"/dev/dri/{render}", 226, 129)]
    got = mounts(new)
    v = driver.version
    root = str(driver.root)
    assert got == {
        f"{LIB64_DIR}/libnvidia-eglcore.so.{v}": f"{root}{LIB64_DIR}/libnvidia-eglcore.so.{v}",
        f"{LIB64_DIR}/libGLX_nvidia.so.{v}": f"{root}{LIB64_DIR}/libGLX_nvidia.so.{v}",
        f"{LIB64_DIR}/libEGL_nvidia.so.{v}": f"{root}{LIB64_DIR}/libEGL_nvidia.so.{v}",
        # NVIDIA's container paths: Vulkan under /etc, EGL under /usr/share
        "/etc/vulkan/icd.d/nvidia_icd.json": f"{root}/usr/share/vulkan/icd.d/nvidia_icd.json",
        "/etc/vulkan/implicit_layer.d/nvidia_layers.json":
            f"{root}/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json":
            f"{root}/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json":
            f"{root}/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        f"/usr/share/nvidia/nvidia-application-profiles-{v}-rc":
            f"{root}/usr/share/nvidia/nvidia-application-profiles-{v}-rc",
    }
    assert all(m["options"] == ["nosuid", "nodev", "bind", "ro"] for m in new["mounts"][1:])


def test_display_adds_the_xorg_modules_and_the_glxserver_link(driver, tmp_path):
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=0",
                                    "NVIDIA_DRIVER_CAPABILITIES=display"])
    ext = "/usr/lib/xorg/modules/extensions"
    glx = f"{ext}/libglxserver_nvidia.so.{driver.version}"
    got = mounts(new)
    assert got["/usr/lib/xorg/modules/drivers/nvidia_drv.so"] == str(
        driver.path("/usr/lib/xorg/modules/drivers/nvidia_drv.so"))
    assert got[glx] == str(driver.path(glx))
    args = new["hooks"]["createContainer"][0]["args"]
    assert f"{ext}/libglxserver_nvidia.so::{glx}" in args
    card, render = driver.dri[driver.gpus[0].uuid]
    paths = [d["path"] for d in new["linux"]["devices"]]
    assert paths[0] == "/dev/nvidia0"
    assert paths[-2:] == [f"/dev/dri/{card}", f"/dev/dri/{render}"]


def test_video_and_ngx_bring_their_libraries_and_the_wine_dlls(driver, tmp_path):
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=0",
                                    "NVIDIA_DRIVER_CAPABILITIES=video,ngx"])
    v = driver.version
    assert sorted(mounts(new)) == [
        f"{LIB64_DIR}/libnvcuvid.so.{v}", f"{LIB64_DIR}/libnvidia-ngx.so.{v}",
        f"{LIB64_DIR}/nvidia/wine/_nvngx.dll", f"{LIB64_DIR}/nvidia/wine/nvngx.dll"]
    assert not any(d["path"].startswith("/dev/dri/") for d in new["linux"]["devices"])


def test_compute_alone_gets_no_dri_node_and_no_graphics_file(driver, tmp_path):
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"])
    assert not any(d["path"].startswith("/dev/dri") for d in new["linux"]["devices"])
    assert not any(m.startswith(("/etc/vulkan", "/usr/share")) for m in mounts(new))


def test_a_compute_container_start_does_not_import_the_graphics_or_compat_code(
        driver, tmp_path):
    bundle, _rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-runtime]\ndriver-root = "{driver.root}"\n')
    code = ("import json, sys; from nvdocker2 import toolkit_config;"
            " from nvdocker2.direct.create import edit_for_create;"
            f" c = toolkit_config.load({str(config)!r});"
            f" edit_for_create(json.load(open({str(bundle / 'config.json')!r})),"
            f" {str(bundle)!r}, c, {RUNTIME!r});"
            " print(sorted(m for m in sys.modules if m.startswith('nvdocker2.direct')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "graphics" not in out and "compat" not in out
    assert "nvdocker2.direct.spec" in out


def test_all_gives_every_gpus_dri_nodes(driver, tmp_path):
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=all",
                                    "NVIDIA_DRIVER_CAPABILITIES=all"])
    dri = sorted(d["path"] for d in new["linux"]["devices"] if d["path"].startswith("/dev/dri"))
    assert dri == sorted(f"/dev/dri/{n}" for pair in driver.dri.values() for n in pair)


def test_a_dri_name_in_sysfs_without_its_node_or_of_another_major_is_left_out(
        driver, tmp_path):
    card, render = driver.dri[driver.gpus[0].uuid]
    driver.path(f"/dev/dri/{render}").unlink()
    driver.path(f"/dev/dri/{card}").unlink()
    driver.path(f"/dev/dri/{card}").write_text("not a node")
    new = create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=0",
                                    "NVIDIA_DRIVER_CAPABILITIES=graphics"])
    assert not any(d["path"].startswith("/dev/dri") for d in new["linux"]["devices"])


def test_a_capability_the_config_does_not_support_is_refused_in_one_line(driver, tmp_path):
    with pytest.raises(DirectError) as err:
        create(driver, tmp_path, ["NVIDIA_VISIBLE_DEVICES=0",
                                  "NVIDIA_DRIVER_CAPABILITIES=compute,graphics"],
               extra='supported-driver-capabilities = "compute,utility"\n')
    assert err.value.message == (
        "NVIDIA_DRIVER_CAPABILITIES: known capability 'graphics' is not supported here"
        " (supported: compute,utility)")


def test_the_legacy_hook_passes_every_capability_flag(driver, tmp_path):
    config = config_for(driver, tmp_path)
    _bundle, _rootfs, spec = make_bundle(tmp_path, env=[
        "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"])
    argv = argv_before_pid("/usr/bin/nvidia-container-cli", request_from_spec(spec, config),
                           config)
    assert [a for a in argv if a[2:] in toolkit_config.ALL_CAPABILITIES] == [
        "--compute", "--utility", "--video", "--graphics", "--display", "--compat32", "--ngx"]


def test_cdi_generate_puts_each_gpus_dri_nodes_in_its_own_device(driver, tmp_path):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    by_name = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]]
               for d in spec["devices"]}
    for i, g in enumerate(driver.gpus):
        card, render = driver.dri[g.uuid]
        assert by_name[str(i)] == by_name[g.uuid] == [
            f"/dev/nvidia{g.minor}", f"/dev/dri/{card}", f"/dev/dri/{render}"]
    common = spec["containerEdits"]
    assert not any(n["path"].startswith("/dev/dri") for n in common["deviceNodes"])
    paths = {m["containerPath"] for m in common["mounts"]}
    assert {"/etc/vulkan/icd.d/nvidia_icd.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so"} <= paths


def folders_of(new):
    args = new["hooks"]["createContainer"][0]["args"]
    return [args[i + 1] for i, a in enumerate(args) if a == "--folder"]


@pytest.mark.parametrize("version, first", [("999.10.01", True), ("535.200.01", False),
                                            ("400.1.2", False)])
def test_cuda_compat_libraries_come_first_only_when_newer_than_the_driver(
        driver, tmp_path, version, first):
    bundle, rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=0"])
    folder = add_compat(rootfs, version)
    new = edit_for_create(spec, str(bundle), config_for(driver, tmp_path), RUNTIME)
    assert folders_of(new) == ([folder] if first else []) + [LIB64_DIR]


def test_cuda_compat_with_two_libcudas_or_an_escaping_link_changes_nothing(driver, tmp_path):
    bundle, rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=0"])
    folder = add_compat(rootfs, "999.1.1")
    (rootfs / folder.lstrip("/") / "libcuda.so.998.1.1").write_bytes(b"x")
    new = edit_for_create(spec, str(bundle), config_for(driver, tmp_path), RUNTIME)
    assert folders_of(new) == [LIB64_DIR]

    other = tmp_path / "other"
    bundle2, rootfs2, spec2 = make_bundle(other)
    host = tmp_path / "host-compat"
    host.mkdir()
    (host / "libcuda.so.999.1.1").write_bytes(b"x")
    (rootfs2 / "usr/local").mkdir(parents=True)
    (rootfs2 / "usr/local/cuda").symlink_to("../" * 8 + str(host).lstrip("/"))
    spec2["process"]["env"] = ["NVIDIA_VISIBLE_DEVICES=0"]
    new = edit_for_create(spec2, str(bundle2), config_for(driver, tmp_path), RUNTIME)
    assert folders_of(new) == [LIB64_DIR]
