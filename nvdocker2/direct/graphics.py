"""What graphics, display and NGX bring beyond libraries: config files, Xorg modules, DRI nodes.

The loaders in a container find NVIDIA's driver through JSON files (the Vulkan ICD and layers,
glvnd's EGL vendor file, the EGL external platforms of wayland, gbm, xcb and xlib), the X
server through its modules (nvidia_drv.so, libglxserver_nvidia.so), and a GPU's display and
render nodes through /dev/dri. The lists and container paths are NVIDIA's
(nvidia-container-toolkit internal/discover/graphics.go): the Vulkan files go under /etc, the
EGL files under /usr/share, wherever the host keeps them. DRI nodes are those of the asked
GPUs only, found by PCI bus id under /sys/bus/pci/devices/BUSID/drm. Imported only when one of
spec.GRAPHICS_CAPABILITIES is asked, so a compute container's start reads none of this. Stdlib only.
"""

from __future__ import annotations

import os

from nvdocker2.direct.discover import (
    DeviceNode,
    Discovery,
    DriverFile,
    Gpu,
    char_node,
    host_path,
)
from nvdocker2.direct.rootfs import resolve_in_root

DRI_CAPABILITIES = frozenset(("graphics", "display"))
DRI_MAJOR = 226

# Where the host may keep config files (XDG data and config dirs), in NVIDIA's order.
CONFIG_ROOTS = ("/etc", "/usr/local/share", "/usr/share")
# (name under a config root, where it goes in the container)
VULKAN_CONFIGS = tuple(
    (name, f"/etc/{name}")
    for name in (
        "vulkan/icd.d/nvidia_icd.json",
        "vulkan/icd.d/nvidia_layers.json",
        "vulkan/implicit_layer.d/nvidia_layers.json",
    )
)
EGL_CONFIGS = tuple(
    (name, f"/usr/share/{name}")
    for name in (
        "glvnd/egl_vendor.d/10_nvidia.json",
        "egl/egl_external_platform.d/15_nvidia_gbm.json",
        "egl/egl_external_platform.d/10_nvidia_wayland.json",
        "egl/egl_external_platform.d/09_nvidia_wayland2.json",
        "egl/egl_external_platform.d/20_nvidia_xcb.json",
        "egl/egl_external_platform.d/20_nvidia_xlib.json",
        "nvidia/nvoptix.bin",
    )
)
PROFILES = ("nvidia-application-profiles-{}-rc", "nvidia-application-profiles-{}-key-documentation")
XORG_DIRS = tuple(
    f"{lib}/{sub}/{kind}"
    for lib in ("/usr/lib/xorg", "/usr/lib64/xorg", "/usr/X11R6/lib", "/usr/X11R6/lib64")
    for sub in ("modules", "modules/updates")
    for kind in ("drivers", "extensions")
)
WINE_FILES = ("nvngx.dll", "_nvngx.dll")
_HEX = frozenset("0123456789abcdef")


def _hex(text: str, least: int, most: int) -> bool:
    return least <= len(text) <= most and all(c in _HEX for c in text)


def is_bus_id(text: str) -> bool:
    """A PCI bus id as sysfs names it (`0000:0a:00.0`: lowercase hex, function 0 to 7),
    checked without `re`, which would cost every graphics container's `create`
    milliseconds."""
    parts = text.split(":")
    if len(parts) != 3 or not (_hex(parts[0], 4, 8) and _hex(parts[1], 2, 2)):
        return False
    device, dot, function = parts[2].partition(".")
    return _hex(device, 2, 2) and bool(dot) and function in tuple("01234567")


def is_dri_name(name: str) -> bool:
    """`cardN` or `renderDN`, N one to four ASCII digits."""
    for prefix in ("card", "renderD"):
        if name.startswith(prefix):
            number = name[len(prefix):]
            return 1 <= len(number) <= 4 and number.isascii() and number.isdigit()
    return False


