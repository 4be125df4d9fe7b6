"""What the commands run for `--engine crio`: its engine and service for the flags, what its
drop-in says for `status`, and doctor's checks (the rest is `TransactionFront`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import NoService
from nvdocker2.engines.commands import TransactionFront, not_running, systemd_restart
from nvdocker2.engines.systemd import unit_active
from nvdocker2.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.engines.crio.engine import CrioEngine


def make() -> "CrioFront":
    return CrioFront()


class CrioFront(TransactionFront["CrioEngine"]):
    name = "crio"

    def engine(self, config: Optional[Path]) -> CrioEngine:
        from nvdocker2.engines.crio.engine import DEFAULT_DROPIN, CrioEngine

        return CrioEngine(config or DEFAULT_DROPIN)

    def service(self, reload: str, verify: bool, unit: Optional[str],
                address: Optional[str]) -> tuple[Any, list[str]]:
        from nvdocker2.engines.crio.service import DEFAULT_SOCKET, make_service

        if reload == "none":
            return NoService(), []
        if reload not in ("auto", "systemd", "signal"):
            raise BadInput(f"--reload {reload} does not apply to CRI-O",
                           "use --reload auto, signal, systemd or none")
        unit = unit or "crio"
        if reload == "auto":
            if not unit_active(unit):
                return not_running("CRI-O", unit, f"systemd does not run the {unit} unit here",
                                   verify)
        svc, why = make_service(reload, unit, address or DEFAULT_SOCKET, verify)
        if reload == "systemd":
            svc = systemd_restart("CRI-O", unit, svc)
        return svc, [f"reload mode {svc.strategy}: {why}"] if why else []

    def says(self, eng: CrioEngine, runtime_name: str) -> dict[str, Any]:
        from nvdocker2.engines.crio.document import parse

        raw = txn.read(eng.config)
        out: dict[str, Any] = {"dropin_present": raw is not None}
        try:
            rt = parse(eng.config, raw).get("crio", {}).get("runtime", {})
            out.update(runtimes={n: t.get("runtime_path") for n, t in
                                 rt.get("runtimes", {}).items()},
                       default_runtime=rt.get("default_runtime"))
        except BadInput as e:
            out.update(error=e.message)
        return out

    def checks(self, config: Optional[Path], unit: Optional[str],
               address: Optional[str]) -> Any:
        from nvdocker2.engines.crio.engine import DEFAULT_DROPIN
        from nvdocker2.engines.crio.doctor import crio_checks
        from nvdocker2.engines.crio.service import DEFAULT_SOCKET

        return crio_checks(config or DEFAULT_DROPIN, socket=address or DEFAULT_SOCKET)
