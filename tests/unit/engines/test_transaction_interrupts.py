"""Ctrl-C and a dying engine in the middle of the shared transaction: what the files hold
after, what the user is told, which backup stays. The interruptions come through the test
hooks the reliability tests use (a pause at a named step, another program at the instant of a
rename) and a real SIGINT to this process; the engine is the toy engine's JSON file."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import EngineDied, FileEdit, Plan, Request
from nvdocker2.engines.context import Reporter
from nvdocker2.errors import DockerdRejected, Interrupted, RollbackFailed
from nvdocker2.host.testing import PAUSE_AT
from nvdocker2.store.backups import Backups

from .test_toy_engine import BEFORE, ToyEngine, Toyd

RT = "/usr/bin/nvidia-container-runtime"
REQ = Request("nvidia", RT)
DROP = b'{"drop": "old"}\n'


class CtrlC:
    """stdin of a process paused at a test hook: the user presses Ctrl-C instead of Enter."""

    def readline(self) -> str:
        raise KeyboardInterrupt


def _toy(tmp_path: Path) -> tuple[ToyEngine, Toyd]:
    cfg = tmp_path / "toy.json"
    cfg.write_bytes(BEFORE)
    return ToyEngine(cfg), Toyd(cfg)


def _kept(tmp_path: Path, config: Path) -> list:
    return Backups(tmp_path / "st").all(config)


@pytest.mark.parametrize("step", ["before-write", "after-write"])
def test_ctrl_c_at_a_step_leaves_the_previous_bytes_and_says_so(tmp_path, monkeypatch, step):
    eng, svc = _toy(tmp_path)
    monkeypatch.setenv(PAUSE_AT, step)
    monkeypatch.setattr("sys.stdin", CtrlC())
    with pytest.raises(Interrupted) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    assert eng.config.read_bytes() == BEFORE
    kept = _kept(tmp_path, eng.config)
    if step == "before-write":  # nothing written: no backup stays, none is named
        assert e.value.state == f"{eng.config} is unchanged: interrupted before writing"
        assert kept == [] and e.value.backup is None
        assert svc.reloads == []
    else:  # written, not yet applied: put back from the backup, which stays and is named
        assert [b.id for b in kept] == [e.value.backup]
        assert e.value.state == (f"{eng.config}: restored the previous bytes "
                                   f"(backup {e.value.backup})")
        assert kept[0].file.read_bytes() == BEFORE


def test_ctrl_c_while_the_backup_is_reported_keeps_no_backup(tmp_path):
    """Interrupted after the backup is made but before anything is written: the backup goes,
    so a run that changed nothing never pushes a real backup out of the newest kept."""
    eng, svc = _toy(tmp_path)

    class CtrlCOnBackup(Reporter):
        def progress(self, msg: str) -> None:
            if msg.startswith("backup "):
                raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st",
                reporter=CtrlCOnBackup())
    assert e.value.state == f"{eng.config} is unchanged: interrupted before writing"
    assert eng.config.read_bytes() == BEFORE
    assert _kept(tmp_path, eng.config) == []


class Dies(Toyd):
    """toyd exits as it takes the `die`-th reload; `hint` says how to start it again."""

    def __init__(self, config: Path, die: int, hint: str | None, refuse: bool = False) -> None:
        super().__init__(config, refuse)
        self.die, self.hint = die, hint

    def apply(self) -> None:
        super().apply()
        if len(self.reloads) == self.die:
            raise EngineDied("toyd exited", self.hint)


def test_engine_dying_on_the_new_file_gets_the_old_bytes_back_without_a_reload(tmp_path):
    eng, _ = _toy(tmp_path)
    svc = Dies(eng.config, die=1, hint="start it: toyd --daemon")
    with pytest.raises(DockerdRejected) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    (kept,) = _kept(tmp_path, eng.config)
    assert e.value.exit_code == 4 and e.value.hint == "start it: toyd --daemon"
    assert e.value.message == (f"toyd exited (it was taking the new {eng.config}); the "
                               f"previous file was restored from backup {kept.id}")
    assert eng.config.read_bytes() == BEFORE
    assert len(svc.reloads) == 1  # nothing left to reload: the file went back alone


@pytest.mark.parametrize("hint", ["start it: toyd --daemon", None])
def test_engine_dying_on_the_way_back_says_the_file_is_back_and_how_to_start_it(tmp_path,
                                                                               hint):
    """toyd refuses the new file, then exits as it takes the old one: exit 5, the file has
    its previous bytes again, and the hint is the engine's own when it has one."""
    eng, _ = _toy(tmp_path)
    svc = Dies(eng.config, die=2, hint=hint, refuse=True)
    with pytest.raises(RollbackFailed) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    (kept,) = _kept(tmp_path, eng.config)
    assert e.value.exit_code == 5
    assert e.value.message.endswith(f"at the reload step too: toyd exited; the previous file "
                                    f"is backup {kept.file}, and the file has its previous "
                                    f"bytes again")
    assert eng.config.read_bytes() == BEFORE
    assert e.value.hint == (hint or f"restore by hand: cp {kept.file} {eng.config}, then: "
                            f"{eng.restart_hint()}")