def graphics_files(discovery: Discovery, caps: frozenset[str]
                   ) -> tuple[tuple[DriverFile, ...], tuple[tuple[str, str], ...]]:
    """The config files, Xorg modules and NGX files the capabilities bring that the driver
    root has (a missing one is left out, as NVIDIA does: not every driver ships every one),
    and the links to make beside them as (link, absolute target)."""
    root = discovery.driver_root
    out: list[DriverFile] = []
    links: list[tuple[str, str]] = []
    if "graphics" in caps or "display" in caps:
        arch = os.uname().machine
        own = f"vulkan/icd.d/nvidia_icd.{arch}.json"  # RPM packages name it by CPU
        vulkan = (*VULKAN_CONFIGS, (own, f"/etc/{own}"))
        for name, dest in (*vulkan, *EGL_CONFIGS):
            f = _config(root, name, dest, "graphics")
            if f is not None:
                out.append(f)
        version = discovery.driver_version
        for pattern in PROFILES if version else ():
            path = f"/usr/share/nvidia/{pattern.format(version)}"
            f = _file(root, path, path, "graphics")
            if f is not None:
                out.append(f)
    if "display" in caps:
        modules, links = _xorg_modules(root, discovery.driver_version)
        out.extend(modules)
    if "ngx" in caps:
        out.extend(_wine_files(discovery))
    return tuple(out), tuple(links)


def _config(root: str, name: str, dest: str, capability: str) -> DriverFile | None:
    for config_root in CONFIG_ROOTS:
        f = _file(root, f"{config_root}/{name}", dest, capability)
        if f is not None:
            return f
    return None


def _file(root: str, path: str, dest: str, capability: str) -> DriverFile | None:
    """`path` in the driver root (symlinks resolved inside it) as a file mounted at `dest`."""
    if not os.path.lexists(host_path(root, path)):
        return None
    real = resolve_in_root(root, path, follow_final=True, refuse_escape=False)
    where = host_path(root, real)
    if not os.path.isfile(where):
        return None
    return DriverFile(path=dest, host_path=where, links=(), kind="file", capability=capability)


def _xorg_modules(root: str, version: str | None
                  ) -> tuple[list[DriverFile], list[tuple[str, str]]]:
    """nvidia_drv.so and libglxserver_nvidia.so where the X server looks for them, and the
    glxserver's unversioned name as a link where only the versioned file is there (NVIDIA's
    installer; Debian's alternatives give the unversioned name itself)."""
    files: list[DriverFile] = []
    links: list[tuple[str, str]] = []
    glx = "libglxserver_nvidia.so"
    for names in (("nvidia_drv.so",), (*([f"{glx}.{version}"] if version else []), glx)):
        found = _first(root, [f"{d}/{n}" for n in names for d in XORG_DIRS], "display")
        if found is not None:
            files.append(found)
            if found.path.endswith(f"{glx}.{version}"):
                links.append((f"{os.path.dirname(found.path)}/{glx}", found.path))
    return files, links


def _first(root: str, paths: list[str], capability: str) -> DriverFile | None:
    for path in paths:
        f = _file(root, path, path, capability)
        if f is not None:
            return f
    return None


def _wine_files(discovery: Discovery) -> list[DriverFile]:
    """NGX's Windows DLLs (for Proton/wine), from `nvidia/wine/` beside libnvidia-ngx.so, to
    the same place beside the library in the container."""
    out = []
    for lib in discovery.files_for({"ngx"}):
        if lib.kind != "lib" or lib.compat32:
            continue
        folder = os.path.dirname(lib.path)
        for name in WINE_FILES:
            path = f"{folder}/nvidia/wine/{name}"
            f = _file(discovery.driver_root, path, path, "ngx")
            if f is not None:
                out.append(f)
        break
    return out


def dri_nodes(discovery: Discovery, gpus: tuple[Gpu, ...]) -> list[DeviceNode]:
    """The /dev/dri card and render nodes of exactly `gpus`, by their PCI bus ids under
    /sys/bus/pci/devices; a node that is missing or not a DRI character device is left out."""
    root = discovery.driver_root
    nodes = []
    for gpu in gpus:
        if not is_bus_id(gpu.bus_id):
            continue
        drm = host_path(root, f"/sys/bus/pci/devices/{gpu.bus_id}/drm")
        try:
            names = sorted(os.listdir(drm))
        except OSError:
            continue
        for name in names:
            if not is_dri_name(name):
                continue
            node, _ = char_node(root, f"/dev/dri/{name}")
            if node is not None and node.major == DRI_MAJOR:
                nodes.append(node)
    return nodes


def graphics_additions(discovery: Discovery, caps: frozenset[str], gpus: tuple[Gpu, ...]
                       ) -> tuple[list[DeviceNode], tuple[DriverFile, ...],
                                  tuple[tuple[str, str], ...]]:
    """(DRI nodes of `gpus`, files, links) that `caps` bring beyond the driver's libraries."""
    nodes = dri_nodes(discovery, gpus) if caps & DRI_CAPABILITIES else []
    files, links = graphics_files(discovery, caps)
    return nodes, files, links
