"""What the NVIDIA driver under a driver root offers: GPUs, device nodes, driver files.

Direct mode and `nvdocker2 cdi generate` read the same facts, and doctor may show them, so
they are gathered here once, read-only and stdlib-only (it runs on every container start):
GPUs from `/proc/driver/nvidia/gpus/*/information`, device nodes from `stat` of the nodes
under `/dev`, libraries through the driver root's own `/etc/ld.so.cache` (else the usual
library directories) and binaries from the usual bin directories. Every path is looked up
under `driver_root`, with symlinks resolved inside it, so a test can point it at a fake tree.
"""

from __future__ import annotations

import os
import stat

from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.ldcache import (
    FLAG_REQUIRED_MASK,
    CacheEntry,
    LdCacheError,
    native_arch_flags,
    parse_ld_cache,
)
from nvdocker2.direct.rootfs import UnsafePath, resolve_in_root
from nvdocker2.toolkit_schema import Record  # frozen records without dataclasses' imports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvdocker2.direct.wsl import WslDriver

ALL_CAPABILITIES = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")

# Libraries per capability, as the loader names them (file names start with "NAME.").
LIBRARIES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so"),
    "compute": (
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-nvvm.so",
        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so",
        "libnvidia-allocator.so",
        "libnvidia-fatbinaryloader.so",
        "libnvidia-compiler.so",
    ),
    "video": (
        "libvdpau_nvidia.so",
        "libnvidia-encode.so",
        "libnvidia-opticalflow.so",
        "libnvcuvid.so",
    ),
    "graphics": (
        "libnvidia-eglcore.so",
        "libnvidia-glcore.so",
        "libnvidia-tls.so",
        "libnvidia-glsi.so",
        "libnvidia-fbc.so",
        "libnvidia-ifr.so",
        "libnvidia-rtcore.so",
        "libnvoptix.so",
        "libGLX_nvidia.so",
        "libEGL_nvidia.so",
        "libGLESv2_nvidia.so",
        "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so",
        "libnvidia-vulkan-producer.so",
        # EGL's external platforms (NVIDIA's graphics libraries; their JSON files name them)
        "libnvidia-egl-wayland.so",
        "libnvidia-egl-wayland2.so",
        "libnvidia-egl-gbm.so",
        "libnvidia-egl-xcb.so",
        "libnvidia-egl-xlib.so",
        "libnvidia-gpucomp.so",  # also compute's: glcore and eglcore need it since 525
    ),
    "ngx": ("libnvidia-ngx.so",),
}

# Libraries with versions of their own, not the driver's (egl-wayland 1.1.10, egl-gbm 1.1.0).
OWN_VERSIONS = frozenset(("libnvidia-egl-wayland.so", "libnvidia-egl-wayland2.so",
                          "libnvidia-egl-gbm.so", "libnvidia-egl-xcb.so", "libnvidia-egl-xlib.so"))

BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}

BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin")

# Control nodes: nvidiactl is required, the others are added where present.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
REQUIRED_NODES = ("nvidiactl",)

_KERNEL_MODULE = "Kernel Module"


def _digits(text: str) -> bool:
    """`text` is one or more ASCII digits (`re`'s [0-9]+, without importing `re`: direct
    mode's discovery runs in every `create`, and `re` costs it milliseconds)."""
    return text.isascii() and text.isdigit()


def _leading_version(text: str) -> str | None:
    """The dotted version (two numbers at least: `535.104.05`) `text` starts with, after
    whitespace it must start with; None when there is none."""
    rest = text.lstrip()
    if len(rest) == len(text):
        return None
    end = 0
    while end < len(rest) and rest[end] in "0123456789.":
        end += 1
    parts = []
    for part in rest[:end].split("."):
        if not part:
            break
        parts.append(part)
    return ".".join(parts) if len(parts) >= 2 else None


