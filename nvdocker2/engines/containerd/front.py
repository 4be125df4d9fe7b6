"""What the commands run for `--engine containerd`: its engine and service for the flags,
what its files say for `status`, and doctor's checks (the rest is `TransactionFront`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import NoService
from nvdocker2.engines.commands import TransactionFront, not_running, systemd_restart
from nvdocker2.errors import BadInput, NvDockerError

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.engines.containerd.engine import ContainerdEngine


def make() -> "ContainerdFront":
    return ContainerdFront()


class ContainerdFront(TransactionFront["ContainerdEngine"]):
    name = "containerd"

    def engine(self, config: Optional[Path]) -> ContainerdEngine:
        from nvdocker2.engines.containerd.engine import DEFAULT_CONFIG, ContainerdEngine

        return ContainerdEngine(config or DEFAULT_CONFIG)

    def service(self, reload: str, verify: bool, unit: Optional[str],
                address: Optional[str]) -> tuple[Any, list[str]]:
        from nvdocker2.engines.containerd import service

        notes: list[str] = []
        unit = unit or service.DEFAULT_UNIT
        address = address or service.DEFAULT_ADDRESS
        if reload == "systemd":
            svc: Any = systemd_restart("containerd", unit,
                                       service.SystemdContainerd(unit, address, verify))
        elif reload == "none":
            svc = NoService()
        elif reload == "auto":
            svc, why = service.auto_service(unit, address, verify)
            if isinstance(svc, NoService):
                return not_running("containerd", unit, why, verify)
            notes.append(f"reload mode {svc.strategy}: {why}")
        else:
            raise BadInput(f"--reload {reload} does not apply to containerd (it has no reload)",
                           "use --reload auto, systemd or none")
        return svc, notes

    def says(self, eng: ContainerdEngine, runtime_name: str) -> dict[str, Any]:
        from nvdocker2.engines.containerd import document as D
        from nvdocker2.engines.containerd import edit as E

        root = eng.root(txn.read)
        found = eng.locate(root, txn.read)
        lay = E.layout(root, eng.major)
        eff = D.merged(root, eng.imports(root, txn.read, found.dropin)
                       + ([found.doc] if found.doc else []), lay.deep_merge)
        cri = root.cri()
        return dict(version=root.version, layout="drop-in " + str(lay.dropin)
                    if lay.dropin else "in place", runtimes={
                        n: _binary(r) for n, r in E.runtimes(eff, cri, str(root.path)).items()},
                    default_runtime=E.default_name(eff, cri))

    def files(self, eng: Any, state: Path) -> list[Path]:
        # The root config and the drop-in its layout uses now.
        with contextlib.suppress(NvDockerError):  # a broken root config: its path is enough
            eng.locate(eng.root(txn.read), txn.read)
        return super().files(eng, state)

    def checks(self, config: Optional[Path], unit: Optional[str],
               address: Optional[str]) -> Any:
        from nvdocker2.engines.containerd.engine import DEFAULT_CONFIG
        from nvdocker2.engines.containerd.service import DEFAULT_ADDRESS, DEFAULT_UNIT
        from nvdocker2.engines.containerd.doctor import containerd_checks

        return containerd_checks(config or DEFAULT_CONFIG, address or DEFAULT_ADDRESS,
                                 unit or DEFAULT_UNIT, self.describe)


def _binary(runtime: Any) -> Any:
    """What a runtime runs: its BinaryName; runc's shim without one runs `runc` from PATH."""
    from nvdocker2.engines.containerd import document as D
    from nvdocker2.engines.containerd import edit as E

    found = E.binary_name(runtime)
    if found is None and isinstance(runtime, dict) and runtime.get("runtime_type") == D.RUNC_V2:
        return "runc"
    return found