def test_engine_dying_on_the_way_back_when_the_file_cannot_go_back(tmp_path):
    """As above, but the directory of the file was replaced meanwhile: the message must not
    claim the previous bytes are back, and the backup is named for restoring by hand."""
    (tmp_path / "etc").mkdir()
    cfg = tmp_path / "etc" / "toy.json"
    cfg.write_bytes(BEFORE)
    eng = ToyEngine(cfg)

    class DiesAndDirGoes(Dies):
        def apply(self) -> None:
            if len(self.reloads) == 1:
                os.rename(tmp_path / "etc", tmp_path / "etc.gone")
                (tmp_path / "etc").write_bytes(b"")
            super().apply()

    svc = DiesAndDirGoes(cfg, die=2, hint="start it: toyd --daemon", refuse=True)
    with pytest.raises(RollbackFailed) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    (kept,) = _kept(tmp_path, cfg)
    assert e.value.message.endswith(f"toyd exited; the previous file is backup {kept.file}")
    assert e.value.hint.startswith(f"restore by hand: cp {kept.file} {cfg}")
    assert kept.file.read_bytes() == BEFORE


class TwoFiles(ToyEngine):
    """The toy engine that also rewrites a drop-in in another directory, written second."""

    def __init__(self, config: Path, drop: Path) -> None:
        super().__init__(config)
        self.drop = drop

    def files(self):
        return [self.config, self.drop]

    def _plan(self, old, rts, changes, reason, journal, expect) -> Plan:
        plan = super()._plan(old, rts, changes, reason, journal, expect)
        drop_old = self.drop.read_bytes()
        edit = FileEdit(self.drop, drop_old, b'{"drop": "new"}\n' if rts.get("nvidia")
                        else DROP)
        return Plan(plan.files + (edit,), plan.changes, reason, journal, expect=plan.expect,
                    expect_old=plan.expect_old, journal_before_write=plan.journal_before_write)


@pytest.fixture
def ctrl_c():
    """SIGINT raises KeyboardInterrupt, as at a terminal. A test run started in the background
    of a shell (`make check`'s shares) inherits SIGINT ignored, and Python then installs no
    handler of its own: a Ctrl-C sent by `kill -INT` would do nothing."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _two(tmp_path: Path, monkeypatch, at_second: str) -> tuple[TwoFiles, Toyd]:
    """Two files; `at_second` runs (a real shell, through the rename hook) just before the
    second file's rename, once."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    cfg, drop = tmp_path / "a" / "toy.json", tmp_path / "b" / "drop.json"
    cfg.write_bytes(BEFORE)
    drop.write_bytes(DROP)
    n = tmp_path / "renames"
    monkeypatch.setenv("NVDOCKER2_TEST_RUN_BEFORE_RENAME",
                       f'echo x >> {n}; [ "$(wc -l < {n})" -eq 2 ] || exit 0; {at_second}')
    return TwoFiles(cfg, drop), Toyd(cfg)


def test_ctrl_c_between_two_files_puts_the_first_back(tmp_path, monkeypatch, ctrl_c):
    eng, svc = _two(tmp_path, monkeypatch, f"kill -INT {os.getpid()}")
    with pytest.raises(Interrupted) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    assert e.value.state == f"{eng.config}: restored the previous bytes"
    assert eng.config.read_bytes() == BEFORE and eng.drop.read_bytes() == DROP
    assert _kept(tmp_path, eng.config) == [] and e.value.backup is None
    assert svc.reloads == []


def test_ctrl_c_between_two_files_when_the_first_cannot_go_back_names_the_backup(
        tmp_path, monkeypatch, ctrl_c):
    a = tmp_path / "a"
    eng, svc = _two(tmp_path, monkeypatch,
                    f"mv {a} {a}.gone && : > {a} && kill -INT {os.getpid()}")
    with pytest.raises(Interrupted) as e:
        txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    (kept,) = [b for b in _kept(tmp_path, eng.config)]
    assert e.value.state == (f"{eng.config}: interrupted while writing, and putting the "
                               f"previous bytes back failed: they are backup {kept.id}")
    assert e.value.backup == kept.id and kept.file.read_bytes() == BEFORE
    assert eng.drop.read_bytes() == DROP


def test_another_writer_between_two_files_is_noticed_and_the_change_redone(tmp_path,
                                                                       monkeypatch):
    drop = tmp_path / "b" / "drop.json"
    eng, svc = _two(tmp_path, monkeypatch, f"""printf '{{"drop": "theirs"}}\\n' > {drop}""")
    res = txn.run(eng, "install", REQ, service=svc, state=tmp_path / "st")
    assert res.changed
    assert any("changed by another program meanwhile" in n for n in res.notes)
    assert b'"nvidia"' in eng.config.read_bytes()
    assert eng.drop.read_bytes() == b'{"drop": "new"}\n'
    assert len(svc.reloads) == 1