def kernel_module_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's text: the number after
    `Kernel Module` (or `Kernel Module for ARCH`), `NVRM version: NVIDIA UNIX x86_64 Kernel
    Module  535.104.05  ...` giving 535.104.05."""
    at = text.find(_KERNEL_MODULE)
    while at != -1:
        rest = text[at + len(_KERNEL_MODULE):]
        found = _leading_version(rest)
        if found is None and rest.startswith(" for "):
            arch = rest[5:]
            end = 0
            while end < len(arch) and not arch[end].isspace():
                end += 1
            if end:
                found = _leading_version(arch[end:])
        if found is not None:
            return found
        at = text.find(_KERNEL_MODULE, at + 1)
    return None


def file_version(path: str) -> str | None:
    """The version a library's file name ends in after `.so.`, two numbers at least
    (`libcuda.so.535.104.05` gives 535.104.05, `libcuda.so.1` None)."""
    _, sep, tail = path.rpartition(".so.")
    if not sep:
        return None
    parts = tail.split(".")
    return tail if len(parts) >= 2 and all(_digits(p) for p in parts) else None


class DeviceNode(Record):
    """A character device: `path` in the container, `host_path` where it was found."""

    path: str
    host_path: str
    major: int
    minor: int
    file_mode: int
    uid: int
    gid: int


class Gpu(Record):
    """One GPU. `index` is its position in PCI bus order (the NVML index users write)."""

    index: int
    minor: int
    uuid: str
    bus_id: str
    model: str

    @property
    def node_path(self) -> str:
        return f"/dev/nvidia{self.minor}"


class DriverFile(Record):
    """A driver file to bind-mount read-only.

    `path` is where it goes in the container, `host_path` the real file to mount, `links`
    the soname symlinks (names in the same directory) that point at it, `kind` "lib" or
    "bin", `capability` the capability that brings it, `compat32` for 32-bit libraries.
    """

    path: str
    host_path: str
    links: tuple[str, ...]
    kind: str
    capability: str
    compat32: bool = False


class Discovery(Record):
    """Everything found under `driver_root`; `problems` maps a node path to what is wrong.
    `wsl` is set on a WSL2 guest (nvdocker2.direct.wsl), which has no GPUs to list."""

    driver_root: str
    driver_version: str | None
    gpus: tuple[Gpu, ...]
    nodes: tuple[DeviceNode, ...]
    files: tuple[DriverFile, ...]
    problems: tuple[tuple[str, str], ...]
    library_source: str
    wsl: WslDriver | None = None

    def node(self, path: str) -> DeviceNode | None:
        for n in self.nodes:
            if n.path == path:
                return n
        return None

    def problem(self, path: str) -> str | None:
        for p, why in self.problems:
            if p == path:
                return why
        return None

    def files_for(self, capabilities: frozenset[str] | set[str]) -> tuple[DriverFile, ...]:
        """Files the capabilities bring; `compat32` adds the 32-bit twins of the others. A
        library two capabilities bring (libnvidia-gpucomp) is there once."""
        seen: set[str] = set()
        out = []
        for f in self.files:
            if f.capability in capabilities and (not f.compat32 or "compat32" in capabilities):
                if f.host_path not in seen:
                    seen.add(f.host_path)
                    out.append(f)
        return tuple(out)


def host_path(driver_root: str, path: str) -> str:
    """`path` (absolute, inside the driver root) as a path on this host."""
    return os.path.join(driver_root, path.lstrip("/")) if driver_root != "/" else path


def discover(driver_root: str = "/", ldcache: str = "/etc/ld.so.cache") -> Discovery:
    """Read what the driver under `driver_root` offers; raise `DirectError` if there is none.
    `ldcache` is the loader's cache to find libraries in (a path inside the driver root)."""
    root = os.path.abspath(driver_root)
    gpus_dir = host_path(root, "/proc/driver/nvidia/gpus")
    if not os.path.isdir(gpus_dir):
        wsl = _wsl_discovery(root)
        if wsl is not None:
            return wsl
        raise DirectError(
            f"no NVIDIA driver found: {gpus_dir} does not exist",
            "load the NVIDIA kernel module (modprobe nvidia), or set driver-root in the"
            " [nvidia-container-runtime] table of config.toml to where the driver lives",
        )
    gpus = _read_gpus(gpus_dir)
    nodes, problems = _read_nodes(root, gpus)
    version = _driver_version(root)
    files, source = _driver_files(root, version, ldcache)
    return Discovery(
        driver_root=root,
        driver_version=version,
        gpus=gpus,
        nodes=nodes,
        files=files,
        problems=problems,
        library_source=source,
    )


