"""CRI-O's drop-in: what install and uninstall report changing, what they ask CRI-O to show
afterwards, what they journal, the warning for a runtime_path CRI-O would refuse, the hint of
each refusal, and the parts of a hand-edited drop-in they leave alone. Driven through the
engine transaction; no CRI-O runs here."""

from __future__ import annotations

import json
import sys

import pytest
from .test_dropin import Service

from nvdocker2.changes import ABSENT
from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request
from nvdocker2.engines.crio import MARK, CrioEngine
from nvdocker2.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

A, B = "/usr/bin/nvidia-container-runtime", "/opt/nvidia/bin/nvidia-container-runtime.cdi"
RT, DEFAULT = "crio.runtime.runtimes", "crio.runtime.default_runtime"


@pytest.fixture
def crio(tmp_path):
    dropin = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    dropin.parent.mkdir()
    svc, state = Service(), tmp_path / "state"

    def go(action, name, path=A, default=False):
        result = txn.run(CrioEngine(dropin), action, Request(name, path, default), service=svc,
                         state=state)
        return [(c.key, c.action, c.before, c.after) for c in result.changes], result

    go.dropin, go.svc, go.state = dropin, svc, state
    return go


def journal(go):
    files = list((go.state / "journal").glob("*.json"))
    return json.loads(files[0].read_text()) if files else None


def test_install_reports_each_change_and_journals_the_runtime(crio):
    table = {"runtime_path": A, "runtime_type": "oci"}
    changes, _ = crio("install", "nvidia", default=True)
    assert changes == [(f"{RT}.nvidia", "added", ABSENT, table),
                       (DEFAULT, "added", ABSENT, "nvidia")]
    assert journal(crio) == {"config": str(crio.dropin), "runtimes": {"nvidia": {"dropin": True}}}
    changes, result = crio("install", "nvidia", default=True)
    assert [c[:2] for c in changes] == [(f"{RT}.nvidia", "unchanged"), (DEFAULT, "unchanged")]
    assert not result.changed
    changes, _ = crio("install", "nvidia-cdi", B, default=True)
    assert [c[:3] for c in changes][1] == (DEFAULT, "replaced", "nvidia")
    assert changes[0][1] == "added"
    assert crio.svc.verified[-1] == {"present": {"nvidia": A, "nvidia-cdi": B}, "absent": [],
                                     "default": "nvidia-cdi"}


def test_install_without_default_reports_no_default_change(crio):
    crio("install", "nvidia", default=True)
    changes, _ = crio("install", "nvidia-cdi", B)
    assert [c[:2] for c in changes] == [(f"{RT}.nvidia-cdi", "added")]
    assert crio.svc.verified[-1]["default"] is None
    changes, _ = crio("install", "nvidia-cdi", A)
    assert [c[:3] for c in changes] == [(f"{RT}.nvidia-cdi", "replaced",
                                         {"runtime_path": B, "runtime_type": "oci"})]


def test_uninstall_reports_the_default_and_the_file_it_removes(crio):
    crio("install", "nvidia-cdi", B)
    crio("install", "nvidia", default=True)
    changes, _ = crio("uninstall", "nvidia-cdi")
    assert [c[:2] for c in changes] == [(f"{RT}.nvidia-cdi", "removed")]
    assert crio.svc.verified[-1] == {"present": {"nvidia": A}, "absent": ["nvidia-cdi"],
                                     "default": None}
    changes, _ = crio("uninstall", "nvidia")
    assert [c[:3] for c in changes] == [
        (f"{RT}.nvidia", "removed", {"runtime_path": A, "runtime_type": "oci"}),
        (DEFAULT, "removed", "nvidia"),
        (str(crio.dropin), "removed", "drop-in")]
    assert not crio.dropin.exists()


def test_uninstalling_a_runtime_that_is_not_there_changes_nothing(crio):
    changes, result = crio("uninstall", "nvidia")
    assert changes == [(f"{RT}.nvidia", "unchanged", ABSENT, ABSENT)]
    assert not result.changed and not crio.dropin.exists()
    crio("install", "nvidia-cdi", B)
    before = crio.dropin.read_bytes()
    changes, result = crio("uninstall", "nvidia")
    assert [c[:2] for c in changes] == [(f"{RT}.nvidia", "unchanged")] and not result.changed
    assert crio.dropin.read_bytes() == before


def test_other_tables_of_the_dropin_are_kept(crio):
    crio.dropin.write_text(MARK + "[crio.image]\npause_image = 'p'\n[crio.runtime]\n"
                           "log_level = 'debug'\n[crio.runtime.runtimes.kata]\n"
                           "runtime_type = 'vm'\n")
    crio("install", "nvidia")
    data = tomllib.loads(crio.dropin.read_text())["crio"]
    assert data == {"image": {"pause_image": "p"},
                    "runtime": {"log_level": "debug", "runtimes": {
                        "kata": {"runtime_type": "vm"},
                        "nvidia": {"runtime_path": A, "runtime_type": "oci"}}}}
    # kata has no runtime_path: CRI-O would report an empty one.
    assert crio.svc.verified[-1]["present"] == {"kata": "", "nvidia": A}


@pytest.mark.parametrize("path,warned", [(A, True), ("/", True), ("/bin/sh", False)])
def test_a_runtime_path_crio_cannot_run_is_warned_about(crio, tmp_path, path, warned):
    _, result = crio("install", "nvidia", path)
    says = (f"{path} is not an executable file (yet): CRI-O leaves such a runtime out, "
            "and does not start when it is the default_runtime")
    assert list(result.warnings) == ([says] if warned else [])
    _, result = crio("uninstall", "nvidia")
    assert list(result.warnings) == []


@pytest.mark.parametrize("text,hint", [
    ("[crio.runtime]\n", "move it away or pass --config with another drop-in name"),
    (MARK + "[crio.runtime\n", "fix the file, or remove it and install again"),
    (MARK + "crio = 'x'\n", "fix crio in that file, or remove the file and install again"),
    (MARK + "[crio.runtime.runtimes]\nnvidia = 'x'\n",
     "fix that table, or remove the file and install again"),
    (MARK + "[crio.runtime]\ndefault_runtime = 1\n",
     "fix it, or remove the file and install again"),
])
def test_each_refusal_of_a_dropin_carries_its_hint(crio, text, hint):
    crio.dropin.write_text(text)
    with pytest.raises(BadInput) as raised:
        crio("install", "nvidia")
    assert raised.value.hint == hint


def test_the_state_to_restore_names_the_default_only_when_install_sets_one(crio):
    crio("install", "nvidia", default=True)
    engine = CrioEngine(crio.dropin)
    plan = engine.plan_install(txn.read, Request("nvidia-cdi", B, False), {})
    assert plan.expect_old == {"present": {"nvidia": A}, "absent": ["nvidia-cdi"],
                               "default": None}
    plan = engine.plan_install(txn.read, Request("nvidia-cdi", B, True), {})
    assert plan.expect_old["default"] == "nvidia"
