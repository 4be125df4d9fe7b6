"""Every NVIDIA CDI spec on the host against the host: are its device nodes still true?

A spec outlives the driver that it describes: after a driver upgrade nvidia-uvm may get
another major number, a GPU may be gone, and every container given the old spec then fails
(cuInit, or a device the runtime cannot create). Podman, containerd and Docker read every spec
in /etc/cdi and /var/run/cdi, whoever wrote it, so all of those of kind nvidia.com/* are
compared with /dev, /proc/devices and the GPUs in /proc/driver/nvidia/gpus.
"""

from __future__ import annotations

import os
from typing import Any

from nvdocker2.doctor.context import Context
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip

CHECKS = Checks()
check = CHECKS.check

SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_MODE_HEADER = b"# Written by nvdocker2 (CDI mode)"


def _char_majors(ctx: Context) -> dict[int, str]:
    """Major -> driver name of the character devices in /proc/devices."""
    majors: dict[int, str] = {}
    section = ""
    for line in (ctx.root.read_text("/proc/devices") or "").splitlines():
        if line.endswith(":"):
            section = line
            continue
        parts = line.split()
        if section.startswith("Character") and len(parts) == 2 and parts[0].isdigit():
            majors[int(parts[0])] = parts[1]
    return majors


def _gpu_uuids(ctx: Context) -> set[str] | None:
    from nvdocker2.direct.discover import parse_information

    gpus = ctx.root.path("/proc/driver/nvidia/gpus")
    try:
        entries = os.listdir(gpus)
    except OSError:
        return None
    found = set()
    for entry in entries:
        text = ctx.root.read_text(f"/proc/driver/nvidia/gpus/{entry}/information") or ""
        uuid = parse_information(text).get("GPU UUID")
        if uuid:
            found.add(uuid)
    return found


def _spec_files(ctx: Context) -> list[str]:
    files = []
    for d in SPEC_DIRS:
        try:
            names = sorted(os.listdir(ctx.root.path(d)))
        except OSError:
            continue
        files += [f"{d}/{n}" for n in names if os.path.splitext(n)[1] in (".json", ".yaml")]
    return files


def _nodes(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, node) of every device node, in the spec's own edits and each device's."""
    found = []
    edits = [("containerEdits", spec.get("containerEdits"))]
    edits += [(f"device {d.get('name')}", d.get("containerEdits"))
              for d in spec.get("devices") or [] if isinstance(d, dict)]
    for where, e in edits:
        if isinstance(e, dict):
            found += [(where, n) for n in e.get("deviceNodes") or [] if isinstance(n, dict)]
    return found


def stale_entries(ctx: Context, name: str, spec: dict[str, Any]) -> list[str]:
    """What in the spec at `name` the host no longer has (empty: all true)."""
    majors = _char_majors(ctx)
    problems: list[str] = []
    seen = set()
    for where, node in _nodes(spec):
        path = node.get("hostPath") or node.get("path")
        if not isinstance(path, str) or path in seen:
            continue
        seen.add(path)
        st = ctx.root.is_char_device(path)
        if st is None:
            problems.append(f"{path} ({where}) is not on the host")
            continue
        want = (node.get("major"), node.get("minor"))
        have = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if want[0] and tuple(want) != have:
            problems.append(f"{path} is {want[0]}:{want[1]} in the spec, {have[0]}:{have[1]} "
                            "on the host")
        elif want[0] and majors and not majors.get(want[0], "").startswith("nvidia"):
            problems.append(f"{path}: major {want[0]} is no NVIDIA driver's in /proc/devices")
    uuids = _gpu_uuids(ctx)
    if uuids is not None:
        for d in spec.get("devices") or []:
            n = d.get("name") if isinstance(d, dict) else None
            if isinstance(n, str) and n.startswith("GPU-") and n not in uuids:
                problems.append(f"GPU {n} is not present")
    return problems


def fix_command(name: str, data: bytes) -> str:
    if data.startswith(CDI_MODE_HEADER):
        return "nvdocker2 cdi refresh"
    return f"nvdocker2 cdi generate --output {name}"


@check("cdi.nodes", "NVIDIA CDI specs in /etc/cdi and /var/run/cdi match the host")
def cdi_nodes(ctx: Context) -> Outcome:
    checked, stale, fixes = [], [], []
    for name in _spec_files(ctx):
        data = ctx.root.read_bytes(name)
        if data is None:
            continue
        from nvdocker2.cdi_validate import SpecError, parse  # only where a spec is

        try:
            spec = parse(data, name)
        except SpecError as err:
            stale.append(f"{name}: unreadable ({err})")
            fixes.append(f"nvdocker2 cdi validate {name}")
            continue
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if not isinstance(kind, str) or not kind.startswith("nvidia.com/"):
            continue
        checked.append(name)
        problems = stale_entries(ctx, name, spec)
        if problems:
            stale.append(f"{name}: " + "; ".join(problems))
            fixes.append(fix_command(name, data))
    if stale:
        return fail("stale: " + " | ".join(stale) + " (containers given these devices fail)",
                    "fix with: " + "; ".join(dict.fromkeys(fixes)))
    if not checked:
        return skip("no NVIDIA CDI spec in " + " or ".join(SPEC_DIRS))
    return ok(f"{', '.join(checked)}: every device node and GPU is on the host")
