"""Docker Desktop is recognised from the Engine API and `install` refuses it before writing.

Docker Desktop cannot run here: its daemon is played by the TEST FIXTURE FakeEngine
(tests/unit/fake_engine.py), a real unix socket answering /info as Desktop's dockerd does
(OperatingSystem "Docker Desktop"), or serving at Desktop's own socket path."""

from __future__ import annotations

import json
import os

import pytest
from ...cli_run import cli
from ...fake_engine import FakeEngine

from nvdocker2.engines.docker.desktop import WHAT_WORKS, desktop_reason

DAEMON_JSON = b'{\n    "log-driver": "json-file",\n    "runtimes": {}\n}\n'


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(DAEMON_JSON)
    return cfg


@pytest.fixture
def desktop(tmp_path):
    fake = FakeEngine(tmp_path / "d.sock")
    fake.info.update({"OperatingSystem": "Docker Desktop", "Name": "docker-desktop",
                      "KernelVersion": "5.15.133.1-microsoft-standard-WSL2"})
    yield fake.start()
    fake.stop()


def _nothing_written(cfg, tmp_path):
    assert cfg.read_bytes() == DAEMON_JSON
    assert sorted(os.listdir(cfg.parent)) == sorted(
        n for n in os.listdir(tmp_path) if n != "state")
    assert not (tmp_path / "state").exists()  # no lock, no journal, no backup


@pytest.mark.parametrize("extra", [[], ["--set-default"], ["--mode", "cdi"], ["--dry-run"]])
def test_install_refuses_docker_desktop_with_exit_2_and_writes_nothing(
        env, desktop, tmp_path, extra):
    code, out, err = cli("install", "--config", str(env), "--docker-host", desktop.host, *extra)
    assert code == 2, err
    assert err.splitlines() == [
        f"error: {desktop.socket_path} is Docker Desktop's daemon (its Engine API reports"
        f' OperatingSystem "Docker Desktop"); it never reads {env}, so nvdocker2 does not'
        " install there",
        f"hint: {WHAT_WORKS}",
    ]
    assert "--gpus all" in err and "Docker Desktop's settings" in err
    assert desktop.requests == ["/info"]
    _nothing_written(env, tmp_path)


def test_desktops_socket_path_alone_is_enough(env, tmp_path):
    sock_dir = tmp_path / "h/.docker/desktop"
    sock_dir.mkdir(parents=True)
    fake = FakeEngine(sock_dir / "docker.sock").start()  # an /info that says nothing of Desktop
    try:
        code, _out, err = cli("install", "--config", str(env), "--docker-host", fake.host)
    finally:
        fake.stop()
    assert code == 2
    assert f"({sock_dir}/docker.sock is Docker Desktop's socket)" in err
    _nothing_written(env, tmp_path)


def test_a_linux_dockerd_is_not_taken_for_desktop(env, tmp_path):
    fake = FakeEngine(tmp_path / "l.sock")
    fake.info["OperatingSystem"] = "Debian GNU/Linux 12 (bookworm)"
    fake.start()
    try:
        code, out, err = cli("install", "--config", str(env), "--docker-host", fake.host,
                             "--dry-run")
    finally:
        fake.stop()
    assert code == 0, err
    assert "Desktop" not in out + err
    assert desktop_reason({"OperatingSystem": "Docker Desktop"}, None)
    assert desktop_reason({"OperatingSystem": "Ubuntu 22.04"}, "/run/docker.sock") is None


def test_status_and_doctor_say_what_works_on_desktop(env, desktop):
    code, out, err = cli("status", "--config", str(env), "--docker-host", desktop.host)
    assert f"Docker Desktop: its Engine API reports OperatingSystem \"Docker Desktop\"; " \
           f"install refuses it. {WHAT_WORKS}" in out.splitlines()
    code, out, err = cli("status", "--config", str(env), "--docker-host", desktop.host, "--json")
    assert json.loads(out)["dockerd"]["desktop"].startswith("its Engine API reports")
    code, out, err = cli("doctor", "--config", str(env), "--docker-host", desktop.host, "--json")
    (res,) = [c for c in json.loads(out)["checks"] if c["id"] == "dockerd.desktop"]
    assert res["status"] == "warn"
    assert "is Docker Desktop's daemon" in res["detail"] and res["hint"] == WHAT_WORKS
