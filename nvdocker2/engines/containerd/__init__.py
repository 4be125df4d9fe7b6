"""The containerd engine, one room a concern: document.py (config.toml's values, versions 1–3)
and text.py (its line-level writers), edit.py (install and uninstall as plans), engine.py
(`ContainerdEngine`), service.py (restart, `config dump`, what the CRI reports), options.py,
front.py and doctor.py.

The package re-exports its public names on first use, importing nothing before: every start of
nvdocker2 imports `options.py`, and with it this file (the registry, `--help`).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:
    from nvdocker2.engines.containerd.engine import DEFAULT_CONFIG as DEFAULT_CONFIG
    from nvdocker2.engines.containerd.engine import ContainerdEngine as ContainerdEngine

_HOMES = {"DEFAULT_CONFIG": "engine", "ContainerdEngine": "engine"}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
