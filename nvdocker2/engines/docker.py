"""Docker behind the engine entry points: a thin adapter over nvdocker2.transaction.

The daemon.json transaction keeps its own code (it needs dockerd's transitional reload file);
this adapter gives it the same entry points as the plug-in engines, so the CLI dispatches on
`--engine` alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvdocker2 import transaction
from nvdocker2.engines.base import Request


class DockerEngine:
    name = "docker"

    def __init__(self, config: Path) -> None:
        self.config = Path(config)

    def files(self) -> list[Path]:
        return [self.config]

    def install(self, req: Request, **kw: Any) -> transaction.Result:
        return transaction.install(self.config, runtime_name=req.runtime_name,
                                   runtime_path=req.runtime_path,
                                   runtime_args=req.extra.get("runtime_args", ()),
                                   set_default=req.set_default, **kw)

    def uninstall(self, req: Request, **kw: Any) -> transaction.Result:
        return transaction.uninstall(self.config, runtime_name=req.runtime_name,
                                     own_runtime_paths=req.own_runtime_paths, **kw)

    def rollback(self, backup_id: str | None, **kw: Any) -> transaction.Result:
        return transaction.rollback(self.config, backup_id, **kw)
