"""Uninstall puts back only what install did: a `runtimes` table install created goes only when
it is empty, a runtime the operator added since stays, and what uninstall says names each
action (through the CLI, byte-exact files)."""

from __future__ import annotations

import json

import pytest
from ...cli_run import cli

RT = "/usr/bin/nvidia-container-runtime"
NONE = ["--reload", "none", "--no-verify"]
ORIGINAL = b'{\n  "debug": true\n}\n'
WITH_CRUN = b'{\n  "debug": true,\n  "runtimes": {\n    "crun": {"path": "/usr/bin/crun"}\n  }\n}\n'


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "etc" / "daemon.json"
    path.parent.mkdir()
    path.write_bytes(ORIGINAL)
    return path


def install(cfg, *extra):
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", *NONE, *extra)
    assert code == 0, err
    return out


def test_a_runtime_added_since_install_stays_in_the_table_install_created(cfg):
    install(cfg)
    data = json.loads(cfg.read_bytes())
    data["runtimes"]["crun"] = {"path": "/usr/bin/crun"}
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == (
        b'{\n  "debug": true,\n  "runtimes": {\n    "crun": {\n'
        b'      "path": "/usr/bin/crun"\n    }\n  }\n}\n')
    assert "removed runtimes.nvidia\n" in out
    assert "removed runtimes\n" not in out


def test_uninstall_names_each_action(cfg):
    install(cfg, "--set-default")
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == ORIGINAL
    changes = [line for line in out.splitlines()
               if line.split(" ")[0] in ("added", "replaced", "removed", "unchanged", "")]
    assert changes == ["removed runtimes.nvidia", "removed runtimes", "removed default-runtime"]
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE, "--json")
    assert code == 0, err
    assert json.loads(out)["changes"] == []


def test_uninstall_after_the_operator_removed_the_runtime_changes_nothing(cfg):
    install(cfg)
    cfg.write_bytes(WITH_CRUN)
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["changed"], result["changes"], result["backup"]) == (False, [], None)
    assert cfg.read_bytes() == WITH_CRUN


def test_uninstall_restores_the_runtime_install_replaced(cfg):
    cfg.write_bytes(b'{"runtimes": {"nvidia": {"path": "/opt/old-runtime"}}}')
    out = install(cfg)
    assert 'replaced runtimes.nvidia: {"path": "/usr/bin/nvidia-container-runtime"}\n' in out
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == b'{"runtimes": {"nvidia": {"path": "/opt/old-runtime"}}}'
    assert 'replaced runtimes.nvidia: {"path": "/opt/old-runtime"}\n' in out
