"""The mapping of nvdocker2's exit codes and --json to the Ansible module's result (reference §10),
for every exit code, run in the Ansible virtual environment's Python (the module imports
ansible.module_utils, which nvdocker2's own environment does not have)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULES = REPO / "ansible/ansible_collections/nvdocker2/gpu/plugins/modules"

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import docker_runtime as m
cases = json.loads(sys.stdin.read())
out = {"map": [m.map_result(*c) for c in cases["map"]],
       "argv": [m.command_line("nvdocker2", p, check) for p, check in cases["argv"]]}
print(json.dumps(out))
"""


def _python() -> str:
    where = Path(os.environ.get("NVDOCKER2_ANSIBLE_BIN") or REPO / ".venv-ansible" / "bin")
    for name in ("python3", "python"):
        if (where / name).exists():
            return str(where / name)
    message = f"no Python with ansible-core in {where} (run: scripts/ansible-test.sh venv)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _run(map_cases=(), argv_cases=()) -> dict:
    proc = subprocess.run(
        [_python(), "-c", PROBE, str(MODULES)],
        input=json.dumps({"map": list(map_cases), "argv": list(argv_cases)}),
        capture_output=True, text=True, timeout=60, check=True,
    )
    return json.loads(proc.stdout)


def _failure(rc: int) -> list:
    stdout = json.dumps({"changed": False, "error": f"it failed ({rc})", "hint": "do this",
                         "exit_code": rc})
    return [rc, stdout, f"error: it failed ({rc})\nhint: do this\n", False]


def test_each_failure_code_fails_with_the_error_line_and_rolled_back_only_for_4():
    results = _run(map_cases=[_failure(rc) for rc in (1, 2, 3, 4, 5)])["map"]
    for rc, (failed, result, warnings) in zip((1, 2, 3, 4, 5), results):
        assert failed is True and warnings == []
        assert result["msg"] == f"error: it failed ({rc})" and result["hint"] == "do this"
        assert result["rc"] == rc and result["rolled_back"] is (rc == 4)
        assert result["changed"] is False


def test_success_carries_the_json_fields_warnings_apart_and_the_diff_in_diff_mode():
    obj = {"action": "install", "changed": True, "config": "/etc/docker/daemon.json",
           "verified": True, "reload": "signal", "backup": "b1", "warnings": ["careful"],
           "notes": ["n"], "dry_run": True, "diff": "--- a\n+++ b\n", "before": "{}\n",
           "after": '{"runtimes": {}}\n'}
    plain, with_diff = _run(map_cases=[[0, json.dumps(obj), "", False],
                                       [0, json.dumps(obj), "", True]])["map"]
    failed, result, warnings = plain
    assert failed is False and warnings == ["careful"]
    assert result["verified"] is True and result["changed"] is True and result["rc"] == 0
    assert result["rolled_back"] is False and result["notes"] == ["n"]
    assert result["unified_diff"] == "--- a\n+++ b\n"
    assert not {"warnings", "diff", "before", "after"} & set(result)
    diff = with_diff[1]["diff"]
    assert (diff["before"], diff["after"]) == ("{}\n", '{"runtimes": {}}\n')


def test_output_that_is_not_a_result_fails_the_host():
    (failed, result, _), (failed2, result2, _) = _run(
        map_cases=[[0, "not json", "", False],
                   [2, "", "Usage: nvdocker2\nError: bad flag\n", False]]
    )["map"]
    assert failed and result["msg"] == "nvdocker2 printed no JSON result: not json"
    assert failed2 and result2["msg"] == "Error: bad flag" and result2["rc"] == 2


def test_options_become_flags_of_the_command_for_the_state():
    base = {"state": "present", "engine": "docker", "name": "nvidia",
            "path": "/usr/bin/nvidia-container-runtime",
            "runtime_args": ["--debug", "x"], "set_default": True, "mode": None,
            "cdi_spec_dir": None, "runtime_config": None,
            "config": "/c/daemon.json", "state_dir": "/s", "reload": "signal", "restart": False,
            "verify": False, "docker_host": "unix:///d.sock", "pidfile": "/p.pid",
            "unit": None, "containerd_address": None, "timeout": 12.5, "executable": "nvdocker2"}
    present, absent_check = _run(argv_cases=[[base, False],
                                             [dict(base, state="absent"), True]])["argv"]
    assert present == [
        "nvdocker2", "install", "--json", "--engine", "docker", "--runtime-name", "nvidia",
        "--runtime-path", "/usr/bin/nvidia-container-runtime",
        "--runtime-arg=--debug", "--runtime-arg=x", "--set-default",
        "--config", "/c/daemon.json", "--reload", "signal", "--no-verify",
        "--docker-host", "unix:///d.sock", "--pidfile", "/p.pid", "--timeout", "12.5",
    ]
    assert absent_check == [
        "nvdocker2", "uninstall", "--json", "--engine", "docker", "--runtime-name", "nvidia",
        "--config", "/c/daemon.json", "--reload", "signal", "--no-verify",
        "--docker-host", "unix:///d.sock", "--pidfile", "/p.pid", "--timeout", "12.5",
        "--dry-run", "--require-daemon",
    ]


def _base(**over) -> dict:
    params = {"state": "present", "engine": "docker", "name": "nvidia", "path": None,
              "runtime_args": [], "set_default": False, "mode": None, "cdi_spec_dir": None,
              "runtime_config": None, "config": None, "state_dir": None, "reload": "auto",
              "restart": False, "verify": True, "docker_host": None, "pidfile": None,
              "unit": None, "containerd_address": None, "timeout": 30, "executable": "nvdocker2"}
    params.update(over)
    return params


def test_absent_passes_mode_cdi_and_no_other_mode():
    cdi, direct = _run(argv_cases=[
        [_base(state="absent", mode="cdi", cdi_spec_dir="/etc/cdi"), False],
        [_base(state="absent", mode="direct"), False],
    ])["argv"]
    assert cdi == ["nvdocker2", "uninstall", "--json", "--engine", "docker", "--runtime-name",
                   "nvidia", "--mode", "cdi", "--cdi-spec-dir", "/etc/cdi", "--reload", "auto",
                   "--timeout", "30"]
    assert "--mode" not in direct  # uninstall removes the entry; config.toml's mode stays


def test_engine_unit_and_address_are_passed_through():
    (containerd,) = _run(argv_cases=[[
        _base(engine="containerd", config="/etc/containerd/config.toml", unit="ctd",
              containerd_address="/run/c.sock", set_default=True), False]])["argv"]
    assert containerd == [
        "nvdocker2", "install", "--json", "--engine", "containerd", "--runtime-name", "nvidia",
        "--set-default", "--config", "/etc/containerd/config.toml", "--reload", "auto",
        "--unit", "ctd", "--containerd-address", "/run/c.sock", "--timeout", "30"]


def test_no_file_of_the_collection_names_a_world_writable_directory():
    """A fixed name under /tmp or /var/tmp is one another local user can take first."""
    collection = MODULES.parents[1]
    files = [p for p in collection.rglob("*") if p.is_file()
             and "tests/output" not in p.relative_to(collection).as_posix()]
    assert len(files) > 5
    named = [str(p.relative_to(collection)) for p in files
             if "/tmp" in p.read_text(errors="replace")]
    assert named == []
