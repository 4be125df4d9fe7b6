"""The OCI spec edits of direct mode (reference §7), computed in full before anything is written.

`direct_edit` takes a bundle's config.json (as a dict), the resolved request (device ids or
"all", capabilities) and the driver root, and returns a new dict: the GPU device nodes and
control nodes in `linux.devices` with `rwm` allow rules in `linux.resources.devices`, the
driver files as read-only bind mounts at their own paths, and one `createContainer` hook
that is this runtime in its hook role (soname links, then the host's `ldconfig -r ROOTFS`).
It raises `DirectError` on an unknown id, a missing driver, a node that is not a character
device, or an image symlink that would carry a mount elsewhere; the input is never changed,
so the caller writes config.json once or not at all.
"""

from __future__ import annotations

import copy
import os

from nvdocker2.direct.discover import (
    CONTROL_NODES,
    IMEX_DIR,
    REQUIRED_NODES,
    DeviceNode,
    Discovery,
    DriverFile,
    Gpu,
    MigDevice,
    MigLayout,
    char_node,
    discover,
    discover_mig,
    imex_channels,
)
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.hook import HOOK_ACTION, HOOK_ENV, HOOK_SUBCOMMAND
from nvdocker2.direct.rootfs import resolve_in_root, rootfs_of
from nvdocker2.toolkit_schema import Record

TYPE_CHECKING = False  # typing and dataclasses cost every direct-mode create milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any, Union

    Devices = Union[str, Sequence[str]]

MOUNT_OPTIONS = ("nosuid", "nodev", "bind", "ro")
DEFAULT_LDCONFIG = "/sbin/ldconfig"

# Libraries a capability cannot work without: missing ones fail `create`.
REQUIRED_LIBRARIES = {"compute": "libcuda.so", "utility": "libnvidia-ml.so"}
# Capabilities that bring more than libraries (nvdocker2.direct.graphics, imported for them only).
GRAPHICS_CAPABILITIES = frozenset(("graphics", "display", "ngx"))


class Plan(Record):
    """What a container gets: GPUs, device nodes (GPU, MIG caps, IMEX, control), driver
    files, the MIG devices whose nodes are among them, and links as (link, absolute target)
    beside the soname links (WSL2's /usr/bin/nvidia-smi)."""

    gpus: tuple[Gpu, ...]
    nodes: tuple[DeviceNode, ...]
    files: tuple[DriverFile, ...]
    links: tuple[tuple[str, str], ...] = ()
    migs: tuple[MigDevice, ...] = ()


def host_ldconfig(setting: str | None) -> str:
    """The host ldconfig to run from a config value like "@/sbin/ldconfig".

    The "@" prefix means "on the host" for libnvidia-container; direct mode never runs a
    binary from the image, so the path is always taken on the host and must be absolute.
    """
    path = (setting or DEFAULT_LDCONFIG).lstrip("@")
    if not os.path.isabs(path):
        raise DirectError(
            f"ldconfig path {setting!r} is not absolute",
            'set [nvidia-container-cli] ldconfig = "@/sbin/ldconfig" in config.toml',
        )
    return path


def select_gpus(discovery: Discovery, devices: Devices) -> tuple[Gpu, ...]:
    """The GPUs named by `devices`: "all", or ids (index, GPU UUID or unique UUID prefix).

    Indices count GPUs in PCI bus order, as NVML and nvidia-smi do. "none" and an empty list
    select no GPU. MIG ids (`MIG-...`, `GPU:MIG`) are `select_migs`'s and refused here.
    """
    ids = [devices] if isinstance(devices, str) else list(devices)
    if "all" in ids:
        return discovery.gpus
    chosen: list[Gpu] = []
    for raw in ids:
        ident = raw.strip()
        if ident in ("", "none"):
            continue
        gpu = _find_gpu(discovery, ident)
        if gpu not in chosen:
            chosen.append(gpu)
    return tuple(chosen)


def _find_gpu(discovery: Discovery, ident: str) -> Gpu:
    gpus = discovery.gpus
    listing = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
    hint = f"this host's GPUs: {listing}"
    if is_mig_id(ident):
        raise DirectError(f"NVIDIA_VISIBLE_DEVICES: {ident!r} names a MIG device, not a GPU",
                          hint)
    if ident.isdigit():
        index = int(ident)
        if index < len(gpus):
            return gpus[index]
        raise DirectError(
            f"NVIDIA_VISIBLE_DEVICES: unknown GPU index {ident} (this host has {len(gpus)})", hint
        )
    if ident.upper().startswith("GPU-"):
        matches = [g for g in gpus if g.uuid.lower().startswith(ident.lower())]
        exact = [g for g in matches if g.uuid.lower() == ident.lower()]
        if exact:
            return exact[0]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise DirectError(
                f"NVIDIA_VISIBLE_DEVICES: GPU UUID prefix {ident!r} is ambiguous", hint
            )
        raise DirectError(f"NVIDIA_VISIBLE_DEVICES: unknown GPU UUID {ident!r}", hint)
    raise DirectError(f"NVIDIA_VISIBLE_DEVICES: invalid device id {ident!r}", hint)


