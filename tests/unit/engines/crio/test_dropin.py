"""CRI-O: nvdocker2's one drop-in holds every runtime it installed there (reference §11). Driven
through the engine transaction with a service stand-in that records what it was asked to
verify; no CRI-O is installed where these tests run."""

from __future__ import annotations

import sys

import pytest

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request
from nvdocker2.engines.base import Service as BaseService
from nvdocker2.engines.crio import MARK, CrioEngine
from nvdocker2.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

A, B = "/usr/bin/nvidia-container-runtime", "/opt/nvidia/bin/nvidia-container-runtime.cdi"


class Service(BaseService):
    strategy, verifies, log_description = "systemd", True, "the test log"

    def __init__(self) -> None:
        self.applied, self.verified = 0, []

    def apply(self) -> None:
        self.applied += 1

    def verify(self, expect, timeout) -> None:
        self.verified.append(expect)


@pytest.fixture
def crio(tmp_path):
    d = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    d.parent.mkdir()
    eng, svc, st = CrioEngine(d), Service(), tmp_path / "state"

    def go(action, name, path=A, default=False):
        return txn.run(eng, action, Request(name, path, default), service=svc, state=st)

    return d, svc, go


def _data(d):
    return tomllib.loads(d.read_text())["crio"]["runtime"]


def test_two_runtimes_live_side_by_side_and_go_one_by_one(crio):
    d, svc, go = crio
    go("install", "nvidia")
    only_nvidia = d.read_bytes()
    go("install", "nvidia-cdi", B)
    assert _data(d)["runtimes"] == {"nvidia": {"runtime_path": A, "runtime_type": "oci"},
                                    "nvidia-cdi": {"runtime_path": B, "runtime_type": "oci"}}
    assert d.read_text().startswith(MARK)
    assert svc.verified[-1] == {"present": {"nvidia": A, "nvidia-cdi": B}, "absent": [],
                                "default": None}
    res = go("uninstall", "nvidia-cdi")
    assert res.changed and d.read_bytes() == only_nvidia  # the other one, byte for byte
    assert svc.verified[-1] == {"present": {"nvidia": A}, "absent": ["nvidia-cdi"],
                                "default": None}
    go("uninstall", "nvidia")
    assert not d.exists() and svc.applied == 4


def test_uninstalling_the_first_keeps_the_second(crio):
    d, svc, go = crio
    go("install", "nvidia-cdi", B)
    only_cdi = d.read_bytes()
    go("install", "nvidia")
    go("uninstall", "nvidia")
    assert d.read_bytes() == only_cdi
    assert not go("uninstall", "nvidia").changed and svc.applied == 3  # gone: nothing to do


def test_reinstall_with_another_path_replaces_only_that_table(crio):
    d, svc, go = crio
    go("install", "nvidia")
    go("install", "nvidia-cdi", B)
    res = go("install", "nvidia", "/usr/local/bin/nvidia-container-runtime")
    assert [(c.key, c.action) for c in res.changes] == [("crio.runtime.runtimes.nvidia",
                                                         "replaced")]
    rts = _data(d)["runtimes"]
    assert rts["nvidia"]["runtime_path"] == "/usr/local/bin/nvidia-container-runtime"
    assert rts["nvidia-cdi"]["runtime_path"] == B
    assert not go("install", "nvidia-cdi", B).changed and svc.applied == 3


def test_set_default_then_uninstall_of_that_name_clears_the_default(crio):
    d, svc, go = crio
    go("install", "nvidia")
    go("install", "nvidia-cdi", B, default=True)
    assert _data(d)["default_runtime"] == "nvidia-cdi"
    assert svc.verified[-1]["default"] == "nvidia-cdi"
    go("uninstall", "nvidia")  # not the default: it stays
    assert _data(d) == {"default_runtime": "nvidia-cdi",
                        "runtimes": {"nvidia-cdi": {"runtime_path": B, "runtime_type": "oci"}}}
    go("install", "nvidia")
    go("uninstall", "nvidia-cdi")
    assert _data(d) == {"runtimes": {"nvidia": {"runtime_path": A, "runtime_type": "oci"}}}
    assert svc.verified[-1] == {"present": {"nvidia": A}, "absent": ["nvidia-cdi"],
                                "default": None}


