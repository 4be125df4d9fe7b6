"""What a WSL2 guest offers instead of a Linux driver: /dev/dxg and the Windows driver's files.

WSL2 has no /proc/driver/nvidia and no /dev/nvidia*: every GPU of the Windows host is reached
through the one paravirtual node /dev/dxg, libdxcore.so in /usr/lib/wsl/lib talks to it, and
the NVIDIA user-space driver lives in the Windows driver store, mounted at
/usr/lib/wsl/drivers/nv*.inf_amd64_*/. A container gets, as NVIDIA's own WSL CDI spec gives
it (nvidia-container-toolkit pkg/nvcdi/driver-wsl.go): one device `all` with /dev/dxg,
libdxcore.so, the driver store's files at their own paths, an ld cache over their folders and
/usr/bin/nvidia-smi linked to the driver store's. WSL2 is recognised by /dev/dxg (a character
device) and the lib directory under the driver root, never by running a program, so a test can
point the driver root at a fake tree. Stdlib only, like the rest of direct mode.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from nvdocker2.direct.discover import DeviceNode, Discovery, DriverFile, host_path
from nvdocker2.direct.errors import DirectError

DXG_NODE = "/dev/dxg"
WSL_LIB_DIR = "/usr/lib/wsl/lib"
DRIVER_STORE_DIR = "/usr/lib/wsl/drivers"
DRIVER_STORE_GLOB = re.compile(r"nv.*\.inf_amd64_.*")
NVIDIA_SMI_LINK = "/usr/bin/nvidia-smi"

DXCORE_LIBRARIES = ("libdxcore.so",)
# The driver store's files a container needs (NVIDIA's requiredDriverStoreFiles).
DRIVER_STORE_FILES = (
    "libcuda.so.1.1",
    "libcuda_loader.so",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml_loader.so",
    "libnvdxgdmal.so.1",
    "nvcubins.bin",
    "nvidia-smi",
)
# What a capability cannot work without, in the driver store.
REQUIRED_FOR = {"compute": "libcuda.so.1.1", "utility": "libnvidia-ml.so.1"}
_EXTRA = re.compile(r".*(\.so(\..*)?|\.bin|\.dll)$")
_SONAME_LINK = re.compile(r"(lib.+\.so\.\d+)(\.\d+)+")
WSL_HINT = "install or update the NVIDIA driver on the Windows side (it provides WSL2's files)"


@dataclass(frozen=True)
class WslDriver:
    """Where the WSL2 driver was found: its driver store (None if none holds libcuda.so.1.1)
    and the links a container gets beside the mounts, as (link, absolute target)."""

    lib_dir: str
    driver_store: str | None
    links: tuple[tuple[str, str], ...]


def is_wsl(root: str) -> bool:
    """True when `root` looks like a WSL2 guest: /dev/dxg is a character device and
    /usr/lib/wsl/lib a directory."""
    try:
        st = os.stat(host_path(root, DXG_NODE))
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and os.path.isdir(host_path(root, WSL_LIB_DIR))


def driver_stores(root: str) -> list[str]:
    """The NVIDIA driver store folders (in-root paths, sorted) under /usr/lib/wsl/drivers."""
    try:
        names = sorted(os.listdir(host_path(root, DRIVER_STORE_DIR)))
    except OSError:
        return []
    paths = (f"{DRIVER_STORE_DIR}/{n}" for n in names if DRIVER_STORE_GLOB.fullmatch(n))
    return [p for p in paths if os.path.isdir(host_path(root, p))]


def nvidia_driver_store(root: str) -> str | None:
    """The first driver store folder holding libcuda.so.1.1, as NVIDIA's toolkit picks it."""
    for store in driver_stores(root):
        if os.path.isfile(host_path(root, f"{store}/libcuda.so.1.1")):
            return store
    return None


def missing(root: str) -> list[str]:
    """What a WSL2 container would lack under `root`, one phrase each (empty: nothing)."""
    out = []
    if not is_wsl(root):
        if not os.path.exists(host_path(root, DXG_NODE)):
            out.append(f"{DXG_NODE} does not exist")
        elif not stat.S_ISCHR(os.stat(host_path(root, DXG_NODE)).st_mode):
            out.append(f"{DXG_NODE} is not a character device")
        if not os.path.isdir(host_path(root, WSL_LIB_DIR)):
            out.append(f"{WSL_LIB_DIR} does not exist")
    for name in DXCORE_LIBRARIES:
        if not os.path.isfile(host_path(root, f"{WSL_LIB_DIR}/{name}")):
            out.append(f"{WSL_LIB_DIR}/{name} is missing")
    store = nvidia_driver_store(root)
    if store is None:
        stores = driver_stores(root)
        where = ", ".join(stores) if stores else f"no {DRIVER_STORE_DIR}/nv*.inf_amd64_* folder"
        out.append(f"no NVIDIA driver store with libcuda.so.1.1 ({where})")
        return out
    for name in DRIVER_STORE_FILES:
        if not os.path.isfile(host_path(root, f"{store}/{name}")):
            out.append(f"{store}/{name} is missing")
    return out