def is_mig_id(ident: str) -> bool:
    """A MIG device id: a `MIG-` UUID or `GPU:MIG` indices."""
    return ident.upper().startswith("MIG-") or (
        ":" in ident and not ident.upper().startswith("GPU-"))


def select_migs(discovery: Discovery, layout: MigLayout, ids: Sequence[str],
                source: str = "NVIDIA_VISIBLE_DEVICES") -> tuple[MigDevice, ...]:
    """The MIG devices named by `ids` (`MIG-` UUIDs, `GPU:MIG` as NVML numbers them), named
    by NVML; raise `DirectError` for one that does not exist or lacks its caps nodes."""
    named = name_migs(discovery, layout)
    listing = ", ".join(f"{d.gpu.index}:{d.index} ({d.uuid})" for d in named) or "none"
    chosen: list[MigDevice] = []
    for ident in ids:
        gpu, colon, mig = ident.partition(":")
        if colon:
            found = [d for d in named if str(d.gpu.index) == gpu and str(d.index) == mig]
        else:
            found = [d for d in named if (d.uuid or "").lower() == ident.lower()]
        if not found:
            raise DirectError(f"{source}: unknown MIG device {ident!r}",
                              f"this host's MIG devices: {listing}")
        if found[0].problem:
            raise DirectError(
                f"{source}: MIG device {ident!r} ({found[0].name}): {found[0].problem}",
                "nvidia-modprobe -f creates the /dev/nvidia-caps nodes; check the NVIDIA"
                " driver installation",
            )
        if found[0] not in chosen:
            chosen.append(found[0])
    return tuple(chosen)


def name_migs(discovery: Discovery, layout: MigLayout) -> tuple[MigDevice, ...]:
    """The layout's MIG devices with NVIDIA's index and UUID (asked of libnvidia-ml), in
    NVIDIA's order; one NVML does not report is left out."""
    if not layout.devices:
        return ()
    from nvdocker2.direct.nvml import mig_names

    libs = [f for f in discovery.files_for({"utility"})
            if os.path.basename(f.path).startswith("libnvidia-ml.so.") and not f.compat32]
    if not libs:
        raise DirectError(
            f"libnvidia-ml.so not found under driver root {discovery.driver_root}: MIG devices"
            " are named through it",
            "install the NVIDIA driver's user-space libraries, or fix driver-root in config.toml",
        )
    names = mig_names(libs[0].host_path)
    named = []
    for d in layout.devices:
        index_uuid = names.get((d.gpu.minor, d.gi, d.ci))
        if index_uuid is not None:
            named.append(d.replace(index=index_uuid[0], uuid=index_uuid[1]))
    return tuple(sorted(named, key=lambda d: (d.gpu.index, d.index)))


def _mig_nodes(discovery: Discovery, migs: Iterable[MigDevice]) -> list[DeviceNode]:
    nodes: list[DeviceNode] = []
    for d in migs:
        if d.problem:
            raise DirectError(f"MIG device {d.name}: {d.problem}",
                              "nvidia-modprobe -f creates the /dev/nvidia-caps nodes")
        parent = _node(discovery, d.gpu.node_path, required=True)
        nodes.extend(n for n in (parent, *d.nodes) if n is not None)
    return nodes


def _mig_admin_nodes(discovery: Discovery, layout: MigLayout | None, which: str,
                     devices: Devices) -> list[DeviceNode]:
    """The `mig/config` or `mig/monitor` caps node and the GPUs it is asked for."""
    node = getattr(layout, which) if layout is not None else None
    env = {"config": "NVIDIA_MIG_CONFIG_DEVICES", "monitor": "NVIDIA_MIG_MONITOR_DEVICES"}[which]
    if node is None:
        problems = "; ".join(layout.problems) if layout is not None else ""
        raise DirectError(f"{env}: this host has no MIG {which} capability"
                          + (f" ({problems})" if problems else ""),
                          "MIG needs a MIG-capable GPU and driver; nvidia-smi mig -lgi shows it")
    ids = [devices] if isinstance(devices, str) else list(devices)
    gpus = select_gpus(discovery, ids)
    return [node, *(n for n in (_node(discovery, g.node_path, required=True) for g in gpus)
                    if n is not None)]


