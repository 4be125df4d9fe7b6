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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from nvdocker2.direct.discover import (
    CONTROL_NODES,
    REQUIRED_NODES,
    DeviceNode,
    Discovery,
    DriverFile,
    Gpu,
    discover,
)
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.hook import HOOK_ACTION, HOOK_ENV, HOOK_SUBCOMMAND
from nvdocker2.direct.rootfs import resolve_in_root, rootfs_of

MOUNT_OPTIONS = ("nosuid", "nodev", "bind", "ro")
DEFAULT_LDCONFIG = "/sbin/ldconfig"

# Libraries a capability cannot work without: missing ones fail `create`.
REQUIRED_LIBRARIES = {"compute": "libcuda.so", "utility": "libnvidia-ml.so"}

Devices = Union[str, Sequence[str]]


@dataclass(frozen=True)
class Plan:
    """What a container gets: GPUs, device nodes (GPU and control), driver files, and links
    as (link, absolute target) beside the soname links (WSL2's /usr/bin/nvidia-smi)."""

    gpus: tuple[Gpu, ...]
    nodes: tuple[DeviceNode, ...]
    files: tuple[DriverFile, ...]
    links: tuple[tuple[str, str], ...] = ()


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
    select no GPU. MIG devices are not handled by direct mode and are refused by name.
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
    if ident.upper().startswith("MIG-") or (":" in ident and not ident.upper().startswith("GPU-")):
        raise DirectError(
            f"NVIDIA_VISIBLE_DEVICES: MIG device {ident!r} is not supported in direct mode",
            'use mode = "legacy" in config.toml for MIG devices',
        )
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


def make_plan(discovery: Discovery, devices: Devices, capabilities: Iterable[str]) -> Plan:
    """Resolve the request against the discovery; raise `DirectError` on anything missing."""
    caps = frozenset(capabilities)
    if discovery.wsl is not None:
        from nvdocker2.direct.wsl import wsl_plan

        return wsl_plan(discovery, devices, caps)
    gpus = select_gpus(discovery, devices)
    nodes = [_node(discovery, g.node_path, required=True) for g in gpus]
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
    return Plan(gpus=gpus, nodes=tuple(n for n in nodes if n is not None), files=files)


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
    runtime_path: str, ldconfig: str, links: Sequence[str], folders: Sequence[str]
) -> dict[str, Any]:
    """The createContainer hook: this runtime in its hook role, with a clean environment."""
    args = [os.path.basename(runtime_path), HOOK_SUBCOMMAND, HOOK_ACTION, "--ldconfig", ldconfig]
    for link in links:
        args += ["--link", link]
    for folder in folders:
        args += ["--folder", folder]
    return {"path": runtime_path, "args": args, "env": list(HOOK_ENV)}


def edit_spec(
    spec: dict[str, Any], plan: Plan, rootfs: str, *, runtime_path: str, ldconfig: str
) -> dict[str, Any]:
    """A copy of `spec` with the plan applied; `spec` itself is left as it was."""
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
    folders: list[str] = []
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

    if folders:
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
) -> dict[str, Any]:
    """Discover, resolve, and return the edited spec (or raise `DirectError`, changing nothing)."""
    plan = make_plan(discover(driver_root), devices, capabilities)
    return edit_spec(
        spec,
        plan,
        rootfs_of(spec, bundle),
        runtime_path=runtime_path,
        ldconfig=host_ldconfig(ldconfig),
    )


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
