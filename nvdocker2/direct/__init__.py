"""Direct mode (docs/reference.md §7): give containers GPUs without libnvidia-container.

`discover(driver_root)` reads what the driver offers (also for doctor and `cdi generate`);
`direct_edit(...)` turns a resolved request into the OCI spec edits; the runtime's hook role
lives in `nvdocker2.direct.hook`. Stdlib only: this runs on every container start. The names
below are imported when first used, so that the hook, which needs none of them, starts
without loading discovery and spec editing.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself costs the hook's start a few milliseconds
if TYPE_CHECKING:
    from typing import Any

    from nvdocker2.direct.discover import DeviceNode, Discovery, DriverFile, Gpu, discover
    from nvdocker2.direct.errors import DirectError
    from nvdocker2.direct.spec import Plan, direct_edit, edit_spec, make_plan, select_gpus

_WHERE = {
    "DeviceNode": "discover",
    "Discovery": "discover",
    "DriverFile": "discover",
    "Gpu": "discover",
    "discover": "discover",
    "DirectError": "errors",
    "Plan": "spec",
    "direct_edit": "spec",
    "edit_spec": "spec",
    "make_plan": "spec",
    "select_gpus": "spec",
}

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


class _Package(type(sys)):
    """This package, whose `discover` stays the function when the submodule of that name is
    imported after it (the import system sets a package's attribute to each new submodule)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WHERE and isinstance(value, type(sys)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
