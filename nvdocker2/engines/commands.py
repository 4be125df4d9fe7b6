"""What `--engine containerd|crio` runs: build the engine and its service, run the
transaction, and describe the state for `status` (the CLI only renders)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import NoService, Request
from nvdocker2.errors import BadInput, NvDockerError


def make(engine: str, config: Path | None, reload: str, verify: bool, unit: str | None,
         address: str | None) -> tuple[Any, Any, list[str]]:
    """(engine, service, notes) for the flags."""
    notes: list[str] = []
    if engine == "containerd":
        from nvdocker2.engines.containerd import DEFAULT_CONFIG, ContainerdEngine, service

        eng = ContainerdEngine(config or DEFAULT_CONFIG)
        unit = unit or service.DEFAULT_UNIT
        address = address or service.DEFAULT_ADDRESS
        if reload == "systemd":
            svc: Any = service.SystemdContainerd(unit, address, verify)
        elif reload == "none":
            svc = NoService()
        elif reload == "auto":
            svc, why = service.auto_service(unit, address, verify)
            notes.append(f"reload mode {svc.strategy}: {why}")
        else:
            raise BadInput(f"--reload {reload} does not apply to containerd (it has no reload)",
                           "use --reload auto, systemd or none")
        return eng, svc, notes
    if engine == "crio":
        from nvdocker2.engines.crio import DEFAULT_DROPIN, DEFAULT_SOCKET, CrioEngine, make_service

        eng = CrioEngine(config or DEFAULT_DROPIN)
        if reload == "none":
            return eng, NoService(), notes
        if reload not in ("auto", "systemd", "signal"):
            raise BadInput(f"--reload {reload} does not apply to CRI-O",
                           "use --reload auto, signal, systemd or none")
        svc, why = make_service(reload, unit or "crio", address or DEFAULT_SOCKET, verify)
        if why:
            notes.append(f"reload mode {svc.strategy}: {why}")
        return eng, svc, notes
    raise BadInput(f"unknown engine {engine!r}", "use --engine docker, containerd or crio")


def install(eng: Any, svc: Any, req: Request, **kw: Any):
    return txn.run(eng, "install", req, service=svc, **kw)


def uninstall(eng: Any, svc: Any, req: Request, **kw: Any):
    return txn.run(eng, "uninstall", req, service=svc, **kw)


def rollback(eng: Any, svc: Any, backup_id: str | None, **kw: Any):
    return txn.rollback(eng, backup_id, service=svc, **kw)


def status(eng: Any, runtime_name: str = "nvidia") -> dict:
    """What the engine's files say about runtimes (no service asked)."""
    from nvdocker2 import store

    out: dict = {"engine": eng.name, "config": str(eng.config)}
    if eng.name == "containerd":
        from nvdocker2.engines.containerd import document as D
        from nvdocker2.engines.containerd import edit as E

        root = D.parse(eng.config, txn.read(eng.config))
        own = eng._own(root, txn.read)
        lay = E.layout(root, eng.major)
        eff = D.merged(root, eng._imports(root, txn.read, eng._dropin) + ([own] if own else []),
                       lay.deep_merge)
        cri = root.cri()
        out.update(version=root.version, layout="drop-in " + str(lay.dropin)
                   if lay.dropin else "in place", runtimes={
                       n: _binary(r) for n, r in E._runtimes(eff, cri, str(root.path)).items()},
                   default_runtime=E.default_name(eff, cri))
    else:
        from nvdocker2.engines.crio import parse

        raw = txn.read(eng.config)
        out.update(dropin_present=raw is not None)
        try:
            rt = parse(eng.config, raw).get("crio", {}).get("runtime", {})
            out.update(runtimes={n: t.get("runtime_path") for n, t in
                                 rt.get("runtimes", {}).items()},
                       default_runtime=rt.get("default_runtime"))
        except BadInput as e:
            out.update(error=e.message)
    out["journal"] = store.Journal(store.state_dir(), eng.config).load() if \
        store.state_dir().exists() else {}
    return out


def engine_files(eng: Any, state: Path) -> list[Path]:
    """The files whose backups belong to `eng`: those a plan may touch (containerd: the root
    config and the drop-in its layout uses now) and the drop-ins its journal records."""
    paths = [Path(eng.config)]
    if eng.name == "containerd":
        with contextlib.suppress(NvDockerError):  # a broken root config: its path is enough
            eng._own(eng._root(txn.read), txn.read)
    paths += [Path(p) for p in eng.files()]
    with contextlib.suppress(NvDockerError):
        from nvdocker2 import store

        rec = store.Journal(state, eng.config).load() if state.exists() else {}
        for entry in (rec.get("runtimes") or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("dropin"), str):
                paths.append(Path(entry["dropin"]))
    return list(dict.fromkeys(paths))


def backups(eng: Any, state: Path) -> tuple[list[Path], list[tuple[str | None, list]]]:
    """(the engine's files, its backups as (transaction tag, backups) groups): the backups of
    any of its files plus every other backup of the same transactions, groups newest first,
    each group's backups in the order the transaction made them (root config first)."""
    from nvdocker2 import store

    files = engine_files(eng, state)
    names = {str(p) for p in files}
    every = store.Backups(state).all()
    tags = {b.tag for b in every if b.config in names} - {None}
    groups: dict[str, tuple[str | None, list]] = {}
    for b in every:
        tag = b.tag
        if b.config in names or tag in tags:
            groups.setdefault(tag or b.id, (tag, []))[1].insert(0, b)
    return files, list(groups.values())


def _binary(runtime: Any) -> Any:
    """What a runtime runs: its BinaryName; runc's shim without one runs `runc` from PATH."""
    from nvdocker2.engines.containerd import document as D
    from nvdocker2.engines.containerd import edit as E

    found = E._binary(runtime)
    if found is None and isinstance(runtime, dict) and runtime.get("runtime_type") == D.RUNC_V2:
        return "runc"
    return found
