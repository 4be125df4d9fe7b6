"""Feature-gated devices: GPUDirect Storage, MOFED (RDMA), gdrcopy and NVSwitch.

NVIDIA's toolkit adds these only when the container's environment sets the gate to exactly
`enabled` (`NVIDIA_GDS=enabled`, ...; internal/modifier/cdi.go `gatedDevices`): any other
value, `Enabled`, `true` or `enabled;x` included, means off. Each gate brings the character
devices that match its patterns under /dev (internal/discover/{gds,mofed,gdrcopy,nvswitch}.go),
only those that exist; none of them is in a GPU's or `all`'s nodes (NVIDIA's management
spec blocks `nvidia-fs*`, `nvidia-nvswitch*` and `nvidia-nvlink` too). In CDI specs each gate
is a spec of its own kind with one device `all` (`nvidia.com/gds=all`, as
`nvidia-ctk cdi generate --mode gds --class gds` names it). Stdlib only: this runs on every
container start.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable

from nvdocker2.direct.discover import DeviceNode, char_node, host_path

# gate -> the /dev patterns of its nodes, in NVIDIA's order (which environment variable turns
# each on is nvdocker2.hook.request's GATE_ENVS: the request is decided there)
GATES: dict[str, tuple[str, ...]] = {
    "gds": ("/dev/nvidia-fs*",),
    "mofed": ("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"),
    "gdrcopy": ("/dev/gdrdrv",),
    "nvswitch": ("/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*"),
}


def gated_nodes(root: str, gates: Iterable[str]) -> list[DeviceNode]:
    """The character devices the `gates` bring under driver root `root`, each once, in
    pattern order (names sorted within a pattern); what is missing or not a character
    device is left out, as NVIDIA's char-device discoverer does."""
    nodes: list[DeviceNode] = []
    seen: set[str] = set()
    for gate in gates:
        for pattern in GATES[gate]:
            for path in _matches(root, pattern):
                node, _ = char_node(root, path)
                if node is not None and path not in seen:
                    seen.add(path)
                    nodes.append(node)
    return nodes


def _matches(root: str, pattern: str) -> list[str]:
    """The in-root paths of the entries of the pattern's folder its last part matches
    (only the last part is a pattern; the entries are never followed into)."""
    folder, part = os.path.split(pattern)
    if not any(c in part for c in "*?["):
        return [pattern]
    try:
        names = os.listdir(host_path(root, folder))
    except OSError:
        return []
    return [f"{folder}/{name}" for name in sorted(names) if fnmatch.fnmatchcase(name, part)]
