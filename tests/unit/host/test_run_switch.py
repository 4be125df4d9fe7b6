"""The test suite's switch (`hooks_on`): on only for a trusted file at the top of the virtual
environment the interpreter runs in; read once. Each case points sys.prefix at a directory of
its own (owned by root under pytest's sticky /tmp) and asks again."""

from __future__ import annotations

import os
import sys

import pytest

from nvdocker2.host import run, testing


@pytest.fixture
def venv(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the switch must be root's file")
    prefix = tmp_path / "venv"
    prefix.mkdir()
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(run, "_hooks", None)
    monkeypatch.setenv("NVDOCKER2_TEST_SOMETHING", "asked")
    return prefix


def _switch(prefix, mode=0o644):
    path = prefix / run.HOOKS_SWITCH
    path.write_bytes(b"")
    path.chmod(mode)
    return path


def test_a_trusted_switch_in_the_venv_turns_the_hooks_on(venv):
    _switch(venv)
    assert run.hooks_on() is True
    assert testing.hook("NVDOCKER2_TEST_SOMETHING") == "asked"


def test_the_answer_is_read_once(venv):
    _switch(venv).unlink()
    assert run.hooks_on() is False
    _switch(venv)
    assert run.hooks_on() is False  # the first answer holds for the process


@pytest.mark.parametrize("case", ["missing", "a directory", "writable by others",
                                  "in a folder others can write", "not a venv"])
def test_no_trusted_switch_in_a_venv_leaves_the_hooks_off(venv, monkeypatch, case):
    if case == "missing":
        pass
    elif case == "a directory":
        (venv / run.HOOKS_SWITCH).mkdir()
    elif case == "writable by others":
        _switch(venv, 0o666)
    elif case == "in a folder others can write":
        _switch(venv)
        venv.chmod(0o777)
    else:
        _switch(venv)
        monkeypatch.setattr(sys, "base_prefix", str(venv))
    assert run.hooks_on() is False
    assert testing.hook("NVDOCKER2_TEST_SOMETHING") is None


def test_the_stand_ins_knobs_reach_a_program_only_under_the_switch(venv, monkeypatch):
    monkeypatch.setenv("NVD2_KNOB", "1")
    assert "NVD2_KNOB" not in run.environment()
    monkeypatch.setattr(run, "_hooks", None)
    _switch(venv)
    assert run.environment()["NVD2_KNOB"] == "1"