def _wsl_discovery(root: str) -> Discovery | None:
    """WSL2's driver (/dev/dxg and the Windows driver store) where `root` is a WSL2 guest."""
    from nvdocker2.direct.wsl import discover_wsl, is_wsl

    return discover_wsl(root) if is_wsl(root) else None


def parse_information(text: str) -> dict[str, str]:
    """`Key: value` lines of a GPU information file (values may hold colons)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _read_gpus(gpus_dir: str) -> tuple[Gpu, ...]:
    found = []
    for entry in sorted(os.listdir(gpus_dir)):
        info_path = os.path.join(gpus_dir, entry, "information")
        try:
            with open(info_path, encoding="utf-8", errors="replace") as f:
                fields = parse_information(f.read())
        except OSError as err:
            raise DirectError(f"cannot read {info_path}: {err.strerror}") from err
        try:
            minor = int(fields["Device Minor"])
            uuid = fields["GPU UUID"]
        except (KeyError, ValueError) as err:
            raise DirectError(
                f"{info_path} has no valid 'Device Minor' and 'GPU UUID' lines",
                "check that the NVIDIA kernel module matches the driver",
            ) from err
        bus = fields.get("Bus Location", entry).lower()
        found.append((bus, minor, uuid, fields.get("Model", "")))
    found.sort()
    return tuple(
        Gpu(index=i, minor=minor, uuid=uuid, bus_id=bus, model=model)
        for i, (bus, minor, uuid, model) in enumerate(found)
    )


def _read_nodes(
    root: str, gpus: tuple[Gpu, ...]
) -> tuple[tuple[DeviceNode, ...], tuple[tuple[str, str], ...]]:
    nodes = []
    problems = []
    paths = [g.node_path for g in gpus] + [f"/dev/{name}" for name in CONTROL_NODES]
    for path in paths:
        node, problem = char_node(root, path)
        if node is None:
            problems.append((path, problem))
        else:
            nodes.append(node)
    return tuple(nodes), tuple(problems)


def char_node(root: str, path: str) -> tuple[DeviceNode | None, str]:
    """The character device at `path` under `root`, or (None, what is wrong)."""
    where = host_path(root, path)
    try:
        st = os.stat(where)
    except FileNotFoundError:
        return None, f"{where} does not exist"
    except OSError as err:
        return None, f"cannot stat {where}: {err.strerror}"
    if not stat.S_ISCHR(st.st_mode):
        return None, f"{where} is not a character device"
    node = DeviceNode(
        path=path,
        host_path=where,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        file_mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
    )
    return node, ""


def _driver_version(root: str) -> str | None:
    try:
        with open(host_path(root, "/proc/driver/nvidia/version"), encoding="utf-8") as f:
            return kernel_module_version(f.read())
    except OSError:
        return None


def _multiarch() -> str:
    machine = os.uname().machine.lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine) + "-linux-gnu"


def _library_dirs(compat32: bool) -> tuple[str, ...]:
    if compat32:
        return ("/usr/lib/i386-linux-gnu", "/usr/lib32", "/lib/i386-linux-gnu", "/lib32")
    triplet = _multiarch()
    return (f"/usr/lib/{triplet}", "/usr/lib64", f"/lib/{triplet}", "/lib64", "/usr/lib", "/lib")


def _candidates(root: str, ldcache: str = "/etc/ld.so.cache"
                ) -> tuple[list[tuple[str, str, bool]], str]:
    """(name, in-root path, is 32-bit) in the loader's order, and where they came from."""
    cache_path = host_path(root, ldcache)
    try:
        with open(cache_path, "rb") as f:
            entries = parse_ld_cache(f.read())
    except (OSError, LdCacheError):
        entries = None
    if entries is not None:
        native = native_arch_flags()
        out = []
        for e in entries:
            kind = _cache_kind(e, native)
            if kind is not None:
                out.append((e.name, e.path, kind))
        return out, cache_path
    out = []
    for compat32 in (False, True):
        for d in _library_dirs(compat32):
            try:
                real = resolve_in_root(root, d, follow_final=True, refuse_escape=False)
                names = sorted(os.listdir(host_path(root, real)))
            except (OSError, UnsafePath):
                continue
            out.extend((n, f"{d}/{n}", compat32) for n in names if ".so" in n)
    return out, "library directories"