def test_a_refused_change_is_verified_back_to_every_runtime_of_the_old_file(crio, tmp_path):
    d, svc, go = crio
    go("install", "nvidia", default=True)
    before = d.read_bytes()
    plan = CrioEngine(d).plan_install(txn.read, Request("nvidia-cdi", B, True), {})
    assert plan.expect_old == {"present": {"nvidia": A}, "absent": ["nvidia-cdi"],
                               "default": "nvidia"}
    plan = CrioEngine(d).plan_uninstall(txn.read, Request("nvidia", A), {})
    assert plan.files[0].new is None and plan.expect_old["default"] == "nvidia"
    assert d.read_bytes() == before


def test_hand_added_comment_is_kept_when_nothing_changes(crio):
    d, svc, go = crio
    go("install", "nvidia")
    d.write_bytes(d.read_bytes() + b"# checked by ops\n")
    assert not go("install", "nvidia").changed
    assert d.read_bytes().endswith(b"# checked by ops\n") and svc.applied == 1


@pytest.mark.parametrize("text, says", [
    ("[crio.runtime]\nlog_level = 'debug'\n", "was not written by nvdocker2"),
    (MARK + "[crio.runtime\n", "not valid TOML"),
    (MARK + "crio = 'x'\n", "crio is a str, not a table"),
    (MARK + "[crio]\nruntime = 3\n", "crio.runtime is a int, not a table"),
    (MARK + "[crio.runtime]\nruntimes = ['a']\n", "crio.runtime.runtimes is a list"),
    (MARK + "[crio.runtime.runtimes]\nnvidia = 'x'\n", "runtimes.nvidia is not a table"),
    (MARK + "[crio.runtime.runtimes.nvidia]\nruntime_path = 3\n", "with a string runtime_path"),
    (MARK + "[crio.runtime]\ndefault_runtime = 1\n", "default_runtime is not a string"),
])
@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_hostile_dropins_are_bad_input_on_one_line_and_kept(crio, text, says, action):
    d, svc, go = crio
    d.write_text(text)
    with pytest.raises(BadInput) as e:
        go(action, "nvidia")
    assert e.value.exit_code == 2 and says in e.value.message
    assert "\n" not in e.value.message and "\n" not in e.value.hint
    assert d.read_text() == text and svc.applied == 0


def test_non_utf8_dropin_is_not_ours(crio):
    d, svc, go = crio
    d.write_bytes(MARK.encode() + b"\xff\xfe\n")
    with pytest.raises(BadInput, match="not written by nvdocker2"):
        go("install", "nvidia")


def test_status_reports_every_runtime_of_the_dropin_and_a_broken_one(tmp_path, monkeypatch):
    import json

    from ...cli_run import cli, engine_env

    engine_env(tmp_path, monkeypatch)
    d = tmp_path / "99-nvidia.conf"
    for name, path, extra in (("nvidia", A, []), ("nvidia-cdi", B, ["--set-default"])):
        assert cli("install", "--engine", "crio", "--config", str(d), "--runtime-name", name,
                   "--runtime-path", path, "--allow-missing-runtime", "--reload", "none",
                   *extra)[0] == 0
    code, out, _ = cli("status", "--engine", "crio", "--config", str(d), "--json")
    st = json.loads(out)
    assert code == 0 and st["runtimes"] == {"nvidia": A, "nvidia-cdi": B}
    assert st["default_runtime"] == "nvidia-cdi" and set(st["journal"]["runtimes"]) == {
        "nvidia", "nvidia-cdi"}
    d.write_text(MARK + "[crio.runtime\n")
    st = json.loads(cli("status", "--engine", "crio", "--config", str(d), "--json")[1])
    assert "not valid TOML" in st["error"] and "runtimes" not in st
