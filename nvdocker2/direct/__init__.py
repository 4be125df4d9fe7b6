"""Direct mode (SPEC §7): give containers GPUs without libnvidia-container.

`discover(driver_root)` reads what the driver offers (also for doctor and `cdi generate`);
`direct_edit(...)` turns a resolved request into the OCI spec edits; the runtime's hook role
lives in `nvdocker2.direct.hook`. Stdlib only: this runs on every container start.
"""

from __future__ import annotations

from nvdocker2.direct.discover import DeviceNode, Discovery, DriverFile, Gpu, discover
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.spec import Plan, direct_edit, edit_spec, make_plan, select_gpus

__all__ = [
    "DeviceNode",
    "DirectError",
    "Discovery",
    "DriverFile",
    "Gpu",
    "Plan",
    "direct_edit",
    "discover",
    "edit_spec",
    "make_plan",
    "select_gpus",
]
