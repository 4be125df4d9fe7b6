"""Rollback through the engine transaction: which backups it picks (the engine's own file's,
the newest, or the one named), what it reports, and its refusal when there is none. Driven with
CRI-O's drop-in, whose file is nvdocker2's alone; no CRI-O runs here."""

from __future__ import annotations

import pytest
from test_crio_dropin import Service

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request
from nvdocker2.engines.crio import CrioEngine
from nvdocker2.errors import BadInput

A = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def two(tmp_path):
    """Two CRI-O drop-ins (two engines of one name, two files) sharing one state directory."""
    first, second = (tmp_path / d / "99-nvidia.conf" for d in ("one", "two"))
    state = tmp_path / "state"

    def go(dropin, action, backup_id=None):
        if action == "rollback":
            return txn.rollback(CrioEngine(dropin), backup_id, service=Service(), state=state)
        return txn.run(CrioEngine(dropin), action, Request("nvidia", A), service=Service(),
                       state=state)

    return first, second, go


def test_rollback_without_backups_is_refused_with_a_hint(two):
    first, _, go = two
    with pytest.raises(BadInput) as raised:
        go(first, "rollback")
    assert raised.value.message == f"no backups of {first} in {first.parent.parent / 'state' / 'backups'}"
    assert raised.value.hint == ("nothing to roll back to; list them with: nvdocker2 backups "
                                 f"--engine crio --config {first}")


def test_rollback_restores_the_newest_transaction_and_says_so(two):
    first, _, go = two
    go(first, "install")
    only_nvidia = first.read_bytes()
    txn.run(CrioEngine(first), "install", Request("nvidia-cdi", A), service=Service(),
            state=first.parent.parent / "state")
    result = go(first, "rollback")
    assert first.read_bytes() == only_nvidia
    assert result.action == "rollback" and result.changed
    assert [(c.key, c.action) for c in result.changes] == [(str(first), "restored")]


def test_rollback_to_a_named_backup(two):
    first, _, go = two
    backup = go(first, "install").backup
    txn.run(CrioEngine(first), "install", Request("nvidia-cdi", A), service=Service(),
            state=first.parent.parent / "state")
    result = go(first, "rollback", backup)
    assert not first.exists()  # that backup holds the state before the first install
    assert [(c.key, c.action, c.after) for c in result.changes] == [(str(first), "restored",
                                                                      backup)]


def test_rollback_restores_the_engines_own_file_only(two):
    first, second, go = two
    go(first, "install")
    go(second, "install")
    kept = second.read_bytes()
    go(first, "rollback")
    assert second.read_bytes() == kept
    assert not first.exists()