def _imex_nodes(discovery: Discovery, channels: Devices) -> list[DeviceNode]:
    root = discovery.driver_root
    if channels == "all":
        return [node for _, node in imex_channels(root)]
    if isinstance(channels, str):  # "none"
        return []
    nodes = []
    for channel in channels:
        node, problem = char_node(root, f"{IMEX_DIR}/channel{channel}")
        if node is None:
            there = ", ".join(str(n) for n, _ in imex_channels(root)) or "none"
            raise DirectError(f"NVIDIA_IMEX_CHANNELS: no IMEX channel {channel} ({problem})",
                              f"this host's IMEX channels: {there}")
        nodes.append(node)
    return nodes


def make_plan(
    discovery: Discovery,
    devices: Devices,
    capabilities: Iterable[str],
    *,
    mig_config: Devices | None = None,
    mig_monitor: Devices | None = None,
    imex: Devices | None = None,
    gated: Iterable[str] = (),
) -> Plan:
    """Resolve the request against the discovery; raise `DirectError` on anything missing.

    MIG devices are looked for only when `devices` is "all", names one, or `mig_config` /
    `mig_monitor` is asked; NVML only when one is named. IMEX channels only when `imex` is.
    `gated` names feature gates (nvdocker2.direct.gated: "gds", "mofed", ...) whose nodes
    there are are added.
    """
    caps = frozenset(capabilities)
    if discovery.wsl is not None:
        from nvdocker2.direct.wsl import wsl_plan

        return wsl_plan(discovery, devices, caps)
    ids = [devices] if isinstance(devices, str) else list(devices)
    mig_ids = [i for i in ids if is_mig_id(i)]
    gpus = select_gpus(discovery, [i for i in ids if not is_mig_id(i)])
    nodes = [_node(discovery, g.node_path, required=True) for g in gpus]
    migs: tuple[MigDevice, ...] = ()
    layout = None
    if "all" in ids or mig_ids or mig_config is not None or mig_monitor is not None:
        layout = discover_mig(discovery)
        migs = layout.devices if "all" in ids else select_migs(discovery, layout, mig_ids)
        nodes.extend(_mig_nodes(discovery, migs))
    if mig_config is not None:
        nodes.extend(_mig_admin_nodes(discovery, layout, "config", mig_config))
    if mig_monitor is not None:
        nodes.extend(_mig_admin_nodes(discovery, layout, "monitor", mig_monitor))
    if imex is not None:
        nodes.extend(_imex_nodes(discovery, imex))
    if gated:
        from nvdocker2.direct.gated import gated_nodes

        nodes.extend(gated_nodes(discovery.driver_root, gated))
    for name in CONTROL_NODES:
        node = _node(discovery, f"/dev/{name}", required=name in REQUIRED_NODES)
        if node is not None:
            nodes.append(node)
    files = discovery.files_for(caps)
    for cap, base in REQUIRED_LIBRARIES.items():
        if cap in caps and not any(
            f.kind == "lib" and not f.compat32 and os.path.basename(f.path).startswith(base + ".")
            for f in files
        ):
            raise DirectError(
                f"{base} not found under driver root {discovery.driver_root}"
                f" ({discovery.library_source}), needed for the {cap} capability",
                "install the NVIDIA driver's user-space libraries, or fix driver-root in"
                " config.toml",
            )
    links: tuple[tuple[str, str], ...] = ()
    if caps & GRAPHICS_CAPABILITIES:
        from nvdocker2.direct.graphics import graphics_additions

        dri, more, links = graphics_additions(discovery, caps, gpus)
        nodes.extend(dri)
        files = files + more
    unique: dict[str, DeviceNode] = {}
    for n in nodes:
        if n is not None and n.path not in unique:
            unique[n.path] = n
    return Plan(gpus=gpus, nodes=tuple(unique.values()), files=files, links=links, migs=migs)


def _node(discovery: Discovery, path: str, *, required: bool) -> DeviceNode | None:
    node = discovery.node(path)
    if node is not None:
        return node
    problem = discovery.problem(path) or f"{path} was not found"
    if required or "not a character device" in problem:
        raise DirectError(
            f"device {path}: {problem}",
            "check the NVIDIA driver installation (nvidia-modprobe creates the device nodes)",
        )
    return None


def hook_entry(
    runtime_path: str, ldconfig: str, links: Sequence[str], folders: Sequence[str],
    cuda_compat: str | None = None,
) -> dict[str, Any]:
    """The createContainer hook: this runtime in its hook role, with a clean environment;
    `cuda_compat`: the driver version the hook holds an image's CUDA compat libcuda against
    (CDI specs, which are the same for every image)."""
    args = [os.path.basename(runtime_path), HOOK_SUBCOMMAND, HOOK_ACTION, "--ldconfig", ldconfig]
    for link in links:
        args += ["--link", link]
    for folder in folders:
        args += ["--folder", folder]
    if cuda_compat:
        args += ["--cuda-compat", cuda_compat]
    return {"path": runtime_path, "args": args, "env": list(HOOK_ENV)}


