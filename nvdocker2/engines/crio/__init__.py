"""The CRI-O engine, one room a concern: document.py (the drop-in, nvdocker2's own file),
edit.py (install and uninstall as plans), engine.py (`CrioEngine`), service.py (restart or
SIGHUP, then `crio status`), options.py, front.py and doctor.py.

The package re-exports its public names on first use, importing nothing before: every start of
nvdocker2 imports `options.py`, and with it this file (the registry, `--help`).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:
    from nvdocker2.engines.crio.document import MARK as MARK
    from nvdocker2.engines.crio.document import parse as parse
    from nvdocker2.engines.crio.document import render as render
    from nvdocker2.engines.crio.document import runtime_table as runtime_table
    from nvdocker2.engines.crio.engine import DEFAULT_DROPIN as DEFAULT_DROPIN
    from nvdocker2.engines.crio.engine import CrioEngine as CrioEngine
    from nvdocker2.engines.crio.service import DEFAULT_SOCKET as DEFAULT_SOCKET
    from nvdocker2.engines.crio.service import SignalCrio as SignalCrio
    from nvdocker2.engines.crio.service import SystemdCrio as SystemdCrio
    from nvdocker2.engines.crio.service import make_service as make_service
    from nvdocker2.engines.crio.service import runtimes_from_status as runtimes_from_status

_HOMES = {"MARK": "document", "parse": "document", "render": "document",
          "runtime_table": "document", "DEFAULT_DROPIN": "engine", "CrioEngine": "engine",
          "DEFAULT_SOCKET": "service", "SignalCrio": "service", "SystemdCrio": "service",
          "make_service": "service", "runtimes_from_status": "service"}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
