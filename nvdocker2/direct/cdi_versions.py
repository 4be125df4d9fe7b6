"""Which CDI spec version defines which field, and the lowest version a spec needs.

The facts are those of the CDI library (tags.cncf.io/container-device-interface): each spec
version adds fields, and from library 0.6 on a reader refuses a spec whose `cdiVersion` is
lower than what its content needs (`MinimumRequiredVersion`). `cdi generate` declares
`minimum_version()` of what it writes; `nvdocker2 cdi validate` uses the same tables.
Standard library only: the generator is part of direct mode.
"""

from __future__ import annotations

from typing import Any

# Every spec version the library has released, oldest first.
SPEC_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
                 "1.0.0")

# The version the library reports when no content needs more (its `vEarliest`).
EARLIEST = "0.3.0"

# The lowest version `cdi generate` declares: a spec naming GPUs by index ("0") or giving a
# node's `hostPath` needs it anyway, and every reader in use accepts it.
GENERATED_FLOOR = "0.5.0"

# Object kind -> field -> the spec version that added it (absent: there from the start).
FIELDS: dict[str, dict[str, str]] = {
    "spec": {"cdiVersion": "0.1.0", "kind": "0.1.0", "devices": "0.1.0",
             "containerEdits": "0.1.0", "annotations": "0.6.0"},
    "device": {"name": "0.1.0", "containerEdits": "0.1.0", "annotations": "0.6.0"},
    "containerEdits": {"env": "0.1.0", "deviceNodes": "0.1.0", "hooks": "0.1.0",
                       "mounts": "0.1.0", "intelRdt": "0.7.0", "additionalGids": "0.7.0"},
    "deviceNode": {"path": "0.1.0", "type": "0.1.0", "major": "0.1.0", "minor": "0.1.0",
                   "fileMode": "0.1.0", "permissions": "0.1.0", "uid": "0.1.0",
                   "gid": "0.1.0", "hostPath": "0.5.0"},
    "mount": {"hostPath": "0.1.0", "containerPath": "0.1.0", "options": "0.1.0",
              "type": "0.4.0"},
    "hook": {"hookName": "0.1.0", "path": "0.1.0", "args": "0.1.0", "env": "0.1.0",
             "timeout": "0.1.0"},
    "intelRdt": {"closID": "0.7.0", "l3CacheSchema": "0.7.0", "memBwSchema": "0.7.0",
                 "enableCMT": "0.7.0", "enableMBM": "0.7.0"},
}


def key(version: str) -> tuple[int, ...]:
    """A version as a comparable tuple ("0.5.0" -> (0, 5, 0)); a leading "v" is ignored."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def _edits(spec: dict[str, Any]) -> list[dict[str, Any]]:
    found = [spec.get("containerEdits")]
    found += [d.get("containerEdits") for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [e for e in found if isinstance(e, dict)]


def _items(edits: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [x for x in edits.get(name) or [] if isinstance(x, dict)]


def requirements(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(version, why) for each thing in `spec` that needs more than the earliest version,
    following the library's `requiresV0x0` functions."""
    needs: list[tuple[str, str]] = []
    edits = _edits(spec)
    if any(m.get("type") for e in edits for m in _items(e, "mounts")):
        needs.append(("0.4.0", "a mount's type"))
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    if any(str(d.get("name") or "x")[:1].isdigit() for d in devices):
        needs.append(("0.5.0", "a device name starting with a digit"))
    if any(n.get("hostPath") for e in edits for n in _items(e, "deviceNodes")):
        needs.append(("0.5.0", "a device node's hostPath"))
    if spec.get("annotations") or any(d.get("annotations") for d in devices):
        needs.append(("0.6.0", "annotations"))
    kind = spec.get("kind")
    if isinstance(kind, str) and "/" in kind and "." in kind.split("/", 1)[1]:
        needs.append(("0.6.0", "a dot in the class of kind"))
    if any(e.get("intelRdt") is not None for e in edits):
        needs.append(("0.7.0", "intelRdt"))
    if any(e.get("additionalGids") for e in edits):
        needs.append(("0.7.0", "additionalGids"))
    return needs


def minimum_version(spec: dict[str, Any], floor: str = EARLIEST) -> str:
    """The lowest spec version that defines everything `spec` uses (at least `floor`)."""
    return max([floor, *(v for v, _ in requirements(spec))], key=key)
