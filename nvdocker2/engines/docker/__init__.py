"""The Docker engine: daemon.json edits planned for the engine transaction (reference §2, §8, §9).

The engine and its daemon.json transactions are engine.py; the document format is
`daemonjson/`; dockerd as the service is `service/`; CDI mode `cdi.py`; options.py, front.py
and doctor/ as every engine has them.

The package re-exports engine.py's public names on first use, importing nothing before: every
start of nvdocker2 imports `options.py`, and with it this file (the registry, `--help`).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:  # engine.py's names, from where each is defined
    from nvdocker2.engines.context import Result as Result
    from nvdocker2.engines.docker.engine import DockerEngine as DockerEngine
    from nvdocker2.engines.docker.engine import install as install
    from nvdocker2.engines.docker.engine import rollback as rollback
    from nvdocker2.engines.docker.engine import run as run
    from nvdocker2.engines.docker.engine import uninstall as uninstall
    from nvdocker2.engines.docker.engine import wrap_shape as wrap_shape
    from nvdocker2.engines.docker.service import expectation as expectation
    from nvdocker2.engines.docker.service import transitional as transitional

_FROM_ENGINE = frozenset({"DockerEngine", "Result", "expectation", "install", "rollback", "run",
                          "transitional", "uninstall", "wrap_shape"})


def __getattr__(name: str) -> object:
    if name not in _FROM_ENGINE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.engine"), name)
