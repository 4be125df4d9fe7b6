"""DockerEngine: daemon.json edits planned for the engine transaction (reference §2, §8, §9).

The document format (parse with the style kept, pure edits, schema, `dockerd --validate`) is
`daemonjson/`; dockerd as the service is `service.DaemonService`. `install` and `uninstall`
plan from a Request through `transaction.run` like every engine; `rollback` restores
daemon.json and the other files of its change (CDI mode's spec, `cdi.py`, plans through the
same engine).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from nvdocker2 import locations
from nvdocker2.engines.docker import cdi_journal, rootless, runtime_mode
from nvdocker2.engines.docker.daemonjson import document, edit, validate
from nvdocker2.store.atomic import Ownership, resolve_target
from nvdocker2.store.backups import Backup, Backups
from nvdocker2.store.journal import slot, unslot
from nvdocker2.store.lock import state_dir
from nvdocker2.store.probes import Probes
from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.base import EngineBase, FileEdit, Plan, Reader, Request
from nvdocker2.engines.docker.service import (
    DaemonService,
    Expectation,
    NoDaemon,
    expectation,
    needs_transition,
    transitional,
)
from nvdocker2.engines import transaction as txn
from nvdocker2.engines.transaction import Context, Reporter, Result, transact
from nvdocker2.errors import BadInput, DaemonUnreachable


def wrap_shape(config: Path, fn: Callable[[], Any]) -> Any:
    """`fn()`, with an edit's ShapeError (a key of the wrong type) as BadInput."""
    try:
        return fn()
    except edit.ShapeError as e:
        raise BadInput(f"{config}: {e.message}", e.hint) from None


class Says(Protocol):
    """Where a plan's warnings go: the transaction's Context, or a plan's own `Said`."""

    warnings: list[str]

    def warn(self, message: str) -> None: ...


@dataclass
class Said:
    """The warnings and notes of one plan, carried by the plan it makes."""

    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def into(self, plan: Plan) -> Plan:
        return dataclasses.replace(plan, warnings=tuple(self.warnings) + plan.warnings,
                                   notes=tuple(self.notes) + plan.notes)


