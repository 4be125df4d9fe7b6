"""The transaction for plug-in engines (SPEC §2, §8, §11), knowing nothing of file formats.

    lock → read → engine plans → engine checks the candidate → backup (each file) → journal
         → compare before replace → write → service applies → service verifies
         → (on failure: restore every file, apply again, verify the old state: exit 4)

Docker keeps its own transaction in nvdocker2.transaction (reached through engines.docker);
this one drives containerd and CRI-O, whose changes can span two files (a root config and a
drop-in). Backups of one transaction share a tag in their reason, so rollback restores them
together.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from nvdocker2.daemonjson import store
from nvdocker2.engines.base import FileEdit, NoService, Plan, Request, Service, VerifyFailed
from nvdocker2.errors import (
    BadInput,
    DockerdRejected,
    EnvironmentProblem,
    NvDockerError,
    RollbackFailed,
)
from nvdocker2.transaction import Reporter, Result, unified_diff

RETRIES = 3


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory", "pass --config with a file") from None
    except OSError as e:
        raise store.os_error(e, str(path)) from None


def _put(f: FileEdit, data: bytes | None) -> None:
    if data is None:
        store.atomic_remove(f.path)
    else:
        d = store.resolve_target(f.path).parent
        if not d.is_dir():
            store.make_dirs(d, mode=0o755)
        store.atomic_write(f.path, data)


def _result(engine: Any, action: str, plan: Plan, service: Service, dry_run: bool,
            warnings: list[str], notes: list[str], backup: str | None = None,
            backup_file: str | None = None, verified: bool = False) -> Result:
    changed = plan.changed
    diff = None
    if dry_run and changed:
        diff = "".join(unified_diff(f.path, f.old or b"", f.new) for f in plan.files if f.changed)
    return Result(
        action=action, changed=changed, config=str(engine.config),
        config_reason=f"{engine.name} engine", backup=backup, backup_file=backup_file,
        reload=service.strategy if changed and not dry_run else "none", verified=verified,
        warnings=tuple(warnings) + plan.warnings, notes=tuple(notes) + plan.notes,
        changes=plan.changes, dry_run=dry_run, diff=diff,
    )


def run(engine: Any, action: str, req: Request, *, service: Service | None = None,
        reporter: Reporter | None = None, timeout: float = 30.0, dry_run: bool = False,
        state: Path | None = None) -> Result:
    """install or uninstall through `engine` as one transaction."""
    service = service or NoService()
    reporter = reporter or Reporter()
    st = state if state is not None else store.state_dir()
    planner: Callable = engine.plan_install if action == "install" else engine.plan_uninstall
    if dry_run:
        journal = store.Journal(st, engine.config).load() if st.exists() else {}
        plan = planner(_read, req, journal)
        return _result(engine, action, plan, service, True, [], [])
    with store.locked(st, timeout):
        notes: list[str] = []
        store.clean_state_temps(st)
        for _ in range(RETRIES):
            journal = store.Journal(st, engine.config)
            plan = planner(_read, req, journal.load())
            warnings: list[str] = []
            for f in plan.files:
                for p in store.clean_stale_temps(f.path):
                    notes.append(f"removed {p}, left behind by an interrupted earlier run")
            if not plan.changed:
                if plan.journal is not None and plan.journal != journal.load():
                    journal.write(plan.journal)
                return _result(engine, action, plan, service, False, warnings, notes)
            reporter.progress(f"checking the candidate with {engine.name}")
            warnings += engine.check_candidate(plan, req, action == "uninstall")
            try:
                return _apply(engine, action, plan, service, reporter, timeout, st, warnings,
                              notes)
            except _Moved:
                continue
        raise EnvironmentProblem(
            f"{engine.config}: another program kept changing the files while nvdocker2 worked",
            "stop the other writer (configuration management?) and run again")


class _Moved(Exception):
    """A file changed between the read and the write; redo from the read."""


def _apply(engine: Any, action: str, plan: Plan, service: Service, reporter: Reporter,
           timeout: float, st: Path, warnings: list[str], notes: list[str]) -> Result:
    changed = [f for f in plan.files if f.changed]
    tag = secrets.token_hex(4)
    backups = store.Backups(st)
    made = []
    for f in changed:
        b = backups.create(f.path, f.old, f"{plan.reason} [{tag}]")
        made.append(b)
    reporter.progress(f"backup {made[0].id} saved")
    journal = store.Journal(st, engine.config)
    journal_old = journal.read_bytes()
    if plan.journal is not None and plan.journal_before_write:
        journal.write(plan.journal)
    written: list[FileEdit] = []
    # Directories this change creates (a drop-in directory): a rollback removes them again.
    new_dirs = [f.path.parent for f in changed if f.new is not None and not f.path.parent.exists()]
    phase = "write"
    try:
        for f in changed:
            if _read(f.path) != f.old:  # compare before replace (SPEC §8)
                raise _Moved()
            _put(f, f.new)
            written.append(f)
        phase = "apply"
        if service.strategy != "none":
            reporter.progress(f"restarting {engine.name} ({service.strategy})")
        service.apply()
        verified = False
        if service.verifies:
            with reporter.waiting(f"waiting for {engine.name} to report the change"):
                service.verify(plan.expect, timeout)
            verified = True
        if plan.journal is not None and not plan.journal_before_write:
            journal.write(plan.journal)
    except BaseException as exc:
        _restore(engine, written, service, plan, timeout, phase != "write", exc, made)
        for d in new_dirs:
            with contextlib.suppress(OSError):
                os.rmdir(d)
        with contextlib.suppress(Exception):
            journal.restore(journal_old)
        if isinstance(exc, _Moved) or phase == "write":
            raise
        if isinstance(exc, VerifyFailed):
            raise DockerdRejected(
                f"{engine.name} did not take the new {engine.config}: {exc.reason}; the previous "
                f"files were restored from backup {made[0].id} and {engine.name} restarted on "
                "them", f"see {engine.name}'s log ({service.log_description or 'its journal'})",
            ) from None
        raise
    for f in changed:
        backups.prune(f.path)
    if service.strategy == "none":
        notes.append(f"{engine.name} was not restarted; to apply the change run: "
                     + engine.restart_hint())
    return _result(engine, action, plan, service, False, warnings, notes, made[0].id,
                   str(made[0].file) if made[0].existed else None, verified)


def _restore(engine: Any, written: list[FileEdit], service: Service, plan: Plan,
             timeout: float, apply_again: bool, exc: BaseException, made: list) -> None:
    step = "write"
    try:
        for f in reversed(written):
            _put(f, f.old)
        if apply_again and written:
            step = "restart"
            service.apply()
            if service.verifies:
                step = "verify"
                service.verify(plan.expect_old, timeout)
    except BaseException as e2:
        why = e2.message if isinstance(e2, NvDockerError) else f"{type(e2).__name__}: {e2}"
        first = exc.message if isinstance(exc, NvDockerError) else type(exc).__name__
        saved = ", ".join(str(b.file) if b.existed else f"(no {b.config})" for b in made)
        raise RollbackFailed(
            f"{engine.config}: the change failed ({first}) and putting the previous state back "
            f"failed at the {step} step too: {why}; the previous files are backups {saved}",
            f"restore them by hand, then: {engine.restart_hint()}",
        ) from None


def rollback(engine: Any, backup_id: str | None, *, service: Service | None = None,
             reporter: Reporter | None = None, timeout: float = 30.0, dry_run: bool = False,
             state: Path | None = None) -> Result:
    """Restore the newest transaction's backups of the engine's files (or the one with
    `backup_id` and the others of its transaction); the current files are backed up first."""
    from nvdocker2.daemonjson.edit import ABSENT, Change

    service = service or NoService()
    st = state if state is not None else store.state_dir()
    backups = store.Backups(st)
    every = backups.all()
    if backup_id:
        first = backups.get(backup_id)
    else:
        mine = [b for b in every if b.reason.endswith(f"({engine.name})") or
                f"({engine.name}) [" in b.reason]
        mine = [b for b in mine if b.config == str(engine.config) or "[" in b.reason]
        if not mine:
            raise BadInput(f"no backups of {engine.name}'s files in {backups.dir}",
                           "nothing to roll back to; list backups with: nvdocker2 backups")
        first = mine[0]
    tag = first.reason.rsplit("[", 1)[-1] if first.reason.endswith("]") else None
    group = [b for b in every if tag and b.reason.endswith(f"[{tag}") or b.id == first.id]
    group = list({b.config: b for b in reversed(group)}.values())
    files = tuple(FileEdit(Path(b.config), _read(Path(b.config)), backups.read(b)) for b in group)
    changes = tuple(Change(b.config, "restored", ABSENT, b.id) for b in group)
    plan = Plan(files, changes, f"rollback to {first.id} ({engine.name})", None)
    if dry_run or not plan.changed:
        return _result(engine, "rollback", plan, service, dry_run, [], [])
    with store.locked(st, timeout):
        return _apply(engine, "rollback", plan, service, reporter or Reporter(), timeout, st,
                      [], [])
