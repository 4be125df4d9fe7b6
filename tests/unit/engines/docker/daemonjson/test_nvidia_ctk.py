"""The daemon.json that NVIDIA's `nvidia-ctk runtime configure --runtime=docker` writes (Go's
json.MarshalIndent with four spaces: keys sorted, no newline at the end, an `nvidia` entry with
`"args": []` and the bare name "nvidia-container-runtime" as its path): `install` adopts that
entry (same name, our absolute path) and `uninstall` gives NVIDIA's exact bytes back."""

from __future__ import annotations

import json

import pytest
from ....cli_run import cli

RT = "/usr/bin/nvidia-container-runtime"
NONE = ["--reload", "none", "--no-verify"]
# What nvidia-ctk wrote over a daemon.json that held only "data-root", with --set-as-default.
NVIDIA_WROTE = (
    b'{\n'
    b'    "data-root": "/srv/docker",\n'
    b'    "default-runtime": "nvidia",\n'
    b'    "runtimes": {\n'
    b'        "nvidia": {\n'
    b'            "args": [],\n'
    b'            "path": "nvidia-container-runtime"\n'
    b'        }\n'
    b'    }\n'
    b'}'
)
NVIDIA_WROTE_NO_DEFAULT = NVIDIA_WROTE.replace(b'    "default-runtime": "nvidia",\n', b"")


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))


@pytest.mark.parametrize("written", [NVIDIA_WROTE, NVIDIA_WROTE_NO_DEFAULT],
                         ids=["set-as-default", "not-default"])
def test_install_adopts_nvidias_entry_and_uninstall_gives_nvidias_bytes_back(
        tmp_path, state, written):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(written)
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", *NONE)
    assert code == 0, err
    adopted = json.loads(cfg.read_bytes())
    assert adopted["runtimes"] == {"nvidia": {"path": RT}}, cfg.read_bytes()
    assert adopted["data-root"] == "/srv/docker"
    assert adopted.get("default-runtime") == json.loads(written).get("default-runtime")
    assert f'replaced runtimes.nvidia: {{"path": "{RT}"}}\n' in out, out

    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == written


def test_uninstall_after_an_admin_edit_puts_nvidias_entry_back_and_keeps_the_edit(
        tmp_path, state):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(NVIDIA_WROTE)
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", *NONE)
    assert code == 0, err
    cfg.write_bytes(cfg.read_bytes().replace(b'"/srv/docker"', b'"/srv/docker2"'))
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == NVIDIA_WROTE.replace(b'"/srv/docker"', b'"/srv/docker2"')
    assert 'replaced runtimes.nvidia: {"args": [], "path": "nvidia-container-runtime"}\n' in out
