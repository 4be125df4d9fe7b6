"""Graphics, display, video and CUDA forward compatibility in direct mode, end to end: a private
dockerd with this package's runtime in `mode = "direct"` on the TEST FIXTURE fake driver (real
nodes made with mknod: /dev/nvidiaN, /dev/dri/cardN and renderDN under sysfs drm folders by PCI
bus id; real JSON and ELF files; a real ld.so.cache). What the container shows is asserted:
exactly the nodes and files asked for, nothing more."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import (
    DRIVER_VERSION,
    LIB64_DIR,
    add_compat,
    add_dri,
    add_graphics,
    build_fake_driver,
)
from privatedockerd import PrivateDockerd

from nvdocker2.direct.ldcache import parse_ld_cache
from nvdocker2.runtime.launcher import write_launchers

LIST = ("ls /dev/dri 2>/dev/null | sort | tr '\\n' ' '; echo;"
        " for f in /etc/vulkan/icd.d/nvidia_icd.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json"
        " /usr/lib/xorg/modules/drivers/nvidia_drv.so"
        f" {LIB64_DIR}/libGLX_nvidia.so.{DRIVER_VERSION} {LIB64_DIR}/libnvcuvid.so.{DRIVER_VERSION}"
        f" {LIB64_DIR}/libcuda.so.{DRIVER_VERSION}; do"
        " if [ -e $f ]; then echo \"$f present\"; else echo \"$f absent\"; fi; done")


@pytest.fixture(scope="module")
def gfx(tmp_path_factory, e2e_prerequisites):
    root = tmp_path_factory.mktemp("gfx")
    driver = build_fake_driver(root / "driver")
    driver.dri = add_dri(driver)
    add_graphics(driver)
    bindir = root / "bin"
    bindir.mkdir()
    write_launchers(str(bindir))
    config = root / "config.toml"
    config.write_text(
        'supported-driver-capabilities = "compute,utility,graphics,video"\n'
        f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{driver.root}"\n'
        '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(config))
    daemon = PrivateDockerd(config=json.dumps(
        {"runtimes": {"nvidia": {"path": str(bindir / "nvidia-container-runtime")}}}).encode(),
        env=env)
    try:
        daemon.start()
        yield driver, daemon, root
    finally:
        daemon.cleanup()


def run(daemon, env, script, image=None, check=True, name=None):
    flags = [a for e in env for a in ("-e", e)]
    naming = ["--name", name] if name else ["--rm"]
    return daemon.docker("run", *naming, "--network=none", "--runtime=nvidia", *flags,
                         image or daemon.image, "sh", "-c", script, check=check, timeout=120)


def test_graphics_on_gpu_1_shows_only_its_dri_nodes_and_the_graphics_files(gfx):
    driver, daemon, _ = gfx
    card, render = driver.dri[driver.gpus[1].uuid]
    out = run(daemon, ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics"],
              LIST + f"; stat -c '%t:%T' /dev/dri/{card} /dev/dri/{render};"
              " cat /etc/vulkan/icd.d/nvidia_icd.json").stdout
    lines = out.splitlines()
    assert lines[0] == f"{card} {render} "
    assert lines[1:7] == [
        "/etc/vulkan/icd.d/nvidia_icd.json present",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json present",
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so absent",  # display was not asked
        f"{LIB64_DIR}/libGLX_nvidia.so.{DRIVER_VERSION} present",
        f"{LIB64_DIR}/libnvcuvid.so.{DRIVER_VERSION} absent",
        f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION} absent",
    ]
    assert lines[7:9] == ["e2:2", "e2:81"]
    assert lines[9] == driver.path("/usr/share/vulkan/icd.d/nvidia_icd.json").read_text().strip()


def test_compute_alone_shows_no_dri_and_no_graphics_file(gfx):
    _driver, daemon, _ = gfx
    out = run(daemon, ["NVIDIA_VISIBLE_DEVICES=all"], LIST).stdout.splitlines()
    assert out[0] == ""
    assert [line.endswith("present") for line in out[1:]] == [False] * 5 + [True]


def test_video_brings_its_library_and_no_dri(gfx):
    _driver, daemon, _ = gfx
    out = run(daemon, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video"],
              LIST).stdout.splitlines()
    assert out[0] == ""
    assert out[5] == f"{LIB64_DIR}/libnvcuvid.so.{DRIVER_VERSION} present"


def test_display_excluded_by_the_config_fails_docker_run_in_one_line(gfx):
    _driver, daemon, _ = gfx
    proc = run(daemon, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=display"],
               "true", check=False)
    assert proc.returncode != 0
    assert ("NVIDIA_DRIVER_CAPABILITIES: known capability 'display' is not supported here"
            " (supported: compute,utility,graphics,video)") in proc.stderr
    assert daemon.docker("ps", "-aq").stdout == ""


def _compat_image(daemon, tmp, tag, version):
    tree = tmp / tag
    tree.mkdir()
    add_compat(tree, version)
    daemon.docker("create", "--name", f"{tag}-base", daemon.image, "true")
    try:
        daemon.docker("cp", f"{tree}/.", f"{tag}-base:/")
        daemon.docker("commit", f"{tag}-base", f"{tag}:latest")
    finally:
        daemon.docker("rm", "-f", f"{tag}-base", check=False)
    return f"{tag}:latest"


@pytest.mark.parametrize("version, wins", [("999.1.1", True), ("535.1.1", False)])
def test_an_images_newer_cuda_compat_libcuda_is_first_in_its_ld_cache(gfx, version, wins):
    _driver, daemon, root = gfx
    tag = f"nvd2-compat-{version.split('.')[0]}"
    image = _compat_image(daemon, root, tag, version)
    name = f"{tag}-run"
    try:
        run(daemon, ["NVIDIA_VISIBLE_DEVICES=0"], "true", image=image, name=name)
        cache = root / f"{tag}.cache"
        daemon.docker("cp", f"{name}:/etc/ld.so.cache", str(cache))
        first = [e.path for e in parse_ld_cache(cache.read_bytes()) if e.name == "libcuda.so.1"]
    finally:
        daemon.docker("rm", "-f", name, check=False)
        daemon.docker("rmi", image, check=False)
    compat = "/usr/local/cuda-99.9/compat/libcuda.so.1"
    driver_lib = f"{LIB64_DIR}/libcuda.so.1"
    assert first == ([compat, driver_lib] if wins else [driver_lib])