class DockerEngine(EngineBase):
    name = "docker"
    process = "dockerd"
    groups_backups = False  # rollback restores one file: daemon.json's newest backup

    def __init__(self, config: Path, daemon: Any = None, config_reason: str = "",
                 dockerd_log: Path | None = None, user_config: Path | None = None,
                 mode: tuple[str, Path] | None = None) -> None:
        super().__init__(config)
        self.daemon = daemon or NoDaemon()
        self.reason = config_reason
        self.dockerd_log = dockerd_log
        # Rootless Docker: the runtime's per-user config.toml install sets no-cgroups in.
        self.user_config = user_config
        # install --mode direct|legacy: (the mode, the runtime's config.toml it goes in).
        self.mode = mode

    @property
    def config_reason(self) -> str:
        return self.reason

    def service(self) -> DaemonService:
        return DaemonService(self.daemon, self.dockerd_log)

    def restart_hint(self) -> str:
        # A daemon that knows better (CDI mode: a restart, not a reload) says what to run.
        return getattr(self.daemon, "apply_hint", None) or locations.reload_hint(self.config)

    def pending_note(self, plan: Plan) -> str | None:
        main = next(f for f in plan.files if f.path == self.config)
        if not main.changed:
            return None
        return "dockerd was not reloaded; to apply the change run: " + self.restart_hint()

    # --- the document ---------------------------------------------------------------------

    def load(self, ctx: Says) -> document.Document:
        doc = document.load(self.config)
        ctx.warnings.extend(doc.warnings)
        return doc

    def schema_check(self, ctx: Says, new: dict[str, Any]) -> None:
        errors, warnings = validate.validate(new)
        for w in warnings:
            ctx.warn(f"{self.config}: {w}")
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise BadInput(
                f"{self.config}: the result would not be a valid daemon.json: {errors[0]}{more}",
                "fix that key in the file (dockerd would refuse it), then run again; "
                "nothing was changed",
            )

    def _check_directory(self) -> None:
        """nvdocker2 creates at most the file's own directory (e.g. /etc/docker before Docker
        is installed); a deeper missing path is a wrong --config."""
        d = resolve_target(self.config).parent
        if not d.is_dir() and not d.parent.is_dir():
            raise BadInput(
                f"{self.config}: directory {d.parent} does not exist",
                "check --config (nvdocker2 creates at most the file's own directory)",
            )

    def check_candidate(self, ctx: Context, plan: Plan,
                        staged: Sequence[tuple[Path, bytes, Path]]) -> None:
        """`dockerd --validate` and the daemon's own checks (flag conflicts with the running
        dockerd, ...) on every version of daemon.json the change writes."""
        first = True
        for target, data, path in staged:
            if target != self.config:
                continue
            if first:
                ctx.reporter.progress(f"checking the candidate {self.config}")
                first = False
            # The running dockerd's version, where the daemon knows it: below 23, no probe.
            version = getattr(self.daemon, "server_version", None)
            server = version() if version else None
            # A dockerd found to lack --validate is recorded in the state directory (not by a
            # dry run) and not run again until that binary changes.
            check = validate.dockerd_validate(path, server_version=server,
                                              probes=Probes(ctx.state), remember=not ctx.dry_run)
            if check.available and not check.ok:
                why = check.output.splitlines()[-1] if check.output else "no reason given"
                raise BadInput(
                    f"{self.config}: dockerd --validate refuses the result: {why}",
                    "nothing was changed; fix the file or the flags dockerd runs with",
                )
            try:
                self.daemon.check_candidate(self.config, plan.check[data], path)
            except DaemonUnreachable as e:
                from nvdocker2.engines.docker.service.daemon import check_candidate_against

                ctx.unreachable(e)  # a change stops here; a dry run goes on without dockerd
                check_candidate_against(None, self.config, plan.check[data], path, server)

    def plan(self, doc: document.Document, new: dict[str, Any], new_bytes: bytes | None,
             changes: Sequence[Change], reason: str, expect: Expectation,
             journal: dict[str, Any] | None = None, *, journal_before_write: bool = True,
             create_as: Ownership | None = None, extras: Sequence[FileEdit] = (),
             journal_file: Any = None) -> Plan:
        """daemon.json going from `doc` to `new_bytes` (the data `new`), the `extras` written
        before it; with the in-between file a reload needs when it drops runtimes."""
        old = doc.raw if doc.existed else None
        main = FileEdit(self.config, old, new_bytes, reason, doc.stat, create_as)
        via: dict[Path, bytes] = {}
        back: dict[Path, bytes] = {}
        check: dict[bytes, dict[str, Any]] = {}
        notes: tuple[str, ...] = ()
        if main.changed:
            self._check_directory()
            if new_bytes is not None:
                check[new_bytes] = new
            if needs_transition(self.daemon):
                running = getattr(self.daemon, "running_default", lambda: None)()
                trans = transitional(new, doc.data, running)
                if trans is not None and transitional(new, doc.data) is None:
                    notes += (f'dockerd runs the default runtime "{running}", which '
                              f'{self.config} does not name: it is reloaded with '
                              '"default-runtime": "runc" first, as the file says',)
                if trans is not None:
                    via[self.config] = doc.serialize(trans)
                    check[via[self.config]] = trans
                back_doc = transitional(doc.data, new)
                if back_doc is not None:
                    back[self.config] = doc.serialize(back_doc)
        return Plan(
            files=tuple(extras) + (main,), changes=tuple(changes), reason=reason,
            journal=journal, expect=expect, expect_old=expectation(doc.data, new),
            journal_before_write=journal_before_write, journal_file=journal_file,
            via=via, back_via=back, check=check, style=doc.style.describe(),
            undo_made_dirs=False, notes=notes,
        )

    # --- the three transactions' plans ----------------------------------------------------

    def plan_install(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        """Add (or update) the runtime entry of `req`, `req.extra["runtime_args"]` its
        runtimeArgs; make it the default with `req.set_default`."""
        said = Said()
        runtime_name, runtime_path = req.runtime_name, req.runtime_path
        set_default = req.set_default
        doc = self.load(said)
        args = list(req.extra.get("runtime_args", ())) or None
        new, ch = wrap_shape(self.config,
                             lambda: edit.add_runtime(doc.data, runtime_name, runtime_path, args))
        changes = [ch]
        if set_default:
            new, ch2 = wrap_shape(self.config, lambda: edit.set_default(new, runtime_name))
            changes.append(ch2)
        data_changed = any(c.changed for c in changes)
        new_bytes = doc.serialize(new) if (data_changed or doc.changed_by_loading) else doc.raw
        if not doc.existed:
            new_bytes = doc.serialize(new)
        if data_changed or not doc.existed or new_bytes != doc.raw:
            self.schema_check(said, new)
        else:
            _, warns = validate.validate(new)
            said.warnings.extend(f"{self.config}: {w}" for w in warns)
        record = None
        if data_changed:
            record = self._install_record(journal, doc, runtime_name,
                                          edit.runtime_entry(runtime_path, args),
                                          set_default and changes[-1].changed)
        extras: list[FileEdit] = []
        if self.user_config is not None:
            user = self.user_config
            rootless.check_trusted(user)
            old_user = read(user)
            new_user, ch_user, rec_user = rootless.set_no_cgroups(old_user, user)
            changes.append(ch_user)
            extras.append(FileEdit(user, old_user, new_user, f"install {rootless.KEY} "
                                   f"for rootless Docker ({self.config})"))
            if rec_user is not None:
                record = record or dict(journal or {"config": str(self.config)})
                record.setdefault(rootless.JOURNAL_KEY, rec_user)
        if self.mode is not None:
            mode_edit, ch_mode, record = self._set_mode(read, journal, record)
            changes.append(ch_mode)
            extras.append(mode_edit)
        expect = expectation(new, doc.data, must_have={runtime_name: runtime_path})
        return said.into(self.plan(doc, new, new_bytes, changes,
                                   f"install runtime {runtime_name}", expect, record,
                                   extras=extras))

    def _set_mode(self, read: Reader, journal: dict[str, Any], record: dict[str, Any] | None
                  ) -> tuple[FileEdit, Change, dict[str, Any] | None]:
        """install --mode: config.toml's edit, and the journal record with what it replaced."""
        assert self.mode is not None
        mode, path = self.mode
        runtime_mode.check_trusted(path)
        old = read(path)
        new, change, rec = runtime_mode.set_mode(old, path, mode)
        base = record or dict(journal or {"config": str(self.config)})
        merged = runtime_mode.record_install(base, path, rec, mode)
        if merged is not base or record is not None:
            record = merged
        return (FileEdit(path, old, new, f"install {runtime_mode.TABLE} {runtime_mode.KEY} = "
                         f"{mode} ({self.config})"), change, record)

    def _install_record(self, journal: dict[str, Any], doc: document.Document, runtime_name: str,
                        entry: dict[str, Any], default_set: bool) -> dict[str, Any]:
        """What install replaces, unless an earlier install already recorded it."""
        rec = dict(journal or {"config": str(self.config), "runtimes": {}})
        rts = dict(rec.get("runtimes") or {})
        if not rts:
            rec["file"] = {"existed": doc.existed}
            if doc.had_bom:  # dropped by this install (dockerd 20.10 refuses it); uninstall
                rec["file"]["bom"] = True  # puts it back with the rest of the bytes
            rec["runtimes_key"] = {"present": edit.RUNTIMES in doc.data}
        prev = rts.get(runtime_name)
        before = edit.runtimes(doc.data).get(runtime_name, ABSENT)
        rts[runtime_name] = {
            "previous": prev["previous"] if isinstance(prev, dict) and "previous" in prev
            else slot(before),
            "installed": entry,
        }
        rec["runtimes"] = rts
        if default_set:
            prevd = rec.get("default_runtime")
            rec["default_runtime"] = {
                "previous": prevd["previous"] if isinstance(prevd, dict) and "previous" in prevd
                else slot(doc.data.get(edit.DEFAULT_RUNTIME, ABSENT)),
                "installed": runtime_name,
            }
        return rec

    def plan_uninstall(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        """Put back what install replaced, from the journal; without a journal entry remove
        the runtime only when it points at one of `req.own_runtime_paths` (this package's
        runtime). Never leaves default-runtime naming a runtime that no longer exists."""
        said = Said()
        runtime_name, own_runtime_paths = req.runtime_name, req.own_runtime_paths
        doc = self.load(said)
        wrap_shape(self.config, lambda: edit.check_shape(doc.data))
        rec: dict[str, Any] | None  # None: the journal is left as it is
        rec = dict(journal)
        rts_rec = dict(rec.get("runtimes") or {})
        mine = rts_rec.get(runtime_name)
        new = doc.data
        changes: list[Change] = []
        current = edit.runtimes(doc.data).get(runtime_name, ABSENT)
        if isinstance(mine, dict):
            previous = unslot(mine.get("previous"))
            new, ch = edit.put_runtime(new, runtime_name, previous)
            changes.append(ch)
            del rts_rec[runtime_name]
            if not rts_rec and not (rec.get("runtimes_key") or {}).get("present", True):
                new, ch = edit.drop_empty_runtimes(new)
                changes.append(ch)
            drec = rec.get("default_runtime")
            if isinstance(drec, dict) and drec.get("installed") == runtime_name:
                previous = unslot(drec.get("previous"))
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
                said.warnings.append(
                    f'{self.config}: runtime "{runtime_name}" points at {path!r}, not at this '
                    f"package's runtime ({', '.join(own_runtime_paths) or 'unknown'}), and no "
                    "install of it was recorded: left in place"
                )
            rec = None
        else:
            rec = None
        if edit.dangling_default(new) == runtime_name:
            new, ch = edit.unset_default(new)
            changes.append(ch)
            said.notes.append(
                f'removed "default-runtime": "{runtime_name}" (it named the removed runtime; '
                "dockerd now uses runc)"
            )
        data_changed = any(c.changed for c in changes)
        extras, remove_dirs = self._put_back_user_config(read, said, rec, changes) \
            if isinstance(mine, dict) and rec is not None and not rts_rec else ([], ())
        if extras and rec is not None:
            rec = {k: v for k, v in rec.items() if k != rootless.JOURNAL_KEY}
        new_bytes: bytes | None = doc.serialize(new) if data_changed else doc.raw
        file_rec = (rec or {}).get("file")
        created_by_install = isinstance(file_rec, dict) and file_rec.get("existed") is False
        if not doc.existed or (created_by_install and not rts_rec and new == {}):
            new_bytes = None
        if (new_bytes is not None and data_changed and not rts_rec and isinstance(file_rec, dict)
                and file_rec.get("bom") and not new_bytes.startswith(document.BOM)):
            new_bytes = document.BOM + new_bytes
            said.notes.append("put back the UTF-8 byte order mark that install dropped")
        if data_changed:
            self.schema_check(said, new)
        record = rec
        if not rts_rec:
            record, remove_dirs = self._put_back_mode(read, said, journal, record, changes,
                                                      extras, remove_dirs)
        plan = said.into(self.plan(doc, new, new_bytes, changes,
                                   f"uninstall runtime {runtime_name}",
                                   expectation(new, doc.data), record,
                                   journal_before_write=False, extras=extras))
        return dataclasses.replace(plan, remove_dirs=remove_dirs) if remove_dirs else plan

    def _put_back_mode(self, read: Reader, ctx: Says, full: dict[str, Any],
                       record: dict[str, Any] | None, changes: list[Change],
                       extras: list[FileEdit], remove_dirs: Sequence[Path]
                       ) -> tuple[dict[str, Any] | None, tuple[Path, ...]]:
        """config.toml as it was before install --mode (its journal entry `full` records),
        appended to `extras`; the journal record to write without that entry, and the
        directories to remove (the file's, when install made it)."""
        mrec = full.get(runtime_mode.JOURNAL_KEY)
        if not isinstance(mrec, dict) or not isinstance(mrec.get("path"), str):
            return record, tuple(remove_dirs)
        runtime_mode.check_trusted(Path(mrec["path"]))
        file, made_dir = _put_back_toml(read, ctx, mrec, runtime_mode.put_back, changes,
                                        f"uninstall {runtime_mode.TABLE} {runtime_mode.KEY} "
                                        f"({self.config})")
        extras.append(file)
        base = record if record is not None else full
        record = {k: v for k, v in base.items() if k != runtime_mode.JOURNAL_KEY}
        return record, tuple(remove_dirs) + made_dir

    def _put_back_user_config(self, read: Reader, ctx: Says, rec: dict[str, Any],
                              changes: list[Change]) -> tuple[list[FileEdit], tuple[Path, ...]]:
        """The per-user config.toml as it was before install set no-cgroups (its journal
        entry), when install set it; with its directory, when install made that."""
        urec = rec.get(rootless.JOURNAL_KEY)
        if not isinstance(urec, dict) or not isinstance(urec.get("path"), str):
            return [], ()
        file, made_dir = _put_back_toml(read, ctx, urec, rootless.put_back, changes,
                                        f"uninstall {rootless.KEY} for rootless Docker "
                                        f"({self.config})")
        return [file], made_dir

    def plan_rollback(self, ctx: Context, backup: Backup | None,
                      others: Sequence[Backup] = ()) -> Plan:
        """daemon.json back to the bytes of `backup` (it must read as JSON; None: daemon.json
        stays), and each of `others` (the rest of its transaction: the CDI spec) to its own."""
        doc = self.load(ctx)
        backups = Backups(ctx.state)
        data = backups.read(backup) if backup is not None else doc.raw
        if backup is None:
            target = doc
        elif data is None:
            target = document.empty(str(self.config))
        else:
            try:
                target = document.parse(data, f"backup {backup.file}")
            except BadInput as e:
                raise BadInput(
                    f"{e.message} (the backup cannot be read as JSON, so it is not restored "
                    "automatically)",
                    f"if you really want it back: cp {backup.file} {self.config}",
                ) from None
            if target.had_bom or not data.strip():
                ctx.warnings.append(
                    f"backup {backup.id} is empty or starts with a byte order mark; dockerd "
                    "20.10 refuses such a file at start"
                )
        if backup is None and not doc.existed:
            data = None
        extras = [FileEdit(Path(b.config), ctx.read(Path(b.config)), backups.read(b),
                           f"rollback to {b.id}", owner=b.ownership) for b in others]
        changes = [Change(str(x.path), "restored", ABSENT, b.id)
                   for x, b in zip(extras, others) if x.changed]
        if backup is not None:
            changes.append(Change(str(self.config), "restored", ABSENT, backup.id))
        first = backup or others[0]
        record = None if ctx.dry_run else self._settled_record(ctx, target.data)
        plan = self.plan(doc, target.data, data, changes, f"rollback to {first.id}",
                         expectation(target.data, doc.data), record,
                         journal_before_write=False, extras=extras,
                         create_as=backup.ownership if backup is not None else None)
        return plan if plan.changed else dataclasses.replace(plan, changes=())

    def _settled_record(self, ctx: Context, restored: dict[str, Any]) -> dict[str, Any] | None:
        """The journal once the file holds `restored`: the installs it undid are forgotten
        (a runtime or default no longer as install left it), so a later uninstall puts back
        what was there before the installs that remain. None: the journal stays as it is."""
        rec = ctx.journal().load()
        if not rec:
            return None
        have = edit.runtimes(restored)
        rts = {name: r for name, r in (rec.get("runtimes") or {}).items()
               if isinstance(r, dict) and name in have and have[name] == r.get("installed")}
        settled = dict(rec, runtimes=rts)
        drec = rec.get("default_runtime")
        if isinstance(drec, dict):
            now = restored.get(edit.DEFAULT_RUNTIME)
            if now in rts:  # an install that remains set it (its "previous" is the first one's)
                settled["default_runtime"] = dict(drec, installed=now)
            else:
                del settled["default_runtime"]
        return None if settled == rec else settled

    # --- the Request entry points every engine has ---------------------------------------

    def rollback(self, backup_id: str | None, **kw: Any) -> Result:
        return rollback(self.config, backup_id, **kw)


def _put_back_toml(read: Reader, ctx: Says, rec: dict[str, Any], put_back: Callable[..., Any],
                   changes: list[Change], reason: str) -> tuple[FileEdit, tuple[Path, ...]]:
    """The edit of a config.toml install recorded in `rec` going back (`put_back`), and its
    directory when install made it and the file goes away."""
    path = Path(rec["path"])
    old = read(path)
    new, change, warning = put_back(old, rec, path)
    if warning:
        ctx.warn(warning)
    if change is not None:
        changes.append(change)
    made_dir = new is None and old is not None and not rec.get("dir", True)
    return FileEdit(path, old, new, reason), ((path.parent,) if made_dir else ())


def run(engine: DockerEngine, action: str, planner: Callable[[Context], Plan], *,
        dry_run: bool = False, reporter: Reporter | None = None, timeout: float = 30.0,
        state: Path | None = None, require_daemon: bool = False) -> Result:
    """One daemon.json transaction of `engine` (its daemon as the service)."""
    validate.preload()  # the schema is read before the lock is taken
    return transact(engine, action, planner, service=engine.service(), reporter=reporter,
                    timeout=timeout, dry_run=dry_run, state=state,
                    require_daemon=require_daemon)


def install(config: Path, *, runtime_name: str = "nvidia", runtime_path: str,
            runtime_args: Sequence[str] = (), set_default: bool = False,
            dry_run: bool = False, daemon: Any = None, reporter: Reporter | None = None,
            timeout: float = 30.0, config_reason: str = "", state: Path | None = None,
            dockerd_log: Path | None = None, require_daemon: bool = False,
            user_config: Path | None = None, mode: str | None = None,
            mode_config: Path | None = None) -> Result:
    """Add (or update) the runtime entry, optionally make it the default (docs/reference.md §2);
    for a rootless Docker (`user_config`: the runtime's per-user config.toml) set
    `[nvidia-container-cli] no-cgroups = true` there too (reference §3); with `mode`
    (direct|legacy) set `[nvidia-container-runtime] mode` in `mode_config` (default: the
    runtime's config.toml) in the same transaction (reference §7)."""
    edit.check_name(runtime_name, adding=True)
    target = None if mode is None else (mode, mode_config or runtime_mode.config_path())
    eng = DockerEngine(config, daemon, config_reason, dockerd_log, user_config, target)
    req = Request(runtime_name, runtime_path, set_default,
                  extra={"runtime_args": tuple(runtime_args)})
    validate.preload()  # the schema is read before the lock is taken
    return txn.run(eng, "install", req, service=eng.service(), dry_run=dry_run,
                   reporter=reporter, timeout=timeout, state=state,
                   require_daemon=require_daemon)


def uninstall(config: Path, *, runtime_name: str = "nvidia",
              own_runtime_paths: Sequence[str] = (), dry_run: bool = False, daemon: Any = None,
              reporter: Reporter | None = None, timeout: float = 30.0, config_reason: str = "",
              state: Path | None = None, dockerd_log: Path | None = None,
              require_daemon: bool = False) -> Result:
    """Put back what install replaced (see `DockerEngine.plan_uninstall`)."""
    edit.check_name(runtime_name, adding=False)
    eng = DockerEngine(config, daemon, config_reason, dockerd_log)
    req = Request(runtime_name, own_runtime_paths=tuple(own_runtime_paths))
    validate.preload()
    return txn.run(eng, "uninstall", req, service=eng.service(), dry_run=dry_run,
                   reporter=reporter, timeout=timeout, state=state,
                   require_daemon=require_daemon)


def rollback(config: Path | None, backup_id: str | None = None, *, dry_run: bool = False,
             daemon: Any = None, reporter: Reporter | None = None, timeout: float = 30.0,
             config_reason: str = "", state: Path | None = None,
             dockerd_log: Path | None = None, require_daemon: bool = False) -> Result:
    """Undo the newest change of `config` (or the one of backup `backup_id`): daemon.json and
    the other files of that change (the CDI spec of `install --mode cdi`) go back to their
    backups together; the current files are backed up first, so a rollback can itself be
    rolled back."""
    st = state if state is not None else state_dir()
    backups = Backups(st)
    every = backups.all()
    if backup_id:
        b = backups.get(backup_id)
        group = backups.group(b, every)
        configs = [x.config for x in group] + [x.for_config for x in group if x.for_config]
        if config is not None and str(config) not in configs:
            raise BadInput(
                f"backup {backup_id} is of {b.config}, not of {config}",
                f"run: nvdocker2 rollback {backup_id} --config {b.config}",
            )
        if config is None:
            # daemon.json is the last file a Docker transaction backs up (after the spec); a
            # change of config.toml alone names it as the config it was made for.
            config = Path(group[-1].for_config or group[-1].config)
            config_reason = config_reason or "the file this backup was taken of"
    else:
        assert config is not None
        mine = {str(config), *map(str, _cdi_specs(st, config))}
        found = [x for x in every if x.config in mine or x.for_config == str(config)]
        if not found:
            raise BadInput(
                f"no backups of {config} in {backups.dir}",
                "nothing to roll back to; list backups with: nvdocker2 backups",
            )
        group = backups.group(found[0], every)  # all() lists the newest first
    main = next((x for x in group if x.config == str(config)), None)
    others = [x for x in group if x is not main]
    eng = DockerEngine(config, daemon, config_reason, dockerd_log)
    return run(eng, "rollback", lambda ctx: eng.plan_rollback(ctx, main, others),
               dry_run=dry_run, reporter=reporter, timeout=timeout, state=st,
               require_daemon=require_daemon)


def _cdi_specs(state: Path, config: Path) -> list[Path]:
    """The CDI specs CDI mode writes beside `config` (the one its journal records, and the
    default): a change of the spec alone is undone by `rollback` too."""
    return list(dict.fromkeys(p for p in (cdi_journal.recorded_spec(state, config),
                                          cdi_journal.spec_path(None)) if p is not None))
