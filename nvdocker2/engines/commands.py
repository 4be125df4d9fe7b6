"""What the commands run for an engine whose files the transaction edits and whose service it
restarts or signals (containerd, CRI-O): the Frontend they share. Each engine's `front.py`
says how to build its engine and service, what its files say, and its doctor's checks."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Mapping, Optional, TypeVar

from nvdocker2 import locations
from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Engine, NoService, Request, Service, Unreachable
from nvdocker2.engines.front import BackupList, Outcome, Report
from nvdocker2.engines.systemd import systemd_booted
from nvdocker2.errors import DaemonUnreachable, NvDockerError

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.store.backups import Backup


def not_running(name: str, unit: str, why: str, verify: bool) -> tuple[Service, list[str]]:
    """`--reload auto` found no running engine: the rule Docker keeps for every engine. A change
    to be verified stops before anything is written (exit 3; a dry run lists it unchecked);
    with --no-verify the files are written and the engine left alone."""
    if verify:
        return Unreachable(DaemonUnreachable(
            f"{why}; the change could not be verified",
            f"start {name} (systemctl start {unit}), or pass --no-verify to only write the file",
            f"whether {name} runs the change")), []
    return NoService(), [f"reload mode none: {why}"]


def systemd_restart(name: str, unit: str, svc: Service) -> Service:
    """`svc` (a restart through systemd), or, where systemd is not the init system, a service
    that stops the change before anything is written."""
    if systemd_booted():
        return svc
    return Unreachable(DaemonUnreachable(
        f"systemd is not running on this host, so it cannot restart {unit}",
        f"use --reload none to only write the file, then restart {name} yourself",
        f"whether {name} runs the change"))


def _config(o: Mapping[str, Any]) -> Optional[Path]:
    config = o["config"]
    return Path(os.path.abspath(os.path.expanduser(str(config)))) if config else None


E = TypeVar("E", bound=Engine)


class TransactionFront(Generic[E]):
    """The Frontend of a transaction engine (of type E); subclasses give `engine`, `service`,
    `says` and `checks`."""

    name = ""

    def engine(self, config: Optional[Path]) -> E:
        raise NotImplementedError

    def service(self, reload: str, verify: bool, unit: Optional[str],
                address: Optional[str]) -> tuple[Service, list[str]]:
        """(service, notes) for the reload flags."""
        raise NotImplementedError

    def says(self, eng: E, runtime_name: str) -> dict[str, Any]:
        """What the engine's files say about runtimes (no service asked)."""
        raise NotImplementedError

    def checks(self, config: Optional[Path], unit: Optional[str],
               address: Optional[str]) -> Any:
        """doctor's checks: a nvdocker2.doctor.model.CheckPlan (the checks and their facts)."""
        raise NotImplementedError

    def short(self, value: Any) -> str:
        from nvdocker2.engines.docker.daemonjson.document import inline

        return inline(value)

    def run(self, action: str, o: Mapping[str, Any], reporter: Any) -> Outcome:
        eng = self.engine(_config(o))
        svc, notes = self.service(o["reload"].value, not o["no_verify"], o.get("unit"),
                                  o.get("containerd_address"))
        common = dict(reporter=reporter, timeout=o["timeout"], dry_run=o["dry_run"],
                      require_daemon=o["require_daemon"])
        if action == "rollback":
            from nvdocker2.store.lock import state_dir

            res = txn.rollback(eng, o["backup_id"], service=svc,
                               files=self.files(eng, state_dir()), **common)
        else:
            own, _ = locations.default_runtime_path()
            path = o.get("runtime_path") or own
            req = Request(o["runtime_name"], path, bool(o.get("set_default")), (own,),
                          {"cdi": True} if o.get("cdi") else {})
            res = txn.run(eng, action, req, service=svc, **common)
        return Outcome(res, notes if res.changed and not res.dry_run else [])

    def describe(self, eng: E, runtime_name: str = "nvidia") -> dict[str, Any]:
        """`status`: what the files say, and what install recorded."""
        from nvdocker2.store.journal import Journal
        from nvdocker2.store.lock import state_dir

        out: dict[str, Any] = {"engine": eng.name, "config": str(eng.config)}
        out.update(self.says(eng, runtime_name))
        out["journal"] = Journal(state_dir(), eng.config).load() if \
            state_dir().exists() else {}
        return out

    def status(self, o: Mapping[str, Any]) -> Report:
        st = self.describe(self.engine(_config(o)))
        return Report(st, [f"{k}: {v}" for k, v in st.items()])

    def files(self, eng: E, state: Path) -> list[Path]:
        """The files whose backups belong to `eng`: those a plan may touch and the drop-ins
        its journal records."""
        paths = [Path(eng.config)]
        paths += [Path(p) for p in eng.files()]
        with contextlib.suppress(NvDockerError):
            from nvdocker2.store.journal import Journal

            rec = Journal(state, eng.config).load() if state.exists() else {}
            for entry in (rec.get("runtimes") or {}).values():
                if isinstance(entry, dict) and isinstance(entry.get("dropin"), str):
                    paths.append(Path(entry["dropin"]))
        return list(dict.fromkeys(paths))

    def backups(self, o: Mapping[str, Any]) -> BackupList:
        """The backups of any of the engine's files plus every other backup of the same
        transactions, groups newest first, each group's backups in the order the
        transaction made them (root config first)."""
        from nvdocker2.store.backups import Backups
        from nvdocker2.store.lock import state_dir

        cfg = _config(o)
        eng = self.engine(cfg)
        why = "given with --config" if cfg else f"the {self.name} default"
        state = state_dir()
        files = self.files(eng, state)
        names = {str(p) for p in files}
        every = Backups(state).all()
        tags = {b.tag for b in every if b.config in names} - {None}
        groups: dict[str, tuple[Optional[str], list[Backup]]] = {}
        for b in every:
            tag = b.tag
            if b.config in names or tag in tags:
                groups.setdefault(tag or b.id, (tag, []))[1].insert(0, b)
        return BackupList(self.name, str(eng.config), why, [str(f) for f in files],
                          str(Backups(state).dir), list(groups.values()))

    def doctor(self, o: Mapping[str, Any]) -> int:
        from nvdocker2.doctor import run_engine_checks

        config = o["config"]
        cfg = Path(os.path.abspath(str(config))) if config is not None else None
        return run_engine_checks(self.checks(cfg, o.get("unit"), o.get("containerd_address")),
                                 o["json"], o["verbose"])
