"""`nvdocker2 cdi generate`: a CDI spec (Container Device Interface) from the same discovery.

Runtimes with CDI support (containerd, CRI-O, podman, Docker >= 25) can then give GPUs with
`--device nvidia.com/gpu=0` and need neither libnvidia-container nor this runtime's `create`
path. The spec names each GPU by index and by UUID, each MIG device as NVIDIA does (`0:1`,
`MIG-<uuid>`: the parent GPU's node and the caps nodes of its GPU and compute instance), plus
`all` (on WSL2 only `all`, with /dev/dxg); the driver files, control nodes and the ld-cache
hook (this runtime in its hook role) are common edits. IMEX channels are a spec of their own
kind, `nvidia.com/imex-channel=N` (`imex_spec`), and so is each feature gate's device
`all` (`nvidia.com/gds=all`, `mofed`, `gdrcopy`, `nvswitch`: `gated_spec`). The output is
YAML (written here, no YAML library) or JSON when the file name ends in `.json`; CDI reads
both. Stdlib only, like the rest of direct mode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from nvdocker2.direct.cdi_versions import GENERATED_FLOOR, minimum_version
from nvdocker2.direct.discover import (
    ALL_CAPABILITIES,
    DeviceNode,
    Discovery,
    MigLayout,
    imex_channels,
)
from nvdocker2.direct.gated import GATES, gated_nodes
from nvdocker2.direct.spec import MOUNT_OPTIONS, Plan, hook_entry, make_plan, name_migs

DRI_CAPABILITIES = frozenset(("graphics", "display"))  # as nvdocker2.direct.graphics's

CDI_KIND = "nvidia.com/gpu"
IMEX_KIND = "nvidia.com/imex-channel"
CLASSES = {"gpu": CDI_KIND, "imex-channel": IMEX_KIND}  # NVIDIA's `--class` names
CLASSES.update({gate: f"nvidia.com/{gate}" for gate in GATES})  # `--mode GATE --class GATE`
DEFAULT_OUTPUT = "/etc/cdi/nvidia.yaml"
IMEX_OUTPUT = "/etc/cdi/nvidia-imex-channel.yaml"


def class_output(device_class: str) -> str:
    """Where `cdi generate --class CLASS` writes by default."""
    return DEFAULT_OUTPUT if device_class == "gpu" else f"/etc/cdi/nvidia-{device_class}.yaml"


def _node(node: DeviceNode, driver_root: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": node.path}
    if driver_root != "/":
        entry["hostPath"] = node.host_path
    entry.update({"type": "c", "major": node.major, "minor": node.minor})
    return entry


def cdi_spec(
    discovery: Discovery,
    *,
    runtime_path: str,
    ldconfig: str,
    capabilities: Iterable[str] = tuple(c for c in ALL_CAPABILITIES if c != "compat32"),
) -> dict[str, Any]:
    """The CDI spec as a dict; raises `DirectError` where `create` would fail too."""
    capabilities = tuple(capabilities)
    plan = make_plan(discovery, "all", capabilities)
    root = discovery.driver_root
    by_path = {n.path: n for n in plan.nodes}
    gpu_paths = {g.node_path for g in plan.gpus}
    for m in plan.migs:
        gpu_paths.update(n.path for n in m.nodes)
    devices = []
    all_nodes = []
    dri = _dri_by_gpu(discovery, plan, capabilities)
    for g in plan.gpus:
        own = [by_path[g.node_path], *dri.get(g.index, ())]
        gpu_paths.update(n.path for n in own)
        all_nodes.extend(own)
        edits = {"deviceNodes": [_node(n, root) for n in own]}
        devices.append({"name": str(g.index), "containerEdits": edits})
        devices.append({"name": g.uuid, "containerEdits": edits})
    for m in name_migs(discovery, MigLayout(plan.migs, None, None, ())):
        nodes = [by_path[m.gpu.node_path], *m.nodes]
        edits = {"deviceNodes": [_node(n, root) for n in nodes]}
        devices.append({"name": f"{m.gpu.index}:{m.index}", "containerEdits": edits})
        devices.append({"name": str(m.uuid), "containerEdits": edits})
        all_nodes.extend(n for n in nodes if n not in all_nodes)
    if discovery.wsl is not None:
        # WSL2: every GPU through /dev/dxg, one device `all` (NVIDIA's WSL spec).
        gpu_paths = {n.path for n in plan.nodes}
        all_nodes = list(plan.nodes)
    if all_nodes:
        devices.append(
            {"name": "all", "containerEdits": {"deviceNodes": [_node(n, root) for n in all_nodes]}}
        )
    mounts = []
    links = []
    folders: list[str] = []
    for f in plan.files:
        mounts.append(
            {"hostPath": f.host_path, "containerPath": f.path, "options": list(MOUNT_OPTIONS)}
        )
        if f.kind == "lib":
            folder = os.path.dirname(f.path)
            if folder not in folders:
                folders.append(folder)
            links.extend(f"{folder}/{n}::{os.path.basename(f.path)}" for n in f.links)
    links.extend(f"{link}::{target}" for link, target in plan.links)
    common: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [_node(n, root) for n in plan.nodes if n.path not in gpu_paths],
        "mounts": mounts,
    }
    if not common["deviceNodes"]:
        del common["deviceNodes"]  # WSL2: /dev/dxg is device `all`'s
    if folders:
        # CUDA forward compatibility, as direct mode gives it at `create`
        compat = discovery.driver_version if "compute" in capabilities and \
            discovery.wsl is None else None
        hook = hook_entry(runtime_path, ldconfig, links, folders, compat)
        common["hooks"] = [{"hookName": "createContainer", **hook}]
    spec = {"cdiVersion": "", "kind": CDI_KIND, "devices": devices, "containerEdits": common}
    # The lowest version that defines what is written: older readers refuse newer ones.
    spec["cdiVersion"] = minimum_version(spec, GENERATED_FLOOR)
    return spec


def _dri_by_gpu(discovery: Discovery, plan: Plan, capabilities: Iterable[str]
                ) -> dict[int, list[DeviceNode]]:
    """Each GPU's /dev/dri nodes, which are its device's edits, not the common ones."""
    if not DRI_CAPABILITIES & frozenset(capabilities):
        return {}
    from nvdocker2.direct.graphics import dri_nodes

    return {g.index: dri_nodes(discovery, (g,)) for g in plan.gpus}


def imex_spec(discovery: Discovery) -> dict[str, Any]:
    """The `nvidia.com/imex-channel` CDI spec: one device per channel node there is (named by
    its number, as NVIDIA's `--class imex-channel` does), plus `all`."""
    root = discovery.driver_root
    channels = imex_channels(root)
    devices = [
        {"name": str(number), "containerEdits": {"deviceNodes": [_node(node, root)]}}
        for number, node in channels
    ]
    if channels:
        devices.append({"name": "all", "containerEdits": {
            "deviceNodes": [_node(node, root) for _, node in channels]}})
    spec = {"cdiVersion": "", "kind": IMEX_KIND, "devices": devices}
    spec["cdiVersion"] = minimum_version(spec, GENERATED_FLOOR)
    return spec


def gated_spec(discovery: Discovery, gate: str) -> dict[str, Any]:
    """The `nvidia.com/GATE` CDI spec of a feature gate: one device `all` with the gate's
    nodes there are (NVIDIA's gated spec), no device when there is none."""
    root = discovery.driver_root
    nodes = gated_nodes(root, (gate,))
    devices = []
    if nodes:
        devices.append({"name": "all", "containerEdits": {
            "deviceNodes": [_node(n, root) for n in nodes]}})
    spec = {"cdiVersion": "", "kind": CLASSES[gate], "devices": devices}
    spec["cdiVersion"] = minimum_version(spec, GENERATED_FLOOR)
    return spec


def render(spec: dict[str, Any], output: str) -> str:
    """The file's text: JSON for a `.json` name, YAML otherwise."""
    if output.endswith(".json"):
        return json.dumps(spec, indent=2) + "\n"
    return dump_yaml(spec)


def dump_yaml(doc: Any) -> str:
    """Block-style YAML for dicts, lists, strings, ints and bools.

    Strings are written as JSON strings, which are valid YAML double-quoted scalars, so
    no value can be misread (`no`, `0:1`, `*`...).
    """
    return "".join(line + "\n" for line in _yaml_lines(doc, 0))


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value == {}:
        return "{}"
    if value == []:
        return "[]"
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or not value


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if _is_scalar(item):
                lines.append(f"{pad}{key}: {_scalar(item)}")
            else:
                lines.append(f"{pad}{key}:")
                lines.extend(_yaml_lines(item, indent + 2))
    elif isinstance(value, list) and value:
        for item in value:
            if _is_scalar(item):
                lines.append(f"{pad}- {_scalar(item)}")
            else:
                sub = _yaml_lines(item, indent + 2)
                sub[0] = f"{pad}- {sub[0][indent + 2:]}"
                lines.extend(sub)
    else:
        lines.append(pad + _scalar(value))
    return lines