def edit_spec(
    spec: dict[str, Any], plan: Plan, rootfs: str, *, runtime_path: str, ldconfig: str,
    first_folders: Sequence[str] = (),
) -> dict[str, Any]:
    """A copy of `spec` with the plan applied; `spec` itself is left as it was.
    `first_folders` come before the driver's in the ld cache update (CUDA forward compat)."""
    new = copy.deepcopy(spec)
    linux = _obj(new, "linux", "linux")
    devices = _arr(linux, "devices", "linux.devices")
    resources = _obj(linux, "resources", "linux.resources")
    rules = _arr(resources, "devices", "linux.resources.devices")
    mounts = _arr(new, "mounts", "mounts")

    present = {d.get("path") for d in devices if isinstance(d, dict)}
    for n in plan.nodes:
        if n.path not in present:
            devices.append(
                {
                    "path": n.path,
                    "type": "c",
                    "major": n.major,
                    "minor": n.minor,
                    "fileMode": n.file_mode,
                    "uid": n.uid,
                    "gid": n.gid,
                }
            )
        rules.append(
            {"allow": True, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"}
        )

    taken = {m.get("destination") for m in mounts if isinstance(m, dict)}
    links: list[str] = []
    folders: list[str] = list(first_folders)
    for f in plan.files:
        dest = resolve_in_root(rootfs, f.path, follow_final=False, refuse_escape=True)
        if dest in taken:
            continue  # the user's own mount there wins
        if os.path.isdir(os.path.join(rootfs, dest.lstrip("/"))):  # no symlink left in dest
            raise DirectError(
                f"{dest} in the container image is a directory; cannot mount the driver file"
                " there",
                f"remove it from the image, or do not request the {f.capability} capability",
            )
        taken.add(dest)
        mounts.append(
            {
                "destination": dest,
                "type": "bind",
                "source": f.host_path,
                "options": list(MOUNT_OPTIONS),
            }
        )
        if f.kind == "lib":
            folder = os.path.dirname(dest)
            if folder not in folders:
                folders.append(folder)
            links.extend(f"{folder}/{name}::{os.path.basename(dest)}" for name in f.links)
    links.extend(f"{link}::{target}" for link, target in plan.links)

    if folders or plan.links:
        hooks = _obj(new, "hooks", "hooks")
        create = _arr(hooks, "createContainer", "hooks.createContainer")
        create.append(hook_entry(runtime_path, ldconfig, links, folders))
    return new


def direct_edit(
    spec: dict[str, Any],
    bundle: str,
    devices: Devices,
    capabilities: Iterable[str],
    *,
    driver_root: str = "/",
    runtime_path: str,
    ldconfig: str | None = None,
    mig_config: Devices | None = None,
    mig_monitor: Devices | None = None,
    imex: Devices | None = None,
    gated: Iterable[str] = (),
) -> dict[str, Any]:
    """Discover, resolve, and return the edited spec (or raise `DirectError`, changing nothing)."""
    discovery = discover(driver_root)
    caps = frozenset(capabilities)
    plan = make_plan(discovery, devices, caps, mig_config=mig_config,
                     mig_monitor=mig_monitor, imex=imex, gated=gated)
    rootfs = rootfs_of(spec, bundle)
    return edit_spec(
        spec,
        plan,
        rootfs,
        runtime_path=runtime_path,
        ldconfig=host_ldconfig(ldconfig),
        first_folders=_cuda_compat(rootfs, discovery, caps),
    )


def _cuda_compat(rootfs: str, discovery: Discovery, caps: frozenset[str]) -> tuple[str, ...]:
    """The image's CUDA forward-compat folder where its libcuda is newer than the driver
    (nvdocker2.direct.compat, read only for images with /usr/local/cuda)."""
    if "compute" not in caps or discovery.wsl is not None or not os.path.lexists(
            os.path.join(rootfs, "usr/local/cuda")):
        return ()
    from nvdocker2.direct.compat import compat_folder

    folder = compat_folder(rootfs, discovery.driver_version)
    return (folder,) if folder else ()


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise DirectError(f"config.json: {where} is not an object")
    return value


def _arr(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    value = parent.setdefault(key, [])
    if value is None:
        value = parent[key] = []
    if not isinstance(value, list):
        raise DirectError(f"config.json: {where} is not an array")
    return value
