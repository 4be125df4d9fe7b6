"""The one transaction of every engine (reference §2, §8, §11), knowing nothing of file formats.

    lock → read → engine plans → stage every new file → engine checks the candidates
         → backup (each file) → journal → compare before replace → write (the `via` bytes
         first where the plan has them) → service applies → service verifies → final bytes
         → (on failure: restore every file written, apply again, verify the old state: exit 4;
            exit 5 naming the backups when that fails too)

reference §8: "compare" checks, right before each rename, that the file is still what was read;
when another program changed it, nothing more is written and the transaction is redone from the
read (ATTEMPTS times, then exit 3). A file that cannot be renamed over is written in place,
with a warning.

Nothing here prints: a transaction returns a `Result` (or raises an `NvDockerError` with the
exit code of reference §2) and reports live progress only through a `Reporter`. The engine (Docker's
daemon.json, containerd's config.toml, CRI-O's drop-in) brings the plan and the candidate
check; its `Service` brings apply and verify.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from nvdocker2.store.atomic import (
    AsRead,
    ChangedMeanwhile,
    Ownership,
    atomic_remove,
    clean_stale_temps,
    make_dirs,
    os_error,
    resolve_target,
    stage,
)
from nvdocker2.store.backups import Backup, Backups
from nvdocker2.store.journal import Journal
from nvdocker2.store.lock import clean_state_temps, locked, state_dir
from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.base import (
    Engine,
    EngineDied,
    FileEdit,
    NoService,
    Plan,
    Request,
    Service,
    VerifyFailed,
)
from nvdocker2.errors import (
    DaemonUnreachable,
    BadInput,
    DockerdRejected,
    EnvironmentProblem,
    Interrupted,
    NvDockerError,
)
from nvdocker2.host import testing
from nvdocker2.redact import masked_text

from nvdocker2.engines.context import Context, Planner, Reporter, Result, read, unified_diff
from nvdocker2.engines.putback import (
    as_read,
    discard,
    interrupted,
    put_old,
    putting_back,
    restore,
)

__all__ = ["ATTEMPTS", "Context", "Planner", "Reporter", "Result", "read", "rollback", "run",
           "transact", "unified_diff"]

ATTEMPTS = 3  # reads of files another program keeps changing before giving up


def transact(engine: Engine, action: str, planner: Planner, *, service: Service | None = None,
             reporter: Reporter | None = None, timeout: float = 30.0, dry_run: bool = False,
             state: Path | None = None, require_daemon: bool = False) -> Result:
    """Run `planner` (read → edit) and carry its plan out as one transaction."""
    ctx = Context(engine, service or NoService(), reporter or Reporter(), timeout,
                  state if state is not None else state_dir(), dry_run,
                  require_daemon=require_daemon)
    if dry_run:  # nothing locked, nothing written
        return _dry_run(ctx, action, planner(ctx))
    try:
        return _locked(ctx, action, planner)
    except NvDockerError as e:
        raise _about(ctx, e)  # noqa: B904 - the caught error itself, annotated
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted):
            raise _about(ctx, e)  # noqa: B904 - the caught error itself, annotated
        if ctx.done is not None:
            raise _about(ctx, Interrupted(f"{engine.config}: interrupted after the change was "
                                          f"made (backup {ctx.done.id})")) from None
        raise _about(ctx, interrupted(ctx, None)) from None


def _about(ctx: Context, e: Any) -> Any:
    """`e` with the file and the backup it leaves, for a --json answer whatever happens."""
    e.config = e.config or str(ctx.engine.config)
    kept = ctx.done or ctx.kept
    e.backup = e.backup or (kept.id if kept is not None else None)
    return e


def _locked(ctx: Context, action: str, planner: Planner) -> Result:
    engine, timeout = ctx.engine, ctx.timeout
    with locked(ctx.state, timeout):
        _clean_temps(ctx, engine.config)
        clean_state_temps(ctx.state)
        for n in range(1, ATTEMPTS + 1):
            warnings, notes = len(ctx.warnings), len(ctx.notes)
            try:
                return _attempt(ctx, action, planner(ctx))
            except ChangedMeanwhile as e:
                if n == ATTEMPTS:
                    raise EnvironmentProblem(
                        f"{engine.config} was changed by another program {n} times while "
                        f"nvdocker2 was editing it ({e.why}); gave up, nothing was written",
                        e.hint,
                    ) from None
                del ctx.warnings[warnings:], ctx.notes[notes:]
                ctx.notes.append(
                    f"{engine.config} was changed by another program meanwhile ({e.why}); "
                    "read it again and redid the change"
                )
    raise AssertionError("not reached")  # pragma: no cover


def _primary(ctx: Context, plan: Plan) -> FileEdit | None:
    return next((f for f in plan.files if f.path == ctx.engine.config), None)


def _result(ctx: Context, action: str, plan: Plan, *, backup: Backup | None = None,
            verified: bool = False, diff: str | None = None, settled: bool = False) -> Result:
    """`settled`: the files were unchanged and the engine was made to run them (`settle`)."""
    main = _primary(ctx, plan)
    changed = plan.changed
    return Result(
        action=action, changed=changed, config=str(ctx.engine.config),
        config_reason=ctx.engine.config_reason, backup=backup.id if backup else None,
        backup_file=str(backup.file) if backup and backup.existed else None,
        reload=ctx.service.strategy if (changed or settled) and not ctx.dry_run else "none",
        verified=verified, warnings=tuple(ctx.warnings) + plan.warnings,
        notes=tuple(ctx.notes) + plan.notes, changes=plan.changes, dry_run=ctx.dry_run,
        diff=diff, style=plan.style, unchecked=tuple(ctx.unchecked),
        before=masked_text(main.old) if main else None,
        after=masked_text(main.new) if main else None,
    )


def _dry_run(ctx: Context, action: str, plan: Plan) -> Result:
    """The checks of an apply before its first write, with the candidates staged in a private
    temp directory: nothing is created beside the files or in the state dir."""
    if not plan.changed:
        return _result(ctx, action, plan)
    import tempfile  # a dry run's only

    with tempfile.TemporaryDirectory(prefix="nvdocker2-dry-run-") as d:
        for _, _, s in _checked(ctx, plan, Path(d)):
            s.discard()
    diff = "".join(unified_diff(f.path, f.old or b"", f.new) for f in plan.files if f.changed)
    return _result(ctx, action, plan, diff=diff)


def _attempt(ctx: Context, action: str, plan: Plan) -> Result:
    journal = plan.journal_file or ctx.journal()
    for f in plan.files:
        if f.path != ctx.engine.config:
            _clean_temps(ctx, f.path)
    if not plan.changed:
        if plan.journal is not None and plan.journal != journal.load():
            journal.write(plan.journal)  # nothing to change in the files; the record is stale
        settled = ctx.service.settle(ctx, plan.expect)
        _remove_dirs(plan.remove_dirs)
        return _result(ctx, action, plan, verified=bool(settled), settled=settled is not None)
    made_dirs = _make_dirs(ctx, plan)
    try:
        return _apply(ctx, action, plan, journal, _checked(ctx, plan, None))
    except BaseException:
        if plan.undo_made_dirs:
            _remove_dirs(made_dirs)
        raise


def _make_dirs(ctx: Context, plan: Plan) -> list[Path]:
    """Create the missing directories of the files the plan writes (0755); the ones made are
    removed again when the change fails."""
    made: list[Path] = []
    for f in plan.files:
        if not f.changed or (f.new is None and f.path not in plan.via):
            continue
        d = resolve_target(f.path).parent
        if d.is_dir():
            continue
        missing = [d] + [p for p in d.parents if not p.exists()]
        try:
            make_dirs(d, mode=0o755)
        except (FileExistsError, NotADirectoryError):
            raise BadInput(f"{f.path}: {d} is not a directory") from None
        except OSError as e:
            raise os_error(e, str(d)) from None
        made += [p for p in missing if p not in made]
        ctx.notes.append(f"created the directory {d}")
    return sorted(made, key=lambda p: len(p.parts), reverse=True)


def _remove_dirs(dirs: Sequence[Path]) -> None:
    for d in dirs:
        with contextlib.suppress(OSError):
            os.rmdir(d)  # only when empty


def _stage(ctx: Context, plan: Plan, where: Path | None) -> list[tuple[Path, bytes, Any]]:
    """Every version of every file the plan writes (the `via` bytes first), staged beside its
    file (or in `where`, for a dry run) with the mode, owner and group it will have."""
    out: list[tuple[Path, bytes, Any]] = []
    try:
        for f in plan.files:
            if not f.changed:
                continue
            for data in (plan.via.get(f.path), f.new):
                if data is None:
                    continue
                target = f.path if where is None else where / f.path.name
                out.append((f.path, data, stage(target, data, owner=f.owner)))
    except BaseException:
        for _, _, s in out:
            s.discard()
        raise
    return out


def _checked(ctx: Context, plan: Plan, where: Path | None) -> list[tuple[Path, bytes, Any]]:
    """`_stage`, then the engine's check of the staged candidates; nothing stays staged when
    the engine refuses them."""
    staged = _stage(ctx, plan, where)
    try:
        ctx.engine.check_candidate(ctx, plan, [(t, b, s.path) for t, b, s in staged])
        try:
            ctx.service.ready()
        except DaemonUnreachable as e:
            ctx.unreachable(e)
    except BaseException:
        for _, _, s in staged:
            s.discard()
        raise
    return staged


def _clean_temps(ctx: Context, path: Path) -> None:
    for p in clean_stale_temps(path):
        ctx.notes.append(f"removed {p}, left behind by an interrupted earlier run")


def _apply(ctx: Context, action: str, plan: Plan, journal: Journal,
           staged: list[tuple[Path, bytes, Any]]) -> Result:
    """Back up, write, apply, verify; or put everything back (exit 4, or 5 naming the backups)."""
    engine, service = ctx.engine, ctx.service
    changed = [f for f in plan.files if f.changed]
    first: dict[Path, Any] = {}  # the first version of each file (its `via` bytes if any)
    final: dict[Path, Any] = {}  # the final version of a file written `via` other bytes
    for t, _, s in staged:
        (final if t in first else first)[t] = s
    backups = Backups(ctx.state)
    made: list[Backup] = []
    # The backups of a transaction that changes several files share a tag: rollback and
    # `backups` keep them together.
    grouped = engine.groups_backups or len(changed) > 1
    tag = f" [{os.urandom(4).hex()}]" if grouped else ""
    try:
        for f in changed:
            made.append(backups.create(f.path, f.old, (f.reason or plan.reason) + tag,
                                       Ownership.of(as_read(ctx, f).stat), engine.config))
        main = next((b for b, f in zip(made, changed) if f.path == engine.config), made[0])
        ctx.reporter.progress(f"backup {main.id} saved")
        journal_old = journal.read_bytes()
        if plan.journal is not None and plan.journal_before_write:
            journal.write(plan.journal)
    except BaseException:
        for _, _, s in staged:
            s.discard()
        discard(backups, made)  # nothing was written: no backup of it stays, none is counted
        raise

    mark = service.mark()
    phase = "write"
    written: list[FileEdit] = []
    try:
        testing.pause("before-write")
        for f in changed:
            if f.path in first:
                first[f.path].commit(as_read(ctx, f))
                _note_in_place(ctx, f.path, first[f.path], main)
            else:
                atomic_remove(f.path, as_read(ctx, f))
            written.append(f)
        phase = "apply"
        testing.pause("after-write")
        if service.strategy != "none":
            what = " with the transitional file" if plan.via else ""
            ctx.reporter.progress(f"{service.verb_ing} {engine.process} ({service.strategy}){what}")
        service.apply()
        phase = "verify"
        verified = False
        if service.verifies:
            with ctx.reporter.waiting(f"waiting for {engine.process} to report the change"):
                unproven = service.verify(plan.expect, ctx.timeout)
            verified = not unproven
            if unproven:
                ctx.warn(unproven)
        phase = "final"
        for f in changed:
            if f.path not in plan.via:
                continue
            ours = AsRead(plan.via[f.path])  # still the in-between bytes we wrote?
            if f.path in final:
                final[f.path].commit(ours)
                _note_in_place(ctx, f.path, final[f.path], main)
            else:
                atomic_remove(f.path, ours)
        if plan.journal is not None and not plan.journal_before_write:
            journal.write(plan.journal)
    except BaseException as exc:
        for _, _, s in staged:
            s.discard()
        if phase == "write":
            put_back = False

            def left() -> Interrupted:
                if not written:
                    return interrupted(ctx, None)
                if put_back:
                    return interrupted(ctx, False)
                return Interrupted(f"{engine.config}: interrupted while writing, and putting "
                                   f"the previous bytes back failed: they are backup {main.id}")

            with putting_back(ctx, exc, left):
                with contextlib.suppress(Exception):
                    put_old(ctx, reversed(written))
                    put_back = True
                with contextlib.suppress(Exception):
                    journal.restore(journal_old)
            if put_back:
                # The files hold the bytes they had (never replaced, or put back): a failed run
                # leaves no backup, so it never pushes a real one out of the newest kept.
                discard(backups, made)
            else:
                ctx.kept = main
            if isinstance(exc, KeyboardInterrupt):
                raise left() from None
            raise
        ctx.kept = main
        died = isinstance(exc, EngineDied)  # nothing left to reload: the files go back alone
        reapply = not died and (phase != "apply" or service.reapply_after_failed_apply)
        with putting_back(ctx, exc, lambda: interrupted(ctx, main)):
            restore(ctx, plan, written, made, exc, reapply)
            with contextlib.suppress(Exception):
                journal.restore(journal_old)
        if isinstance(exc, KeyboardInterrupt):
            raise interrupted(ctx, main) from None
        if isinstance(exc, EngineDied):
            raise DockerdRejected(
                f"{exc.message} (it was taking the new {engine.config}); the previous file "
                f"was restored from backup {main.id}", exc.hint) from None
        if isinstance(exc, VerifyFailed):
            more = len(written) - 1
            others = f" (with {more} other file{'s' if more > 1 else ''})" if more else ""
            raise DockerdRejected(
                f"{engine.process} did not take the new {engine.config}: {exc.reason}; the "
                f"previous file was restored from backup {main.id}{others} and "
                f"{engine.process} reports the previous state again",
                service.rejected_hint(engine.process, mark),
            ) from None
        if isinstance(exc, NvDockerError):
            exc.message = f"{exc.message}; {engine.config} was restored from backup {main.id}"
        raise
    ctx.done = main
    for f in changed:
        backups.prune(f.path)
    _remove_dirs(plan.remove_dirs)
    if service.strategy == "none":
        note = engine.pending_note(plan)
        if note:
            ctx.notes.append(note)
    return _result(ctx, action, plan, backup=main, verified=verified)


def _note_in_place(ctx: Context, path: Path, staged: Any, backup: Backup) -> None:
    if staged.in_place is not None:
        ctx.warn(f"{path} cannot be replaced by a rename ({staged.in_place}; a bind mount?), so "
                 f"it was written in place: this write is not atomic (the previous file is "
                 f"backup {backup.id})")


# --- engines planned from a Request (every engine) -----------------------------------------


def run(engine: Engine, action: str, req: Request, *, service: Service | None = None,
        reporter: Reporter | None = None, timeout: float = 30.0, dry_run: bool = False,
        state: Path | None = None, require_daemon: bool = False) -> Result:
    """install or uninstall through an engine that plans from a `Request`."""
    def planner(ctx: Context) -> Plan:
        journal = ctx.journal().load() if ctx.state.exists() else {}
        if action == "install":
            return engine.plan_install(ctx.read, req, journal)
        return engine.plan_uninstall(ctx.read, req, journal)

    return transact(engine, action, planner, service=service, reporter=reporter,
                    timeout=timeout, dry_run=dry_run, state=state,
                    require_daemon=require_daemon)


def rollback(engine: Engine, backup_id: str | None, *, service: Service | None = None,
             reporter: Reporter | None = None, timeout: float = 30.0, dry_run: bool = False,
             state: Path | None = None, files: list[Path] | None = None,
             require_daemon: bool = False) -> Result:
    """Restore the newest transaction of the engine's config, every file of it (or the one of
    `backup_id`, which must be of one of its files); the current files are backed up first.
    A transaction made for another config (two configs sharing a drop-in: the config its
    backups record, or, in backups that record none, a file it changed that is not one of this
    config's) is never picked, and refused by id. `files`: the engine's files as its front
    knows them (default: its config and `engine.files()`)."""
    st = state if state is not None else state_dir()
    backups = Backups(st)
    every = backups.all()
    if files is None:
        files = list(dict.fromkeys([Path(engine.config), *(Path(p) for p in engine.files())]))
    names = [str(p) for p in files]
    listing = f"list them with: nvdocker2 backups --engine {engine.name} --config {engine.config}"

    def foreign(b: Backup) -> list[str]:
        return _foreign(backups, every, b, str(engine.config), names)

    first: Backup | None
    if backup_id:
        first = backups.get(backup_id)
        if first.config not in names:
            raise BadInput(f"backup {backup_id} is of {first.config}, not of a file of "
                           f"{engine.config} ({', '.join(names)})", listing)
        others = foreign(first)
        if others:
            raise BadInput(f"backup {backup_id} is of a change of {', '.join(others)}, not of "
                           f"{engine.config}",
                           f"roll it back with the --config of that change; {listing}")
    else:
        mine = [b for b in every if b.config in names]
        if not mine:
            raise BadInput(f"no backups of {', '.join(names)} in {backups.dir}",
                           f"nothing to roll back to; {listing}")
        first = next((b for b in mine if not foreign(b)), None)
        if first is None:
            raise BadInput(f"no change of {engine.config} to roll back: every backup of "
                           f"{', '.join(names)} is of a change of {', '.join(foreign(mine[0]))}",
                           listing)
    group = list({b.config: b for b in backups.group(first, every)}.values())

    def planner(ctx: Context) -> Plan:
        files = tuple(FileEdit(Path(b.config), ctx.read(Path(b.config)), backups.read(b),
                               owner=b.ownership) for b in group)
        for b, f in zip(group, files):
            _changed_since(ctx, backups, every, b, f.old, foreign)
        changes = tuple(Change(b.config, "restored", ABSENT, b.id) for b in group)
        return Plan(files, changes if any(f.changed for f in files) else (),
                    f"rollback to {first.id} ({engine.name})")

    return transact(engine, "rollback", planner, service=service, reporter=reporter,
                    timeout=timeout, dry_run=dry_run, state=st, require_daemon=require_daemon)


def _foreign(backups: Backups, every: list[Backup], b: Backup, config: str,
             names: list[str]) -> list[str]:
    """Why `b`'s transaction is not one of `config`'s (whose files are `names`): the config it
    recorded, or, in backups that record none, the files it changed that are not `config`'s."""
    group = backups.group(b, every)
    made_for = {x.for_config for x in group if x.for_config is not None}
    if made_for:
        return sorted(made_for - {config})
    return [x.config for x in group if x.config not in names]


def _changed_since(ctx: Context, backups: Backups, every: list[Backup], own: Backup,
                   now: bytes | None, foreign: Callable[[Backup], list[str]]) -> None:
    """Warn when the file of `own`, which a rollback restores (`now`: its bytes), was changed
    after `own`'s transaction by a change of another config (a shared drop-in) and does not
    hold what `own`'s transaction left: the rollback undoes that change too."""
    later = [b for b in every if b.config == own.config and (b.time, b.id) > (own.time, own.id)]
    if not later:
        return
    with contextlib.suppress(NvDockerError):  # a damaged backup: no proof it is back
        if now == backups.read(later[-1]):
            return  # what `own`'s transaction left, the next change's backup says
    for b in later:
        others = foreign(b)
        if others:
            ctx.warn(f"{own.config} was changed since by a change of {', '.join(others)} "
                     f"(backup {b.id}): restoring it undoes that change there too")
            return
