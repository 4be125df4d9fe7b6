"""Direct mode's step in the runtime's `create`: decide like the hook, then edit the spec.

The request is decided by the hook's own pure function (`nvdocker2.hook.request`), so a
container gets the same answer (which devices, which capabilities, what is refused) in
direct and legacy mode. Stdlib only, like the runtime that imports it.
"""

from __future__ import annotations

import os

from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.spec import direct_edit

TYPE_CHECKING = False  # typing costs every direct-mode create milliseconds
if TYPE_CHECKING:
    from typing import Any


def runtime_self_path(self_path: str) -> str:
    """This runtime as an absolute path, for the hook entry runc will exec."""
    if "/" not in self_path:
        from nvdocker2.host.run import safe_which

        found = safe_which(self_path)
        if found:
            return os.path.abspath(found)
    return os.path.abspath(self_path)


def edit_for_create(
    spec: dict[str, Any], bundle: str, config: Any, self_path: str
) -> dict[str, Any] | None:
    """The edited spec, or None when the container asked for no GPU; raises `DirectError`.

    `config` is the runtime's `ToolkitConfig` (`runtime.driver_root`, `cli.ldconfig` are
    used); `self_path` is how this runtime was started. `spec` is not changed.
    """
    from nvdocker2.hook.request import RequestError, request_from_spec

    try:
        request = request_from_spec(spec, config)
    except RequestError as err:
        raise DirectError(err.message) from None
    if request is None:
        return None
    return direct_edit(
        spec,
        bundle,
        request.devices,
        request.capabilities,
        driver_root=config.runtime.driver_root,
        runtime_path=runtime_self_path(self_path),
        ldconfig=config.cli.ldconfig,
        mig_config=request.mig_config,
        mig_monitor=request.mig_monitor,
        imex=request.imex_channels,
        gated=request.gated,
    )
