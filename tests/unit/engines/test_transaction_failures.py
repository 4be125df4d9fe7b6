"""The engine transaction when things go wrong half-way, with the `name=path` lines engine of
test_protocol.py: what a person watching reads (the progress lines), what the errors of
exit 3, 4 and 5 say (each backup named, each step), what is left on disk (the bytes, the
journal, the backups, no temp file, no directory made for nothing). Failures are injected at
the service stand-in and at `os.replace`, the rename every write ends with."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pytest
from .test_protocol import LinesEngine, Recorder

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import FileEdit, NoService, Plan, Unreachable
from nvdocker2.errors import (BadInput, DaemonUnreachable, DockerdRejected, EnvironmentProblem,
                              RollbackFailed)
from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal

HINT = "systemctl restart lines"  # the lines engine's restart hint


class Watcher(txn.Reporter):
    """The progress lines a person watching would read, waits in brackets."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def progress(self, message: str) -> None:
        self.lines.append(message)

    def waiting(self, message: str):
        self.lines.append(f"({message})")
        return contextlib.nullcontext()


def _go(eng, svc, st, reporter=None):
    return txn.transact(eng, "install", lambda ctx: eng.plan(ctx, b"nvidia=/rt\n"), service=svc,
                        state=st, reporter=reporter)


def _fail_replace(monkeypatch, target: Path, calls: tuple[int, ...], err: int = errno.ENOSPC):
    """os.replace onto `target` fails (errno `err`) at the calls numbered (from 1) in `calls`."""
    real, seen = os.replace, []

    def replace(src, dst, *a, **kw):
        if Path(dst) == target:
            seen.append(dst)
            if len(seen) in calls:
                raise OSError(err, os.strerror(err))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)


def _only(st: Path):
    (b,) = Backups(st).all()
    return b


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "lines.conf"
    p.write_bytes(b"a=/a\n")
    return p


# --- what a person watching reads ---------------------------------------------------------


def test_progress_of_a_change_names_its_backup_the_restart_and_the_wait(cfg, tmp_path):
    seen = Watcher()
    res = _go(LinesEngine(cfg), Recorder(cfg), tmp_path / "st", seen)
    assert seen.lines == [f"backup {res.backup} saved", "restarting linesd (test)",
                          "(waiting for linesd to report the change)"]
    assert Backups(tmp_path / "st").get(res.backup).config == str(cfg)


def test_progress_of_a_change_undone_through_transitional_files(cfg, tmp_path):
    seen, st = Watcher(), tmp_path / "st"
    with pytest.raises(DockerdRejected) as e:
        _go(LinesEngine(cfg, via=True), Recorder(cfg, fail=1), st, seen)
    assert e.value.message == (
        f"linesd did not take the new {cfg}: linesd reports the old lines; the previous file "
        f"was restored from backup {_only(st).id} and linesd reports the previous state again")
    assert seen.lines == [
        f"backup {_only(st).id} saved",
        "restarting linesd (test) with the transitional file",
        "(waiting for linesd to report the change)",
        "restarting linesd (test) with the previous file",
        "(waiting for linesd to report the previous state)"]
    assert cfg.read_bytes() == b"a=/a\n"
    # The final bytes were staged too, never written: no temp file is left beside the file.
    assert sorted(os.listdir(tmp_path)) == ["lines.conf", "st"]


def test_without_a_service_nothing_is_restarted_not_even_to_undo(cfg, tmp_path, monkeypatch):
    """The final write after the transitional one fails: the old bytes go back, and no line
    says that an engine that is not asked was restarted."""
    seen, st = Watcher(), tmp_path / "st"
    _fail_replace(monkeypatch, cfg, (2,))
    with pytest.raises(EnvironmentProblem) as e:
        _go(LinesEngine(cfg, via=True), NoService(), st, seen)
    backup = _only(st).id
    assert e.value.message == (f"{cfg}: no space left on device; {cfg} was restored from "
                               f"backup {backup}")
    assert seen.lines == [f"backup {backup} saved"]
    assert cfg.read_bytes() == b"a=/a\n"


def test_a_change_the_engine_takes_but_cannot_prove_is_a_warning(cfg, tmp_path):
    class Unproven(Recorder):
        def verify(self, expect, timeout):
            return "linesd cannot say which file it runs"

    res = _go(LinesEngine(cfg), Unproven(cfg), tmp_path / "st")
    assert res.changed and not res.verified
    assert res.warnings == ("linesd cannot say which file it runs",)


def test_a_file_written_in_place_at_its_final_write_is_a_warning(cfg, tmp_path, monkeypatch):
    """The transitional bytes are renamed into place; the final ones hit a bind mount."""
    _fail_replace(monkeypatch, cfg, (2,), errno.EBUSY)
    res = _go(LinesEngine(cfg, via=True), Recorder(cfg), tmp_path / "st")
    assert cfg.read_bytes() == b"a=/a\nnvidia=/rt\n"
    assert res.warnings == (
        f"{cfg} cannot be replaced by a rename ({os.strerror(errno.EBUSY)}; a bind mount?), so "
        f"it was written in place: this write is not atomic (the previous file is backup "
        f"{res.backup})",)


