"""Graphics discovery on Debian's real NVIDIA user-space packages (bookworm non-free, 535):
the .debs are unpacked (dpkg-deb -x) into a driver root beside the TEST FIXTURE's /proc, /dev
and sysfs, with the links Debian's alternatives would make, and direct mode must find every
real file where Debian puts it (libraries in nvidia/current/, the JSON files in /usr/share,
the Xorg modules through the alternatives).

The packages are downloaded once with apt-get through a private sources list into
/var/cache/nvdocker2-tests/nvidia-bookworm (NVDOCKER2_TEST_CACHE), and read from there after.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from fixtures.fake_driver import LIB64_DIR, add_dri, build_fake_driver

from nvdocker2.direct.discover import discover
from nvdocker2.direct.spec import make_plan

CACHE = Path(os.environ.get("NVDOCKER2_TEST_CACHE", "/var/cache/nvdocker2-tests"))
DEBS = CACHE / "nvidia-bookworm"
PACKAGES = (
    "nvidia-vulkan-common", "nvidia-egl-common", "libglx-nvidia0", "libegl-nvidia0",
    "libgles-nvidia1", "libgles-nvidia2", "libnvidia-eglcore", "libnvidia-glcore",
    "libnvidia-glvkspirv", "libnvidia-egl-wayland1", "xserver-xorg-video-nvidia",
    "libnvcuvid1", "libnvidia-encode1", "libnvidia-ngx1", "nvidia-driver-bin",
)
CURRENT = f"{LIB64_DIR}/nvidia/current"


def _download() -> None:
    """apt-get download PACKAGES from bookworm main + non-free, with apt's state kept in a
    private folder (the host's sources and lists are neither read nor changed)."""
    apt = DEBS / ".apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(
        "deb http://deb.debian.org/debian bookworm main non-free\n")
    (apt / "status").touch()
    opts = [f"-oDir::Etc::SourceList={apt}/sources.list", "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={apt}/lists", f"-oDir::State::status={apt}/status",
            f"-oDir::Cache={apt}/cache", "-oAPT::Architectures::=amd64",
            "-oAPT::Sandbox::User=root"]
    subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, timeout=600)
    subprocess.run(["apt-get", *opts, "download", *PACKAGES], check=True, capture_output=True,
                   cwd=DEBS, timeout=600)


@pytest.fixture(scope="module")
def debs():
    if os.uname().machine != "x86_64":
        pytest.skip("Debian's amd64 packages")
    DEBS.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0]: p for p in DEBS.glob("*.deb")}
    if not set(PACKAGES) <= set(have):
        try:
            _download()
        except (OSError, subprocess.SubprocessError) as err:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"cannot download Debian's NVIDIA packages: {err}")
        have = {p.name.split("_")[0]: p for p in DEBS.glob("*.deb")}
    return [have[name] for name in PACKAGES]


@pytest.fixture
def debian(tmp_path, debs):
    root = tmp_path / "driver"
    root.mkdir()
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    glx = next((root / CURRENT.lstrip("/")).glob("libGLX_nvidia.so.*.*"))
    version = re.search(r"\.so\.(\d+\.\d+\.\d+)$", glx.name).group(1)
    # What update-alternatives makes on install (nvidia-alternative's links).
    alts = root / "etc/alternatives"
    alts.mkdir(parents=True, exist_ok=True)
    for path, target in (
            ("/usr/lib/xorg/modules/drivers/nvidia_drv.so",
             "/usr/lib/nvidia/current/nvidia_drv.so"),
            ("/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
             "/usr/lib/nvidia/current/libglxserver_nvidia.so")):
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        alt = alts / f"nvidia--{link.name}"
        os.symlink(target, alt)
        os.symlink(f"/etc/alternatives/{alt.name}", link)
    fake = build_fake_driver(root, version=version, compat32=False, ld_cache=False,
                             layout="standard")
    (root / "etc/ld.so.conf").write_text(f"{CURRENT}\n{LIB64_DIR}\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)
    fake.dri = add_dri(fake)
    return fake


def test_debians_real_graphics_files_are_found_where_debian_puts_them(debian):
    v = debian.version
    plan = make_plan(discover(str(debian.root)), "0",
                     ["graphics", "display", "video", "ngx", "utility"])
    got = {f.path: f for f in plan.files}
    for name in ("libGLX_nvidia", "libEGL_nvidia", "libGLESv2_nvidia", "libGLESv1_CM_nvidia",
                 "libnvcuvid", "libnvidia-encode", "libnvidia-ngx"):
        assert f"{CURRENT}/{name}.so.{v}" in got, name
    for name in ("libnvidia-eglcore", "libnvidia-glcore", "libnvidia-tls", "libnvidia-glsi",
                 "libnvidia-glvkspirv"):
        assert f"{LIB64_DIR}/{name}.so.{v}" in got, name
    assert f"{LIB64_DIR}/libnvidia-egl-wayland.so.1.1.10" in got  # a version of its own
    assert got[f"{CURRENT}/libGLX_nvidia.so.{v}"].links == ("libGLX_nvidia.so.0",)
    share = str(debian.root) + "/usr/share"
    assert {p: got[p].host_path for p in (
        "/etc/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        f"/usr/share/nvidia/nvidia-application-profiles-{v}-rc")} == {
        "/etc/vulkan/icd.d/nvidia_icd.json": f"{share}/vulkan/icd.d/nvidia_icd.json",
        "/etc/vulkan/implicit_layer.d/nvidia_layers.json":
            f"{share}/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json":
            f"{share}/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json":
            f"{share}/egl/egl_external_platform.d/10_nvidia_wayland.json",
        f"/usr/share/nvidia/nvidia-application-profiles-{v}-rc":
            f"{share}/nvidia/nvidia-application-profiles-{v}-rc",
    }
    lib = str(debian.root) + "/usr/lib/nvidia/current"
    assert got["/usr/lib/xorg/modules/drivers/nvidia_drv.so"].host_path == f"{lib}/nvidia_drv.so"
    assert got["/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so"].host_path == (
        f"{lib}/libglxserver_nvidia.so.{v}")
    assert {f"{CURRENT}/nvidia/wine/nvngx.dll", f"{CURRENT}/nvidia/wine/_nvngx.dll"} <= set(got)
    card, render = debian.dri[debian.gpus[0].uuid]
    assert [n.path for n in plan.nodes if n.path.startswith("/dev/dri")] == [
        f"/dev/dri/{card}", f"/dev/dri/{render}"]
    # The ICD file names the library by the soname the container gets a link for.
    icd = Path(got["/etc/vulkan/icd.d/nvidia_icd.json"].host_path).read_text()
    assert '"libGLX_nvidia.so.0"' in icd
