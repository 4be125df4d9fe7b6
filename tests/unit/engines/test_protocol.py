"""The engine transaction with an engine of its own format (lines of `name=path`): it carries
out any engine's plan — in-between bytes, several files, failures at every step — without
knowing the format. The service is a stand-in that records the bytes it found at each apply."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nvdocker2.store.backups import Backups
from nvdocker2.engines.docker.daemonjson.edit import Change
from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import EngineBase, FileEdit, Plan, Service, VerifyFailed
from nvdocker2.errors import DockerdRejected, EnvironmentProblem, RollbackFailed


class LinesEngine(EngineBase):
    """A config of `name=path` lines and a sidecar file; `via` clears every line first."""

    name = "lines"
    process = "linesd"

    def __init__(self, config: Path, side: Path | None = None, via: bool = False) -> None:
        super().__init__(config)
        self.side, self.via, self.checked = side, via, []

    def plan(self, ctx: txn.Context, line: bytes) -> Plan:
        old = ctx.read(self.config)
        new = (old or b"") + line
        files = [FileEdit(self.config, old, new)]
        if self.side is not None:
            files.insert(0, FileEdit(self.side, ctx.read(self.side), b"side " + line))
        via = {self.config: b"# cleared\n"} if self.via else {}
        back = {self.config: b"# cleared again\n"} if self.via else {}
        return Plan(tuple(files), (Change(str(self.config), "added"),), f"add {line!r}",
                    {"config": str(self.config), "runtimes": {"x": {}}}, expect=new,
                    expect_old=old, via=via, back_via=back)

    def check_candidate(self, ctx, plan, staged) -> None:
        self.checked += [(t, data, Path(p).parent, Path(p).read_bytes()) for t, data, p in staged]


class Recorder(Service):
    """Records the config's bytes at each apply; fails verification `fail` times, and the
    applies whose numbers (from 1) are in `failing`."""

    strategy = "test"
    verifies = True

    def __init__(self, config: Path, fail: int = 0, failing: tuple[int, ...] = (),
                 reapply: bool = True) -> None:
        self.config, self.fail, self.failing = config, fail, failing
        self.reapply_after_failed_apply = reapply
        self.seen: list[bytes | None] = []

    def apply(self) -> None:
        self.seen.append(self.config.read_bytes() if self.config.exists() else None)
        if len(self.seen) in self.failing:
            raise VerifyFailed("linesd did not come back")

    def verify(self, expect, timeout):
        if self.fail:
            self.fail -= 1
            raise VerifyFailed("linesd reports the old lines")
        return None


def _go(eng, svc, tmp_path, line=b"nvidia=/rt\n", **kw):
    return txn.transact(eng, "install", lambda ctx: eng.plan(ctx, line), service=svc,
                        state=tmp_path / "st", **kw)


def test_a_file_goes_through_its_in_between_bytes_and_ends_with_the_plan(tmp_path):
    cfg = tmp_path / "lines.conf"
    cfg.write_bytes(b"runc=/usr/bin/runc\n")
    eng, svc = LinesEngine(cfg, via=True), Recorder(cfg)
    res = _go(eng, svc, tmp_path)
    assert svc.seen == [b"# cleared\n"]  # applied once, on the in-between bytes
    assert cfg.read_bytes() == b"runc=/usr/bin/runc\nnvidia=/rt\n" and res.verified
    b = Backups(tmp_path / "st").get(res.backup)
    assert Backups(tmp_path / "st").read(b) == b"runc=/usr/bin/runc\n"
    # both versions were staged beside the file and checked before anything was written
    assert [(t, d, where) for t, d, where, _ in eng.checked] == [
        (cfg, b"# cleared\n", tmp_path), (cfg, b"runc=/usr/bin/runc\nnvidia=/rt\n", tmp_path)]
    assert all(d == staged for _, d, _, staged in eng.checked)
    assert sorted(os.listdir(tmp_path)) == ["lines.conf", "st"]


def test_a_change_the_service_does_not_report_goes_back_through_back_via_exit_4(tmp_path):
    cfg = tmp_path / "lines.conf"
    cfg.write_bytes(b"runc=/usr/bin/runc\n")
    eng, svc = LinesEngine(cfg, via=True), Recorder(cfg, fail=1)
    with pytest.raises(DockerdRejected) as e:
        _go(eng, svc, tmp_path)
    assert svc.seen == [b"# cleared\n", b"# cleared again\n"]
    assert cfg.read_bytes() == b"runc=/usr/bin/runc\n"
    assert e.value.exit_code == 4 and e.value.message.startswith(
        f"linesd did not take the new {cfg}: linesd reports the old lines; the previous file "
        "was restored from backup ")
    assert not (tmp_path / "st" / "journal").exists() or not os.listdir(tmp_path / "st" / "journal")


def test_two_files_the_second_cannot_be_renamed_both_stay_as_they_were(tmp_path, monkeypatch):
    cfg, side = tmp_path / "lines.conf", tmp_path / "side.conf"
    cfg.write_bytes(b"a=/a\n")
    side.write_bytes(b"side a\n")
    eng, svc = LinesEngine(cfg, side), Recorder(cfg)
    real = os.replace

    def replace(src, dst, *a, **kw):
        if Path(dst) == cfg:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(EnvironmentProblem) as e:
        _go(eng, svc, tmp_path)
    assert e.value.exit_code == 3 and e.value.message == f"{cfg}: no space left on device"
    assert cfg.read_bytes() == b"a=/a\n" and side.read_bytes() == b"side a\n"
    assert svc.seen == []  # nothing was applied
    assert sorted(os.listdir(tmp_path)) == ["lines.conf", "side.conf", "st"]


def test_when_putting_back_fails_too_every_backup_is_named_exit_5(tmp_path):
    cfg, side = tmp_path / "lines.conf", tmp_path / "side.conf"
    cfg.write_bytes(b"a=/a\n")
    eng, svc = LinesEngine(cfg, side), Recorder(cfg, fail=1, failing=(2,))
    with pytest.raises(RollbackFailed) as e:
        _go(eng, svc, tmp_path)
    made = Backups(tmp_path / "st").all()
    assert e.value.exit_code == 5 and "failed at the restart step too" in e.value.message
    assert {b.config for b in made} == {str(cfg), str(side)}
    assert f"cp {next(b.file for b in made if b.config == str(cfg))} {cfg}" in e.value.hint
    assert f"rm {side}" in e.value.hint  # the side file did not exist before
    assert cfg.read_bytes() == b"a=/a\n" and not side.exists()  # the bytes are back even so


@pytest.mark.parametrize("reapply,applies", [(True, 2), (False, 1)])
def test_a_failed_apply_is_repeated_on_the_old_files_only_for_a_restarting_service(
        tmp_path, reapply, applies):
    cfg = tmp_path / "lines.conf"
    cfg.write_bytes(b"a=/a\n")
    svc = Recorder(cfg, failing=(1,), reapply=reapply)
    with pytest.raises(DockerdRejected):
        _go(LinesEngine(cfg), svc, tmp_path)
    assert len(svc.seen) == applies and cfg.read_bytes() == b"a=/a\n"


def test_a_dry_run_checks_staged_copies_elsewhere_and_writes_nothing(tmp_path):
    cfg, side = tmp_path / "lines.conf", tmp_path / "new" / "side.conf"
    cfg.write_bytes(b"a=/a\n")
    eng, svc = LinesEngine(cfg, side), Recorder(cfg)
    res = _go(eng, svc, tmp_path, dry_run=True)
    assert res.dry_run and res.changed and res.reload == "none" and svc.seen == []
    assert f"+++ b{side}\n" in res.diff and "+nvidia=/rt\n" in res.diff
    assert {where for _, _, where, _ in eng.checked} != {tmp_path}  # a private temp directory
    assert all(d == staged for _, d, _, staged in eng.checked)
    assert sorted(os.listdir(tmp_path)) == ["lines.conf"]  # no state, no temp, no directory