# --- exit 4: the engine refused, everything put back ----------------------------------------


def test_refused_change_of_two_files_names_the_configs_backup_and_the_other(cfg, tmp_path):
    side, st = tmp_path / "new" / "side.conf", tmp_path / "st"
    with pytest.raises(DockerdRejected) as e:
        _go(LinesEngine(cfg, side), Recorder(cfg, fail=1), st)
    mine = next(b.id for b in Backups(st).all() if b.config == str(cfg))
    assert e.value.message == (
        f"linesd did not take the new {cfg}: linesd reports the old lines; the previous file "
        f"was restored from backup {mine} (with 1 other file) and linesd reports the previous "
        "state again")
    assert cfg.read_bytes() == b"a=/a\n"
    assert not side.parent.exists()  # the directory made for the side file is gone again


def test_a_change_that_fails_half_way_leaves_the_journal_as_it_was(cfg, tmp_path, monkeypatch):
    side, st = tmp_path / "side.conf", tmp_path / "st"
    Journal(st, cfg).write({"config": str(cfg), "runtimes": {"old": {}}})
    before = Journal(st, cfg).read_bytes()
    _fail_replace(monkeypatch, cfg, (1,))
    with pytest.raises(EnvironmentProblem):
        _go(LinesEngine(cfg, side), Recorder(cfg), st)
    assert Journal(st, cfg).read_bytes() == before
    assert cfg.read_bytes() == b"a=/a\n" and not side.exists()


def test_backups_that_cannot_be_made_stop_the_change_before_any_write(cfg, tmp_path):
    st = tmp_path / "st"
    st.mkdir()
    (st / "backups").write_bytes(b"not a directory\n")
    svc = Recorder(cfg)
    with pytest.raises(BadInput) as e:
        _go(LinesEngine(cfg), svc, st)
    assert e.value.message == (f"backup directory {st / 'backups'}: a component of the path is "
                               "not a directory")
    assert cfg.read_bytes() == b"a=/a\n" and svc.seen == []
    assert sorted(os.listdir(tmp_path)) == ["lines.conf", "st"]  # no staged file left


def test_only_the_backup_of_the_bytes_replaced_is_kept_when_a_file_changed_meanwhile(
        cfg, tmp_path, monkeypatch):
    eng, st = LinesEngine(cfg), tmp_path / "st"
    real, calls = eng.check_candidate, []

    def meddle(ctx, plan, staged):
        if not calls:
            cfg.write_bytes(b"b=/b\n")
        calls.append(1)
        return real(ctx, plan, staged)

    monkeypatch.setattr(eng, "check_candidate", meddle)
    res = _go(eng, Recorder(cfg), st)
    assert cfg.read_bytes() == b"b=/b\nnvidia=/rt\n"
    assert [b.id for b in Backups(st).all()] == [res.backup]
    assert Backups(st).read(Backups(st).get(res.backup)) == b"b=/b\n"


# --- exit 5: putting it back failed too; what is left to do by hand -------------------------


def test_a_failed_restore_of_one_file_names_its_backup_and_the_restart(cfg, tmp_path):
    st = tmp_path / "st"
    with pytest.raises(RollbackFailed) as e:
        _go(LinesEngine(cfg), Recorder(cfg, fail=1, failing=(2,)), st)
    file = _only(st).file
    assert e.value.message == (
        f"{cfg}: the change failed (linesd reports the old lines) and putting the previous "
        "state back failed at the restart step too: linesd did not come back; the previous "
        f"file is backup {file}")
    assert e.value.hint == f"restore by hand: cp {file} {cfg}, then: {HINT}"


def test_a_failed_restore_of_a_file_that_did_not_exist_says_so(tmp_path):
    cfg, st = tmp_path / "lines.conf", tmp_path / "st"
    with pytest.raises(RollbackFailed) as e:
        _go(LinesEngine(cfg), Recorder(cfg, fail=2), st)
    assert e.value.message == (
        f"{cfg}: the change failed (linesd reports the old lines) and putting the previous "
        "state back failed at the verify step too: linesd reports the old lines; the previous "
        "file is backup (there was no file)")
    assert e.value.hint == f"restore by hand: rm {cfg}, then: {HINT}"
    assert not cfg.exists()


def test_a_failed_restore_of_two_files_names_every_backup(cfg, tmp_path):
    side, st = tmp_path / "side.conf", tmp_path / "st"
    with pytest.raises(RollbackFailed) as e:
        _go(LinesEngine(cfg, side), Recorder(cfg, fail=1, failing=(2,)), st)
    mine = next(b.file for b in Backups(st).all() if b.config == str(cfg))
    assert e.value.message.endswith(
        f"failed at the restart step too: linesd did not come back; the previous files are "
        f"backups (no {side}), {mine}")
    assert e.value.hint == (f"restore by hand: see nvdocker2 backups for {side}, {cfg}; "
                            f"rm {side}; cp {mine} {cfg}, then: {HINT}")