def _cache_kind(entry: CacheEntry, native: int | None) -> bool | None:
    """False for a native library, True for a 32-bit one (x86_64 only), None to skip."""
    if not entry.is_elf:
        return None
    arch = entry.flags & FLAG_REQUIRED_MASK
    if native is None or arch == native:
        return False
    if arch == 0 and native_arch_flags("x86_64") == native:
        return True
    return None


def _driver_files(root: str, version: str | None, ldcache: str = "/etc/ld.so.cache"
                  ) -> tuple[tuple[DriverFile, ...], str]:
    candidates, source = _candidates(root, ldcache)
    by_base: dict[str, list[tuple[str, str, bool]]] = {}
    for cand in candidates:
        head, sep, _ = cand[0].partition(".so")
        if sep:
            by_base.setdefault(head + ".so", []).append(cand)
    files: list[DriverFile] = []
    for capability, bases in LIBRARIES.items():
        for base in bases:
            for compat32 in (False, True):
                files.extend(
                    _library(root, version, by_base.get(base, []), capability, base, compat32)
                )
    for capability, names in BINARIES.items():
        for name in names:
            f = _binary(root, capability, name)
            if f is not None:
                files.append(f)
    return tuple(files), source


def _library(
    root: str,
    version: str | None,
    candidates: list[tuple[str, str, bool]],
    capability: str,
    base: str,
    compat32: bool,
) -> list[DriverFile]:
    # First entry per name wins, as for the loader; names resolving to one file share it.
    seen_names: set[str] = set()
    by_real: dict[str, list[str]] = {}
    for name, path, is32 in candidates:
        if is32 != compat32 or name in seen_names:
            continue
        if name != base and not name.startswith(base + "."):
            continue
        seen_names.add(name)
        real = resolve_in_root(root, path, follow_final=True, refuse_escape=False)
        real_host = host_path(root, real)
        if not os.path.isfile(real_host):
            continue
        found = file_version(real)
        if version and found and found != version and base not in OWN_VERSIONS:
            continue  # left over from another driver version
        by_real.setdefault(real, []).append(name)
    out = []
    for real, names in by_real.items():
        real_name = os.path.basename(real)
        links = tuple(
            sorted(
                n
                for n in set(names)
                if n != real_name and n.startswith(base + ".") and _digits(n[len(base) + 1:])
            )
        )
        out.append(
            DriverFile(
                path=real,
                host_path=host_path(root, real),
                links=links,
                kind="lib",
                capability=capability,
                compat32=compat32,
            )
        )
        break  # one file per library: the one the loader would pick
    return out


def _binary(root: str, capability: str, name: str) -> DriverFile | None:
    for d in BIN_DIRS:
        path = f"{d}/{name}"
        try:
            real = resolve_in_root(root, path, follow_final=True, refuse_escape=False)
        except UnsafePath:
            continue  # a file on the way where a folder should be, or a symlink loop
        real_host = host_path(root, real)
        if os.path.isfile(real_host):
            return DriverFile(
                path=path, host_path=real_host, links=(), kind="bin", capability=capability
            )
    return None


# MIG (Multi-Instance GPU): the driver lists each GPU instance and compute instance as a
# capability under /proc/driver/nvidia/capabilities (gpuN, N the GPU's minor), and the minor of
# the /dev/nvidia-caps/nvidia-capM node that grants it in /proc/driver/nvidia-caps/mig-minors.
CAPABILITIES_DIR = "/proc/driver/nvidia/capabilities"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
CAPS_NODE = "/dev/nvidia-caps/nvidia-cap{}"
IMEX_DIR = "/dev/nvidia-caps-imex-channels"
MAX_IMEX_CHANNEL = (1 << 20) - 1  # a channel is the minor of a dev_t (NVIDIA's bound)


class MigDevice(Record):
    """A compute instance `ci` of GPU instance `gi` on `gpu`: `nodes` are the caps nodes of
    both (empty with `problem` set when one is missing); `index` and `uuid` are NVIDIA's
    names (`GPU:index`, `MIG-...`), known once NVML was asked (`nvdocker2.direct.nvml`)."""

    gpu: Gpu
    gi: int
    ci: int
    nodes: tuple[DeviceNode, ...]
    problem: str = ""
    index: int | None = None
    uuid: str | None = None

    @property
    def name(self) -> str:
        return f"gpu{self.gpu.minor}/gi{self.gi}/ci{self.ci}"