def discover_wsl(root: str) -> Discovery:
    """The WSL2 driver under `root` as a `Discovery` whose `wsl` is set; no GPUs are listed
    (WSL2 names none to Linux), the one node is /dev/dxg."""
    st = os.stat(host_path(root, DXG_NODE))
    node = DeviceNode(
        path=DXG_NODE, host_path=host_path(root, DXG_NODE), major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev), file_mode=stat.S_IMODE(st.st_mode), uid=st.st_uid,
        gid=st.st_gid,
    )
    files = [_file(root, f"{WSL_LIB_DIR}/{n}") for n in DXCORE_LIBRARIES
             if os.path.isfile(host_path(root, f"{WSL_LIB_DIR}/{n}"))]
    store = nvidia_driver_store(root)
    links: list[tuple[str, str]] = []
    if store is not None:
        names = [n for n in DRIVER_STORE_FILES if os.path.isfile(host_path(root, f"{store}/{n}"))]
        names += sorted(
            n for n in os.listdir(host_path(root, store))
            if n not in DRIVER_STORE_FILES and _EXTRA.fullmatch(n)
            and os.path.isfile(host_path(root, f"{store}/{n}"))
        )
        files.extend(_file(root, f"{store}/{n}") for n in names)
        if "nvidia-smi" in names:
            links.append((NVIDIA_SMI_LINK, f"{store}/nvidia-smi"))
    return Discovery(
        driver_root=root, driver_version=None, gpus=(), nodes=(node,), files=tuple(files),
        problems=(), library_source=store or f"no NVIDIA driver store in {DRIVER_STORE_DIR}",
        wsl=WslDriver(lib_dir=WSL_LIB_DIR, driver_store=store, links=tuple(links)),
    )


def _file(root: str, path: str) -> DriverFile:
    name = os.path.basename(path)
    is_lib = ".so" in name
    m = _SONAME_LINK.fullmatch(name)
    return DriverFile(
        path=path, host_path=host_path(root, path), links=(m.group(1),) if m else (),
        kind="lib" if is_lib else ("bin" if name == "nvidia-smi" else "file"),
        capability="wsl",
    )


def wsl_plan(discovery: Discovery, devices: str | Iterable[str], capabilities: frozenset[str]):
    """The direct-mode plan on WSL2: /dev/dxg for "all" (every GPU at once: WSL2 cannot give
    one alone), every driver file for any capability; `DirectError` for a GPU id, or a
    capability's library missing."""
    from nvdocker2.direct.spec import Plan

    assert discovery.wsl is not None
    ids = [devices] if isinstance(devices, str) else list(devices)
    chosen = [i.strip() for i in ids if i.strip() not in ("", "none", "void")]
    for ident in chosen:
        if ident != "all":
            raise DirectError(
                f"NVIDIA_VISIBLE_DEVICES: GPU {ident!r} cannot be chosen on WSL2: /dev/dxg"
                " gives a container every GPU of the Windows host",
                "use NVIDIA_VISIBLE_DEVICES=all (docker run --gpus all)",
            )
    store = discovery.wsl.driver_store
    if capabilities and not any(f.path.startswith(WSL_LIB_DIR + "/") for f in discovery.files):
        raise DirectError(f"{WSL_LIB_DIR}/libdxcore.so not found under driver root"
                          f" {discovery.driver_root}: WSL2's GPU library", WSL_HINT)
    for cap, name in REQUIRED_FOR.items():
        if cap in capabilities and not any(os.path.basename(f.path) == name
                                           for f in discovery.files):
            where = store or f"{DRIVER_STORE_DIR}/nv*.inf_amd64_*"
            raise DirectError(
                f"{name} not found in the WSL2 driver store ({where} under driver root"
                f" {discovery.driver_root}), needed for the {cap} capability", WSL_HINT,
            )
    if not capabilities:
        return Plan(gpus=(), nodes=discovery.nodes if chosen else (), files=())
    return Plan(gpus=(), nodes=discovery.nodes if chosen else (), files=discovery.files,
                links=discovery.wsl.links)