def test_a_failed_last_write_after_the_engine_took_the_old_state_is_the_write_step(
        cfg, tmp_path, monkeypatch):
    """Transitional bytes (1st rename), refused; back through the transitional bytes (2nd),
    restarted and verified; the old bytes (3rd rename) cannot be written."""
    _fail_replace(monkeypatch, cfg, (3,))
    svc = Recorder(cfg, fail=1)
    with pytest.raises(RollbackFailed) as e:
        _go(LinesEngine(cfg, via=True), svc, tmp_path / "st")
    assert svc.seen == [b"# cleared\n", b"# cleared again\n"]
    assert e.value.message.startswith(
        f"{cfg}: the change failed (linesd reports the old lines) and putting the previous "
        f"state back failed at the write step too: {cfg}: no space left on device; ")


def test_a_failed_write_of_the_old_bytes_after_a_failed_signal_is_the_write_step(
        cfg, tmp_path, monkeypatch):
    """A service that is not restarted again after a failed apply: only the bytes go back."""
    _fail_replace(monkeypatch, cfg, (2,))
    svc = Recorder(cfg, failing=(1,), reapply=False)
    with pytest.raises(RollbackFailed) as e:
        _go(LinesEngine(cfg), svc, tmp_path / "st")
    assert len(svc.seen) == 1
    assert e.value.message.startswith(
        f"{cfg}: the change failed (linesd did not come back) and putting the previous state "
        f"back failed at the write step too: {cfg}: no space left on device; ")


# --- several files, one transaction ---------------------------------------------------------


def test_two_files_of_an_engine_that_keeps_single_backups_are_still_rolled_back_together(
        cfg, tmp_path):
    side, st = tmp_path / "side.conf", tmp_path / "st"
    side.write_bytes(b"side a\n")
    eng = LinesEngine(cfg, side)
    eng.groups_backups = False  # as Docker's daemon.json: one file, one backup
    _go(eng, Recorder(cfg), st)
    assert len({b.tag for b in Backups(st).all()} - {None}) == 1
    txn.rollback(eng, None, service=Recorder(cfg), state=st, files=[cfg, side])
    assert cfg.read_bytes() == b"a=/a\n" and side.read_bytes() == b"side a\n"


def test_a_stale_temp_file_beside_any_file_of_the_plan_is_removed_with_a_note(cfg, tmp_path):
    side = tmp_path / "side.conf"
    stale = tmp_path / f".side.conf.nvdocker2-tmp-{os.getpid()}-0a1b2c3d"
    stale.write_bytes(b"half")
    res = _go(LinesEngine(cfg, side), Recorder(cfg), tmp_path / "st")
    assert not stale.exists()
    assert f"removed {stale}, left behind by an interrupted earlier run" in res.notes


# --- the journal and directories of a plan ------------------------------------------------


@pytest.mark.parametrize("before_write", [True, False])
def test_a_plan_without_a_journal_record_leaves_the_journal_alone(cfg, tmp_path, before_write):
    st = tmp_path / "st"
    Journal(st, cfg).write({"config": str(cfg), "runtimes": {"kept": {}}})
    before = Journal(st, cfg).read_bytes()
    plan = Plan((FileEdit(cfg, b"a=/a\n", b"b=/b\n"),), (), "edit", None,
                journal_before_write=before_write)
    res = txn.transact(LinesEngine(cfg), "install", lambda ctx: plan, service=Recorder(cfg),
                       state=st)
    assert res.changed and cfg.read_bytes() == b"b=/b\n"
    assert Journal(st, cfg).read_bytes() == before


def test_a_plan_with_nothing_to_write_still_fixes_a_stale_record_and_removes_dirs(
        cfg, tmp_path):
    st, empty, full = tmp_path / "st", tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "other").write_bytes(b"")
    Journal(st, cfg).write({"config": str(cfg), "runtimes": {"stale": {}}})
    record = {"config": str(cfg), "runtimes": {"nvidia": {"installed": "/rt"}}}
    plan = Plan((FileEdit(cfg, b"a=/a\n", b"a=/a\n"),), (), "edit", record,
                remove_dirs=(empty, full))
    res = txn.transact(LinesEngine(cfg), "install", lambda ctx: plan, service=Recorder(cfg),
                       state=st)
    assert not res.changed and res.backup is None
    assert Journal(st, cfg).load() == record
    assert not empty.exists() and (full / "other").exists()


# --- rollback's defaults --------------------------------------------------------------------


def test_a_rollback_dry_run_without_the_daemon_reports_what_it_could_not_check(cfg, tmp_path):
    st = tmp_path / "st"
    res = _go(LinesEngine(cfg), Recorder(cfg), st)
    down = Unreachable(DaemonUnreachable("linesd is not running", unchecked="linesd's view"))
    dry = txn.rollback(LinesEngine(cfg), None, service=down, state=st, dry_run=True)
    assert dry.dry_run and dry.unchecked == ("linesd's view: linesd is not running",)
    assert [(c.key, c.after) for c in dry.changes] == [(str(cfg), res.backup)]
    assert cfg.read_bytes() == b"a=/a\nnvidia=/rt\n"
