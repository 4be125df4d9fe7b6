"""install / uninstall / rollback, each as one transaction (SPEC §2).

    lock → read → edit → validate → daemon.check_candidate → backup → journal → compare
         → atomic write → daemon.reload → daemon.verify → (on failure: restore, reload, verify
         the old state)

SPEC §8: "compare" checks, right before the rename, that the file is still what was read; when
another program changed it, nothing is written and the transaction is redone from the read
(`_transact`, CHANGE_ATTEMPTS times). A file that cannot be renamed over is written in place,
with a warning.

Nothing here prints: every function returns a `Result` (or raises an `NvDockerError` with the
SPEC exit code) and reports live progress only through a `Reporter`. How dockerd is reloaded
and asked what it runs is behind the `Daemon` protocol; `NoDaemon` is `--reload none`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Protocol, Sequence

from nvdocker2 import locations
from nvdocker2.daemonjson import document, edit, store, validate
from nvdocker2.daemonjson.edit import ABSENT, Change
from nvdocker2.errors import (
    EXIT_REJECTED,
    BadInput,
    DockerdRejected,
    EnvironmentProblem,
    NvDockerError,
    RollbackFailed,
)
from nvdocker2.redact import mask_credentials, masked_text

CHANGE_ATTEMPTS = 3  # reads of a file another program keeps changing before giving up

# --- the Daemon slot ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """What dockerd must report through /info after a reload."""

    present: dict[str, str]  # runtime name -> path dockerd must report
    absent: tuple[str, ...]  # runtime names dockerd must no longer report
    default_runtime: str  # DefaultRuntime dockerd must report ("runc" when unset)


class VerifyFailed(NvDockerError):
    """dockerd did not report the expected state in time; `reason` is what it said."""

    exit_code = EXIT_REJECTED

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason, hint)
        self.reason = reason


class Daemon(Protocol):
    """How the running dockerd is told about a new daemon.json and checked afterwards."""

    strategy: str  # what goes into "reload" in --json / output ("none", "signal", ...)
    verifies: bool  # False for NoDaemon

    def check_candidate(self, config_path: Path, candidate: dict, candidate_file: Path) -> None:
        """Raise BadInput before anything is written (flag/file conflicts, ...)."""

    def reload(self) -> None:
        """Make dockerd read the file; raise EnvironmentProblem if it cannot."""

    def verify(self, expect: Expectation, timeout: float) -> str | None:
        """Raise VerifyFailed(reason) when dockerd does not report `expect` within `timeout`;
        return a warning when it does but its taking the file is not proven (SPEC §8)."""


class NoDaemon:
    """`--reload none`: the file is written, dockerd is neither reloaded nor asked."""

    strategy = "none"
    verifies = False

    def check_candidate(self, config_path: Path, candidate: dict, candidate_file: Path) -> None:
        return None

    def reload(self) -> None:
        return None

    def verify(self, expect: Expectation, timeout: float) -> None:
        return None


# --- reporting ---------------------------------------------------------------------------------


class Reporter:
    """Live progress for a person watching; the default says nothing. The CLI subclasses it."""

    def progress(self, message: str) -> None:
        return None

    def waiting(self, message: str) -> ContextManager[None]:
        return contextlib.nullcontext()


@dataclass(frozen=True)
class Result:
    """What a transaction did; the CLI renders it as text or as one JSON object."""

    action: str
    changed: bool
    config: str
    config_reason: str = ""
    backup: str | None = None
    backup_file: str | None = None
    reload: str = "none"
    verified: bool = False
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    dry_run: bool = False
    diff: str | None = None
    style: str = ""
    before: str | None = None  # the file's text before (None: no file), credentials masked
    after: str | None = None  # its text after, or what a dry run would write; masked

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "action": self.action,
            "changed": self.changed,
            "config": self.config,
            "config_reason": self.config_reason,
            "backup": self.backup,
            "backup_file": self.backup_file,
            "reload": self.reload,
            "verified": self.verified,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "changes": [c.to_json() for c in self.changes if c.changed],
            "dry_run": self.dry_run,
            "before": self.before,
            "after": self.after,
        }
        if self.dry_run:
            out["diff"] = self.diff or ""
        return out


@dataclass
class _Ctx:
    """Everything one transaction needs; built by the public functions below."""

    config: Path
    config_reason: str
    daemon: Daemon
    reporter: Reporter
    timeout: float
    state: Path
    dry_run: bool
    dockerd_log: Path | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _wrap_shape(config: Path, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except edit.ShapeError as e:
        raise BadInput(f"{config}: {e.message}", e.hint) from None


def unified_diff(config: Path, old: bytes, new: bytes | None) -> str:
    """The change as a unified diff (`new` None: the file is removed)."""
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = [] if new is None else new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(
        a,
        b,
        f"a{config}" if str(config).startswith("/") else f"a/{config}",
        f"b{config}" if str(config).startswith("/") else f"b/{config}",
    ):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        lines.append(line.replace("\r\n", "\n") if line.endswith("\r\n") else line)
    return mask_credentials("".join(lines))


def _runtimes(doc: dict) -> dict:
    rts = doc.get(edit.RUNTIMES, {})
    return rts if isinstance(rts, dict) else {}


def expectation(target: dict, before: dict, must_have: dict[str, str] | None = None) -> Expectation:
    """What dockerd must report once it runs `target` after running `before`.

    Only runtimes whose entries differ are checked (plus `must_have`), so an unrelated entry
    that dockerd reports differently cannot fail the change.
    """
    t, b = _runtimes(target), _runtimes(before)
    present: dict[str, str] = {}
    for name, entry in t.items():
        if document.same(entry, b.get(name, ABSENT)):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            present[name] = entry["path"]
    if must_have:
        present.update(must_have)
    absent = tuple(n for n in b if n not in t)
    d = target.get(edit.DEFAULT_RUNTIME)
    return Expectation(present, absent, d if isinstance(d, str) and d else "runc")


def transitional(target: dict, current: dict) -> dict | None:
    """The in-between file a SIGHUP reload needs, or None (SPEC §2).

    dockerd replaces its runtimes and default only when the keys are in the file: when `target`
    lacks them but `current` sets them, first reload a file holding `"runtimes": {}` and
    `"default-runtime": "runc"` (plus the rest of `target`), then write `target` itself.
    """
    need_rt = edit.RUNTIMES not in target and bool(_runtimes(current))
    cur_d = current.get(edit.DEFAULT_RUNTIME)
    need_d = (
        edit.DEFAULT_RUNTIME not in target and isinstance(cur_d, str) and cur_d not in ("", "runc")
    )
    if not (need_rt or need_d):
        return None
    out = dict(target)
    if need_rt:
        out[edit.RUNTIMES] = {}
    if need_d:
        out[edit.DEFAULT_RUNTIME] = "runc"
    return out


def _needs_transition(daemon: Daemon) -> bool:
    return bool(getattr(daemon, "needs_transition", daemon.strategy != "none"))


def _log_offset(log: Path | None) -> int:
    if log is None:
        return 0
    try:
        return os.path.getsize(log)
    except OSError:
        return 0


def _log_excerpt(log: Path | None, offset: int, lines: int = 3) -> str:
    """The last error lines dockerd logged since `offset`, for the exit-4 message."""
    if log is None:
        return ""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""
    picked = [
        ln.strip()
        for ln in text.splitlines()
        if "level=error" in ln or "level=fatal" in ln or "level=warn" in ln
    ]
    return " | ".join(picked[-lines:])


def _schema_check(ctx: _Ctx, new: dict) -> None:
    errors, warnings = validate.validate(new)
    for w in warnings:
        if f"{ctx.config}: {w}" not in ctx.warnings:
            ctx.warnings.append(f"{ctx.config}: {w}")
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise BadInput(
            f"{ctx.config}: the result would not be a valid daemon.json: {errors[0]}{more}",
            "fix that key in the file (dockerd would refuse it), then run again; "
            "nothing was changed",
        )


def _dockerd_check(ctx: _Ctx, staged: store.StagedFile) -> None:
    check = validate.dockerd_validate(staged.path)
    if check.available and not check.ok:
        why = check.output.splitlines()[-1] if check.output else "no reason given"
        raise BadInput(
            f"{ctx.config}: dockerd --validate refuses the result: {why}",
            "nothing was changed; fix the file or the flags dockerd runs with",
        )


@dataclass(frozen=True)
class _Plan:
    """One change of a config file: the bytes to end with (None: no file) and expectations."""

    old_doc: document.Document
    new_data: dict
    new_bytes: bytes | None
    reason: str
    expect: Expectation
    journal_record: dict | None = None  # None: leave the journal alone
    journal_before_write: bool = True
    create_as: store.Ownership | None = None  # mode/owner/group when the file is recreated


def _ensure_directory(ctx: _Ctx, create: bool = True) -> None:
    """Create the file's directory (0755) when only that last level is missing, e.g.
    /etc/docker before Docker is installed; a deeper missing path is a wrong --config.
    `create` False (a dry run) only checks."""
    d = store.resolve_target(ctx.config).parent
    if d.is_dir():
        return
    if not d.parent.is_dir():
        raise BadInput(
            f"{ctx.config}: directory {d.parent} does not exist",
            "check --config (nvdocker2 creates at most the file's own directory)",
        )
    if not create:
        return
    try:
        store.make_dirs(d, mode=0o755)
    except (FileExistsError, NotADirectoryError):
        raise BadInput(f"{ctx.config}: {d} is not a directory") from None
    except OSError as e:
        raise store.os_error(e, str(d)) from None
    ctx.notes.append(f"created the directory {d}")


def _check_candidates(
    ctx: _Ctx, plan: _Plan, trans: dict | None, stage_as: Path
) -> list[store.StagedFile]:
    """Stage every file the change writes (the transitional one first) as `stage_as` and run
    each check that comes before writing: `dockerd --validate` and the daemon's own (flag
    conflicts with the running dockerd, ...). Returns the staged files; none stay on failure.
    The apply and the dry run both come through here, so a dry run fails as the apply would.
    """
    files = []
    if trans is not None:
        files.append((plan.old_doc.serialize(trans), trans))
    if plan.new_bytes is not None:
        files.append((plan.new_bytes, plan.new_data))
    staged: list[store.StagedFile] = []
    try:
        for i, (data, doc) in enumerate(files):
            if i == 0:
                ctx.reporter.progress(f"checking the candidate {ctx.config}")
            s = store.stage(stage_as, data, owner=plan.create_as)
            staged.append(s)
            _dockerd_check(ctx, s)
            ctx.daemon.check_candidate(ctx.config, doc, s.path)
    except BaseException:
        for s in staged:
            s.discard()
        raise
    return staged


def _transition(ctx: _Ctx, plan: _Plan) -> dict | None:
    """The transitional file `plan` needs with this daemon first, or None."""
    if not _needs_transition(ctx.daemon):
        return None
    return transitional(plan.new_data, plan.old_doc.data)


def _dry_run_checks(ctx: _Ctx, plan: _Plan) -> None:
    """The checks of `_apply` before its first write, with the candidates staged in a private
    temp directory: nothing is created beside the file or in the state dir."""
    _ensure_directory(ctx, create=False)
    trans = _transition(ctx, plan)
    with tempfile.TemporaryDirectory(prefix="nvdocker2-dry-run-") as d:
        for s in _check_candidates(ctx, plan, trans, Path(d) / ctx.config.name):
            s.discard()


def _apply(ctx: _Ctx, plan: _Plan) -> tuple[store.Backup, bool]:
    """Write `plan` and make dockerd run it, or put everything back. Returns (backup, verified).

    Order: stage + check candidate(s) → backup → journal → write (transitional file first when
    dockerd needs one) → reload → verify → final file. Any failure after the first write
    restores the old bytes, reloads and verifies the old state (exit 4), or says which backup
    to restore by hand when that fails too (exit 5).
    """
    old = plan.old_doc
    daemon = ctx.daemon
    _ensure_directory(ctx)
    trans = _transition(ctx, plan)

    staged: list[store.StagedFile] = []
    try:
        staged = _check_candidates(ctx, plan, trans, ctx.config)
        backups = store.Backups(ctx.state)
        backup = backups.create(
            ctx.config,
            old.raw if old.existed else None,
            plan.reason,
            store.Ownership.of(old.stat),
        )
        ctx.reporter.progress(f"backup {backup.id} saved")
        journal = store.Journal(ctx.state, ctx.config)
        journal_old = journal.read_bytes()
        if plan.journal_record is not None and plan.journal_before_write:
            journal.write(plan.journal_record)
    except BaseException:
        for s in staged:
            s.discard()
        raise

    log_offset = _log_offset(ctx.dockerd_log)
    phase = "write"
    as_read = store.AsRead(old.raw if old.existed else None, old.stat)
    try:
        if staged:
            staged[0].commit(as_read)
            _note_in_place(ctx, staged[0], backup)
        else:
            store.atomic_remove(ctx.config, as_read)
        phase = "reload"
        verified = False
        if daemon.strategy != "none":
            what = " with the transitional file" if trans is not None else ""
            ctx.reporter.progress(f"reloading dockerd ({daemon.strategy}){what}")
        daemon.reload()
        phase = "verify"
        if daemon.verifies:
            with ctx.reporter.waiting("waiting for dockerd to report the change"):
                unproven = daemon.verify(plan.expect, ctx.timeout)
            verified = not unproven
            if unproven:
                ctx.warnings.append(unproven)
        phase = "final"
        if trans is not None:
            # Still the transitional file we wrote? (another program may have written since)
            ours = store.AsRead(old.serialize(trans))
            if plan.new_bytes is None:
                store.atomic_remove(ctx.config, ours)
            else:
                staged[1].commit(ours)
                _note_in_place(ctx, staged[1], backup)
        if plan.journal_record is not None and not plan.journal_before_write:
            journal.write(plan.journal_record)
    except BaseException as exc:
        for s in staged:
            s.discard()
        if phase == "write":
            with contextlib.suppress(Exception):
                journal.restore(journal_old)
            if isinstance(exc, store.ChangedMeanwhile):
                with contextlib.suppress(Exception):
                    backups.discard(backup)  # a backup of bytes that were never replaced
            raise
        _restore_after_failure(ctx, plan, backup, exc, reload_again=phase != "reload")
        with contextlib.suppress(Exception):
            journal.restore(journal_old)
        if isinstance(exc, VerifyFailed):
            excerpt = _log_excerpt(ctx.dockerd_log, log_offset)
            # The log the daemon found (its --dockerd-log, journal or stderr file) when it knows.
            where = str(ctx.dockerd_log) if ctx.dockerd_log else (
                getattr(ctx.daemon, "log_description", None) or "journalctl -u docker")
            hint = f"dockerd logged: {excerpt}" if excerpt else f"see dockerd's log ({where})"
            raise DockerdRejected(
                f"dockerd did not take the new {ctx.config}: {exc.reason}; the previous file was "
                f"restored from backup {backup.id} and dockerd reports the previous state again",
                hint,
            ) from None
        if isinstance(exc, NvDockerError):
            exc.message = f"{exc.message}; {ctx.config} was restored from backup {backup.id}"
        raise
    backups.prune(ctx.config)
    return backup, verified


def _note_in_place(ctx: _Ctx, staged: store.StagedFile, backup: store.Backup) -> None:
    if staged.in_place is None:
        return
    warning = (
        f"{ctx.config} cannot be replaced by a rename ({staged.in_place}; a bind mount?), so it "
        f"was written in place: this write is not atomic (the previous file is backup "
        f"{backup.id})"
    )
    if warning not in ctx.warnings:
        ctx.warnings.append(warning)


def _restore_after_failure(
    ctx: _Ctx, plan: _Plan, backup: store.Backup, exc: BaseException, reload_again: bool
) -> None:
    """Put the old bytes back and, when dockerd already took the new file (`reload_again`),
    reload and verify the old state; RollbackFailed (exit 5) naming the backup if that fails.

    When the reload itself failed dockerd never saw the new file, so only the file is restored.
    """
    old = plan.old_doc
    daemon = ctx.daemon
    by_hand = (
        f"cp {backup.file} {ctx.config}" if old.existed else f"rm {ctx.config}"
    ) + f", then: {locations.reload_hint(ctx.config)}"
    step = "write"

    def put_old() -> None:
        if old.existed:
            store.atomic_write(ctx.config, old.raw, owner=store.Ownership.of(old.stat))
        else:
            store.atomic_remove(ctx.config)

    try:
        if reload_again and daemon.strategy != "none":
            back = transitional(old.data, plan.new_data) if _needs_transition(daemon) else None
            if back is not None:
                store.atomic_write(ctx.config, old.serialize(back))
            else:
                put_old()
            step = "reload"
            ctx.reporter.progress(f"reloading dockerd ({daemon.strategy}) with the previous file")
            daemon.reload()
            if daemon.verifies:
                step = "verify"
                with ctx.reporter.waiting("waiting for dockerd to report the previous state"):
                    daemon.verify(expectation(old.data, plan.new_data), ctx.timeout)
            if back is not None:
                step = "write"
                put_old()
        else:
            put_old()
    except BaseException as e2:
        why = e2.message if isinstance(e2, NvDockerError) else _msg(e2)
        saved = str(backup.file) if old.existed else "(there was no file)"
        raise RollbackFailed(
            f"{ctx.config}: the change failed ({_msg(exc)}) and putting the previous state back "
            f"failed at the {step} step too: {why}; the previous file is backup {saved}",
            f"restore by hand: {by_hand}",
        ) from None


def _msg(exc: BaseException) -> str:
    if isinstance(exc, NvDockerError):
        return exc.message
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _session(ctx: _Ctx) -> Iterator[None]:
    """The lock and the removal of stale temp files (not for --dry-run, which touches nothing)."""
    if ctx.dry_run:
        yield
        return
    with store.locked(ctx.state, ctx.timeout):
        removed = store.clean_stale_temps(ctx.config)
        store.clean_state_temps(ctx.state)
        for p in removed:
            ctx.notes.append(f"removed {p}, left behind by an interrupted earlier run")
        yield


def _transact(ctx: _Ctx, attempt: Callable[[], Result]) -> Result:
    """Run `attempt` (read → edit → … → write) under the lock; when another program changed the
    file between our read and our rename, nothing was written: redo it from the read, at most
    CHANGE_ATTEMPTS times in all (SPEC §8), else exit 3."""
    with _session(ctx):
        for n in range(1, CHANGE_ATTEMPTS + 1):
            warnings, notes = len(ctx.warnings), len(ctx.notes)
            try:
                return attempt()
            except store.ChangedMeanwhile as e:
                if n == CHANGE_ATTEMPTS:
                    raise EnvironmentProblem(
                        f"{ctx.config} was changed by another program {n} times while "
                        f"nvdocker2 was editing it ({e.why}); gave up, nothing was written",
                        e.hint,
                    ) from None
                del ctx.warnings[warnings:], ctx.notes[notes:]
                ctx.notes.append(
                    f"{ctx.config} was changed by another program meanwhile ({e.why}); "
                    "read it again and redid the change"
                )
    raise AssertionError("not reached")  # pragma: no cover


def _result(
    ctx: _Ctx,
    action: str,
    changed: bool,
    doc: document.Document,
    changes: Sequence[Change],
    backup: store.Backup | None = None,
    verified: bool = False,
    diff: str | None = None,
    after: bytes | None = None,
) -> Result:
    return Result(
        action=action,
        changed=changed,
        config=str(ctx.config),
        config_reason=ctx.config_reason,
        backup=backup.id if backup else None,
        backup_file=str(backup.file) if backup and backup.existed else None,
        reload=ctx.daemon.strategy if changed and not ctx.dry_run else "none",
        verified=verified,
        warnings=tuple(ctx.warnings),
        notes=tuple(ctx.notes),
        changes=tuple(changes),
        dry_run=ctx.dry_run,
        diff=diff,
        style=doc.style.describe(),
        before=masked_text(doc.raw if doc.existed else None),
        after=masked_text(after),
    )


def _finish(
    ctx: _Ctx,
    action: str,
    doc: document.Document,
    new_data: dict,
    new_bytes: bytes | None,
    changes: list[Change],
    reason: str,
    expect: Expectation,
    journal_record: dict | None = None,
    journal_before_write: bool = True,
    create_as: store.Ownership | None = None,
) -> Result:
    """Shared tail: unchanged → say so; dry run → diff; else apply."""
    unchanged = (new_bytes == doc.raw and doc.existed) or (new_bytes is None and not doc.existed)
    if unchanged:
        verified = not ctx.dry_run and _settle(ctx, expect)
        return _result(
            ctx, action, False, doc, changes, verified=verified,
            after=doc.raw if doc.existed else None,
        )
    plan = _Plan(
        doc, new_data, new_bytes, reason, expect, journal_record, journal_before_write, create_as
    )
    if ctx.dry_run:
        _dry_run_checks(ctx, plan)
        return _result(
            ctx, action, True, doc, changes, diff=unified_diff(ctx.config, doc.raw, new_bytes),
            after=new_bytes,
        )
    backup, verified = _apply(ctx, plan)
    if ctx.daemon.strategy == "none":
        ctx.notes.append(
            "dockerd was not reloaded; to apply the change run: "
            + locations.reload_hint(ctx.config)
        )
    return _result(ctx, action, True, doc, changes, backup, verified, after=new_bytes)


def _settle(ctx: _Ctx, expect: Expectation) -> bool:
    """Reload an unchanged file that dockerd is not running; True when that was done.

    An earlier run stopped between its rename and its reload (SIGKILL, power cut) leaves the
    file right and dockerd on the old one: the next run writes nothing, so it must reload.
    """
    lags = getattr(ctx.daemon, "lags_behind", None)
    if lags is None or not lags(expect):
        return False
    ctx.notes.append("dockerd was not running this file (an earlier run was interrupted): reloaded")
    ctx.daemon.reload()
    unproven = ctx.daemon.verify(expect, ctx.timeout)
    if unproven:
        ctx.warnings.append(unproven)
    return not unproven


def _ctx(
    config: Path,
    config_reason: str,
    daemon: Daemon | None,
    reporter: Reporter | None,
    timeout: float,
    dry_run: bool,
    state: Path | None,
    dockerd_log: Path | None,
) -> _Ctx:
    validate.preload()  # the slow import happens before the lock is taken
    return _Ctx(
        config=Path(config),
        config_reason=config_reason,
        daemon=daemon or NoDaemon(),
        reporter=reporter or Reporter(),
        timeout=timeout,
        state=state if state is not None else store.state_dir(),
        dry_run=dry_run,
        dockerd_log=dockerd_log,
    )


def _load(ctx: _Ctx) -> document.Document:
    doc = document.load(ctx.config)
    ctx.warnings.extend(doc.warnings)
    return doc


# --- public transactions -----------------------------------------------------------------------


def install(
    config: Path,
    *,
    runtime_name: str = "nvidia",
    runtime_path: str,
    runtime_args: Sequence[str] = (),
    set_default: bool = False,
    dry_run: bool = False,
    daemon: Daemon | None = None,
    reporter: Reporter | None = None,
    timeout: float = 30.0,
    config_reason: str = "",
    state: Path | None = None,
    dockerd_log: Path | None = None,
) -> Result:
    """Add (or update) the runtime entry, optionally make it the default (SPEC §2)."""
    ctx = _ctx(config, config_reason, daemon, reporter, timeout, dry_run, state, dockerd_log)
    edit.check_name(runtime_name, adding=True)
    entry = edit.runtime_entry(runtime_path, list(runtime_args) or None)

    def attempt() -> Result:
        doc = _load(ctx)
        new, ch = _wrap_shape(
            ctx.config,
            lambda: edit.add_runtime(
                doc.data, runtime_name, runtime_path, list(runtime_args) or None
            ),
        )
        changes = [ch]
        if set_default:
            new, ch2 = _wrap_shape(ctx.config, lambda: edit.set_default(new, runtime_name))
            changes.append(ch2)
        data_changed = any(c.changed for c in changes)
        new_bytes = doc.serialize(new) if (data_changed or doc.changed_by_loading) else doc.raw
        if not doc.existed:
            new_bytes = doc.serialize(new)
        if data_changed or not doc.existed or new_bytes != doc.raw:
            _schema_check(ctx, new)
        else:
            _, warns = validate.validate(new)
            ctx.warnings.extend(f"{ctx.config}: {w}" for w in warns)

        # Record what install replaces, unless an earlier install already recorded it.
        journal = store.Journal(ctx.state, ctx.config)
        record = None
        if not dry_run and data_changed:
            rec = dict(journal.load() or {"config": str(ctx.config), "runtimes": {}})
            rts = dict(rec.get("runtimes") or {})
            if not rts:
                rec["file"] = {"existed": doc.existed}
                rec["runtimes_key"] = {"present": edit.RUNTIMES in doc.data}
            prev = rts.get(runtime_name)
            before = _runtimes(doc.data).get(runtime_name, ABSENT)
            rts[runtime_name] = {
                "previous": prev["previous"]
                if isinstance(prev, dict) and "previous" in prev
                else store.slot(before),
                "installed": entry,
            }
            rec["runtimes"] = rts
            if set_default and changes[-1].changed:
                prevd = rec.get("default_runtime")
                rec["default_runtime"] = {
                    "previous": prevd["previous"]
                    if isinstance(prevd, dict) and "previous" in prevd
                    else store.slot(doc.data.get(edit.DEFAULT_RUNTIME, ABSENT)),
                    "installed": runtime_name,
                }
            record = rec
        expect = expectation(new, doc.data, must_have={runtime_name: runtime_path})
        return _finish(
            ctx,
            "install",
            doc,
            new,
            new_bytes,
            changes,
            f"install runtime {runtime_name}",
            expect,
            record,
        )

    return _transact(ctx, attempt)


def uninstall(
    config: Path,
    *,
    runtime_name: str = "nvidia",
    own_runtime_paths: Sequence[str] = (),
    dry_run: bool = False,
    daemon: Daemon | None = None,
    reporter: Reporter | None = None,
    timeout: float = 30.0,
    config_reason: str = "",
    state: Path | None = None,
    dockerd_log: Path | None = None,
) -> Result:
    """Put back what install replaced, from the journal; without a journal entry remove the
    runtime only when it points at one of `own_runtime_paths` (this package's runtime).
    Never leaves default-runtime naming a runtime that no longer exists."""
    ctx = _ctx(config, config_reason, daemon, reporter, timeout, dry_run, state, dockerd_log)
    edit.check_name(runtime_name, adding=False)

    def attempt() -> Result:
        doc = _load(ctx)
        _wrap_shape(ctx.config, lambda: edit.check_shape(doc.data))
        journal = store.Journal(ctx.state, ctx.config)
        rec = journal.load()
        rts_rec = dict(rec.get("runtimes") or {})
        mine = rts_rec.get(runtime_name)
        new = doc.data
        changes: list[Change] = []
        current = _runtimes(doc.data).get(runtime_name, ABSENT)
        if isinstance(mine, dict):
            previous = store.unslot(mine.get("previous"))
            new, ch = edit.put_runtime(new, runtime_name, previous)
            changes.append(ch)
            del rts_rec[runtime_name]
            if not rts_rec and not (rec.get("runtimes_key") or {}).get("present", True):
                new, ch = edit.drop_empty_runtimes(new)
                changes.append(ch)
            drec = rec.get("default_runtime")
            if isinstance(drec, dict) and drec.get("installed") == runtime_name:
                previous = store.unslot(drec.get("previous"))
                now = new.get(edit.DEFAULT_RUNTIME)
                # "runc" with no default before is what the transitional file of an
                # uninstall that was killed after its reload left: finish that uninstall.
                if now == runtime_name or (now == "runc" and previous is ABSENT):
                    new, ch = edit.put_default(new, previous)
                    changes.append(ch)
                rec = {k: v for k, v in rec.items() if k != "default_runtime"}
            rec = dict(rec, runtimes=rts_rec)
        elif current is not ABSENT:
            path = current.get("path") if isinstance(current, dict) else None
            if isinstance(path, str) and any(
                locations.same_file(path, p) for p in own_runtime_paths
            ):
                new, ch = edit.remove_runtime(new, runtime_name)
                changes.append(ch)
            else:
                ctx.warnings.append(
                    f'{ctx.config}: runtime "{runtime_name}" points at {path!r}, not at this '
                    f"package's runtime ({', '.join(own_runtime_paths) or 'unknown'}), and no "
                    "install of it was recorded: left in place"
                )
            rec = None
        else:
            rec = None
        if edit.dangling_default(new) == runtime_name:
            new, ch = edit.unset_default(new)
            changes.append(ch)
            ctx.notes.append(
                f'removed "default-runtime": "{runtime_name}" (it named the removed runtime; '
                "dockerd now uses runc)"
            )
        data_changed = any(c.changed for c in changes)
        new_bytes: bytes | None = doc.serialize(new) if data_changed else doc.raw
        file_rec = (rec or {}).get("file")
        created_by_install = isinstance(file_rec, dict) and file_rec.get("existed") is False
        if not doc.existed or (created_by_install and not rts_rec and new == {}):
            new_bytes = None
        if data_changed:
            _schema_check(ctx, new)
        record = rec if (rec is not None and not dry_run) else None
        if record is not None and not data_changed:
            # Nothing to change in the file, but the journal entry is now stale.
            journal.write(record)
        expect = expectation(new, doc.data)
        return _finish(
            ctx,
            "uninstall",
            doc,
            new,
            new_bytes,
            changes,
            f"uninstall runtime {runtime_name}",
            expect,
            record,
            journal_before_write=False,
        )

    return _transact(ctx, attempt)


def rollback(
    config: Path | None,
    backup_id: str | None = None,
    *,
    dry_run: bool = False,
    daemon: Daemon | None = None,
    reporter: Reporter | None = None,
    timeout: float = 30.0,
    config_reason: str = "",
    state: Path | None = None,
    dockerd_log: Path | None = None,
) -> Result:
    """Restore the newest backup of `config` (or `backup_id`); the current file is backed up
    first, so a rollback can itself be rolled back."""
    st = state if state is not None else store.state_dir()
    backups = store.Backups(st)
    if backup_id:
        b = backups.get(backup_id)
        if config is not None and str(config) != b.config:
            raise BadInput(
                f"backup {backup_id} is of {b.config}, not of {config}",
                f"run: nvdocker2 rollback {backup_id} --config {b.config}",
            )
        config = Path(b.config)
        config_reason = config_reason or "the file this backup was taken of"
    else:
        assert config is not None
        found = backups.all(config)
        if not found:
            raise BadInput(
                f"no backups of {config} in {backups.dir}",
                "nothing to roll back to; list backups with: nvdocker2 backups",
            )
        b = found[0]
    ctx = _ctx(config, config_reason, daemon, reporter, timeout, dry_run, st, dockerd_log)

    def attempt() -> Result:
        doc = _load(ctx)
        data = backups.read(b)
        if data is None:
            target = document.empty(str(ctx.config))
        else:
            try:
                target = document.parse(data, f"backup {b.file}")
            except BadInput as e:
                raise BadInput(
                    f"{e.message} (the backup cannot be read as JSON, so it is not restored "
                    "automatically)",
                    f"if you really want it back: cp {b.file} {ctx.config}",
                ) from None
            if target.had_bom or not data.strip():
                ctx.warnings.append(
                    f"backup {b.id} is empty or starts with a byte order mark; dockerd 20.10 "
                    "refuses such a file at start"
                )
        change = Change(str(ctx.config), "restored", ABSENT, b.id)
        expect = expectation(target.data, doc.data)
        res = _finish(
            ctx,
            "rollback",
            doc,
            target.data,
            data,
            [change],
            f"rollback to {b.id}",
            expect,
            create_as=b.ownership,
        )
        if not res.changed:
            return Result(**{**res.__dict__, "changes": ()})
        return res

    return _transact(ctx, attempt)