class MigLayout(Record):
    """Every MIG device of the host, and the `mig/config` and `mig/monitor` caps nodes."""

    devices: tuple[MigDevice, ...]
    config: DeviceNode | None
    monitor: DeviceNode | None
    problems: tuple[str, ...]


def read_mig_minors(root: str) -> dict[str, int]:
    """`/proc/driver/nvidia-caps/mig-minors` as {capability: minor}; {} when there is none."""
    try:
        with open(host_path(root, MIG_MINORS), encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    minors = {}
    for line in text.splitlines():
        name, _, minor = line.strip().partition(" ")
        if minor.isascii() and minor.isdigit():
            minors[name] = int(minor)
    return minors


def discover_mig(discovery: Discovery) -> MigLayout:
    """The MIG devices of the discovered GPUs (a listing per GPU, no NVML)."""
    root = discovery.driver_root
    minors = read_mig_minors(root)
    problems: list[str] = []
    devices: list[MigDevice] = []
    for gpu in discovery.gpus:
        mig_dir = f"{CAPABILITIES_DIR}/gpu{gpu.minor}/mig"
        for gi in _instances(root, mig_dir, "gi"):
            gi_cap = f"gpu{gpu.minor}/gi{gi}/access"
            for ci in _instances(root, f"{mig_dir}/gi{gi}", "ci"):
                nodes = []
                problem = ""
                for cap in (gi_cap, f"gpu{gpu.minor}/gi{gi}/ci{ci}/access"):
                    node, problem = _caps_node(root, minors, cap)
                    if node is None:
                        break
                    nodes.append(node)
                if problem:
                    problems.append(problem)
                    nodes = []
                devices.append(MigDevice(gpu=gpu, gi=gi, ci=ci, nodes=tuple(nodes),
                                         problem=problem))
    shared = []
    for cap in ("config", "monitor"):
        node = None
        if os.path.isfile(host_path(root, f"{CAPABILITIES_DIR}/mig/{cap}")):
            node, problem = _caps_node(root, minors, cap)
            if problem:
                problems.append(problem)
        shared.append(node)
    return MigLayout(devices=tuple(devices), config=shared[0], monitor=shared[1],
                     problems=tuple(problems))


def _instances(root: str, folder: str, prefix: str) -> list[int]:
    """The ids of `giN`/`ciN` entries of `folder` that have an `access` file, in order."""
    try:
        names = os.listdir(host_path(root, folder))
    except OSError:
        return []
    ids = []
    for name in names:
        if name.startswith(prefix) and _digits(name[len(prefix):]) and os.path.isfile(
                host_path(root, f"{folder}/{name}/access")):
            ids.append(int(name[len(prefix):]))
    return sorted(ids)


def _caps_node(root: str, minors: dict[str, int], cap: str) -> tuple[DeviceNode | None, str]:
    if cap not in minors:
        return None, f"MIG capability {cap} is not in {host_path(root, MIG_MINORS)}"
    minor = minors[cap]
    node, problem = char_node(root, CAPS_NODE.format(minor))
    if node is None:
        return None, f"MIG capability {cap}: {problem}"
    if node.minor != minor:
        return None, (f"MIG capability {cap}: {node.host_path} has minor {node.minor},"
                      f" not {minor} as {MIG_MINORS} says")
    return node, ""


def imex_channels(root: str) -> tuple[tuple[int, DeviceNode], ...]:
    """The IMEX channel nodes `/dev/nvidia-caps-imex-channels/channelN` there are, by N."""
    try:
        names = os.listdir(host_path(root, IMEX_DIR))
    except OSError:
        return ()
    found = []
    for name in names:
        number = name[len("channel"):]
        if name.startswith("channel") and number.isascii() and number.isdigit():
            node, _ = char_node(root, f"{IMEX_DIR}/channel{int(number)}")
            if node is not None and node.path == f"{IMEX_DIR}/{name}":
                found.append((int(number), node))
    return tuple(sorted(found, key=lambda item: item[0]))
