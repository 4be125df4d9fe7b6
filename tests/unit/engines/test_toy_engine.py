"""An engine defined only here — a JSON file of runtimes in tmp_path and a service that records
its reloads — implements the `Engine` contract, joins through `registry.register()`, is listed
by the CLI, and goes through the shared transaction like the built-in engines: install,
uninstall putting back what the journal recorded, rollback, and a change the service does not
report put back (exit 4). Nothing in nvdocker2/ knows it."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from ..cli_run import cli

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines import registry
from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import (
    Engine,
    EngineBase,
    FileEdit,
    Plan,
    Reader,
    Request,
    Service,
    VerifyFailed,
    runtime_mismatches,
)
from nvdocker2.engines.commands import TransactionFront
from nvdocker2.errors import DockerdRejected
from nvdocker2.store.journal import slot, unslot

BEFORE = b'{"runtimes": {"nvidia": "/old/rt", "runc": "/usr/bin/runc"}}\n'


def _runtimes(data: bytes | None) -> dict:
    return dict(json.loads(data or b"{}").get("runtimes", {}))


class ToyEngine(EngineBase):
    """toyd: {"runtimes": {name: path}}; install records the entry it replaces, uninstall puts
    that back (journal replay)."""

    name = "toy"
    process = "toyd"

    def _plan(self, old: bytes | None, rts: dict, changes: list, reason: str,
              journal: dict, expect: dict) -> Plan:
        new = (json.dumps({"runtimes": rts}) + "\n").encode()
        before = _runtimes(old)
        return Plan((FileEdit(self.config, old, new),), tuple(changes), reason, journal,
                    expect=expect, expect_old={"present": before, "absent":
                                               sorted(set(rts) - set(before)), "default": None},
                    journal_before_write=bool(journal))

    def plan_install(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = read(self.config)
        rts = _runtimes(old)
        prev = rts.get(req.runtime_name, ABSENT)
        rts[req.runtime_name] = req.runtime_path
        recorded = (journal.get("runtimes") or {}).get(req.runtime_name)
        record = {"config": str(self.config), "runtimes": {req.runtime_name: {
            "previous": recorded["previous"] if recorded else slot(prev),
            "installed": req.runtime_path}}}
        changes = [Change(f"runtimes.{req.runtime_name}", "added", prev, req.runtime_path)] \
            if prev != req.runtime_path else []
        return self._plan(old, rts, changes, f"install runtime {req.runtime_name} (toy)",
                          record, {"present": {req.runtime_name: req.runtime_path},
                                   "absent": [], "default": None})

    def plan_uninstall(self, read: Reader, req: Request, journal: dict) -> Plan:
        old = read(self.config)
        rts = _runtimes(old)
        recorded = (journal.get("runtimes") or {}).get(req.runtime_name)
        previous = unslot(recorded["previous"]) if recorded else ABSENT
        now = rts.pop(req.runtime_name, ABSENT)
        if previous is not ABSENT:
            rts[req.runtime_name] = previous
        changes = [Change(f"runtimes.{req.runtime_name}", "removed", now)] \
            if now != previous else []
        present = {req.runtime_name: previous} if previous is not ABSENT else {}
        return self._plan(old, rts, changes, f"uninstall runtime {req.runtime_name} (toy)", {},
                          {"present": present, "absent": [] if present else
                           [req.runtime_name], "default": None})


class Toyd(Service):
    """Reloads copy the file into what toyd runs; verify compares that with the plan's
    expectation. `refuse` makes it come back without the new runtimes."""

    strategy = "signal"
    verifies = True
    verb = "reload"
    reapply_after_failed_apply = False

    def __init__(self, config: Path, refuse: bool = False) -> None:
        self.config, self.refuse = config, refuse
        self.reloads: list[bytes | None] = []
        self.running = _runtimes(config.read_bytes() if config.exists() else None)

    def apply(self) -> None:
        data = self.config.read_bytes() if self.config.exists() else None
        self.reloads.append(data)
        if not self.refuse:
            self.running = _runtimes(data)

    def verify(self, expect, timeout: float) -> str | None:
        if expect is None:  # a rollback expects nothing in particular
            return None
        bad = runtime_mismatches(expect, self.running, None)
        if bad:
            raise VerifyFailed("toyd reports: " + "; ".join(bad))
        return None


class ToyFront(TransactionFront[ToyEngine]):
    name = "toy"
    service_made: list[Toyd] = []
    refuse = False

    def engine(self, config: Path | None) -> ToyEngine:
        assert config is not None
        self._config = config
        return ToyEngine(config)

    def service(self, reload, verify, unit, address):
        svc = Toyd(self._config, self.refuse)
        ToyFront.service_made.append(svc)
        return svc, []

    def says(self, eng: ToyEngine, runtime_name: str) -> dict:
        return {"runtimes": _runtimes(eng.config.read_bytes())}

    def checks(self, config, unit, address) -> list:
        return []


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    ToyFront.service_made, ToyFront.refuse = [], False
    registry.register("toy", [], ToyFront)
    cfg = tmp_path / "toy.json"
    cfg.write_bytes(BEFORE)
    yield cfg
    registry.unregister("toy")


def test_the_toy_engine_implements_every_member_of_the_engine_contract():
    members = [n for n, _ in inspect.getmembers(Engine) if not n.startswith("_")]
    members += list(Engine.__annotations__)
    assert {"plan_install", "plan_uninstall", "check_candidate", "files", "config",
            "config_reason"} <= set(members)
    eng = ToyEngine(Path("/nonexistent/toy.json"))
    for name in members:
        assert hasattr(eng, name), f"ToyEngine lacks Engine.{name}"


def test_the_cli_lists_the_toy_engine(toy):
    code, out, _ = cli("install", "--help")
    assert code == 0
    assert "Container engine to configure: docker, containerd, crio or toy" in " ".join(
        out.split())


def test_install_uninstall_puts_back_what_the_journal_recorded(toy):
    flags = ["--engine", "toy", "--config", str(toy)]
    code, out, err = cli("install", *flags, "--runtime-path", "/new/rt",
                         "--allow-missing-runtime")
    assert code == 0, err
    assert _runtimes(toy.read_bytes()) == {"nvidia": "/new/rt", "runc": "/usr/bin/runc"}
    svc = ToyFront.service_made[-1]
    assert svc.reloads == [toy.read_bytes()]
    assert "verified: yes, toy reports the change" in out.splitlines()
    # A second install changes nothing and keeps the first record of what was there.
    assert cli("install", *flags, "--runtime-path", "/new/rt", "--allow-missing-runtime")[0] == 0
    assert ToyFront.service_made[-1].reloads == []
    code, out, err = cli("uninstall", *flags)
    assert code == 0, err
    assert _runtimes(toy.read_bytes()) == {"nvidia": "/old/rt", "runc": "/usr/bin/runc"}
    assert ToyFront.service_made[-1].reloads == [toy.read_bytes()]


def test_rollback_restores_the_bytes_before_the_install(toy):
    flags = ["--engine", "toy", "--config", str(toy)]
    assert cli("install", *flags, "--runtime-path", "/new/rt", "--allow-missing-runtime")[0] == 0
    code, out, err = cli("rollback", *flags)
    assert code == 0, err
    assert toy.read_bytes() == BEFORE
    assert ToyFront.service_made[-1].reloads == [BEFORE]


def test_a_change_the_service_does_not_report_is_put_back_exit_4(toy):
    ToyFront.refuse = True
    code, out, err = cli("install", "--engine", "toy", "--config", str(toy),
                         "--runtime-path", "/new/rt", "--allow-missing-runtime")
    assert code == 4, err
    assert 'toyd did not take the new' in err and 'runtime "nvidia" is missing' in err
    assert toy.read_bytes() == BEFORE
    svc = ToyFront.service_made[-1]
    assert len(svc.reloads) == 2 and svc.reloads[-1] == BEFORE  # reloaded on the old bytes


def test_the_transaction_runs_the_toy_engine_without_the_cli(tmp_path):
    cfg = tmp_path / "toy.json"
    cfg.write_bytes(BEFORE)
    eng, svc, st = ToyEngine(cfg), Toyd(cfg), tmp_path / "st"
    res = txn.run(eng, "install", Request("nvidia", "/new/rt"), service=svc, state=st)
    assert res.changed and res.verified and svc.running["nvidia"] == "/new/rt"
    res = txn.rollback(eng, None, service=svc, state=st)
    assert res.changed and cfg.read_bytes() == BEFORE
    with pytest.raises(DockerdRejected) as e:
        txn.run(eng, "install", Request("nvidia", "/new/rt"), service=Toyd(cfg, refuse=True),
                state=st, timeout=0.1)
    assert e.value.exit_code == 4 and cfg.read_bytes() == BEFORE


def test_every_engine_front_builds_on_the_transaction_front(toy):
    assert registry.names()[-1] == "toy"
    for name in registry.names():
        assert isinstance(registry.frontend(name), TransactionFront), name
