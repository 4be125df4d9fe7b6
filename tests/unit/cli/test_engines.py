"""`--engine` on the CLI: flags, output and exit codes for containerd and CRI-O (reference §11)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from ..cli_run import cli, engine_env

RT = "/usr/bin/nvidia-container-runtime"
CFG = (b'version = 2\n# mine\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
       b'  snapshotter = "overlayfs"\n')


@pytest.fixture
def env(tmp_path, monkeypatch):
    return engine_env(tmp_path, monkeypatch, CFG)


def _invoke(*args):
    code, out, err = cli(*args)
    return SimpleNamespace(exit_code=code, stdout=out, stderr=err)


def test_install_json_then_unchanged_then_uninstall(env):
    r = _invoke("install", "--engine", "containerd", "--no-verify", "--config", str(env),
                "--runtime-path", RT, "--allow-missing-runtime", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["changed"] and out["reload"] == "none" and out["backup"]
    assert any("not restarted" in n for n in out["notes"])
    assert any("checked as TOML only" in w for w in out["warnings"])
    assert env.read_bytes().startswith(CFG)
    r = _invoke("install", "--engine", "containerd", "--no-verify", "--config", str(env),
                "--runtime-path", RT, "--allow-missing-runtime")
    assert r.exit_code == 0 and "nothing written, containerd not restarted" in r.stdout
    r = _invoke("status", "--engine", "containerd", "--config", str(env), "--json")
    st = json.loads(r.stdout)
    # The config named no runtime: containerd's built-in runc is spelled out beside nvidia (a
    # containerd <= 1.7 would drop it otherwise; with no containerd here to ask, it is assumed).
    assert st["runtimes"] == {"runc": "runc", "nvidia": RT} and st["layout"] == "in place"
    r = _invoke("uninstall", "--engine", "containerd", "--no-verify", "--config", str(env))
    assert r.exit_code == 0 and env.read_bytes() == CFG


def test_reload_modes_containerd_does_not_have_are_bad_flags(env):
    for mode in ("signal", "sysv"):
        r = _invoke("install", "--engine", "containerd", "--config", str(env), "--reload", mode)
        assert r.exit_code == 2
        assert r.stderr.startswith("error: ") and "hint: use --reload auto" in r.stderr
    assert env.read_bytes() == CFG


@pytest.mark.parametrize("flag", [["--runtime-arg", "--debug"], ["--docker-host",
                                  "unix:///x.sock"], ["--restart"], ["--mode", "direct"]])
def test_docker_only_flags_are_refused_for_containerd(env, flag):
    r = _invoke("install", "--engine", "containerd", "--config", str(env), *flag)
    assert r.exit_code == 2 and "applies to --engine docker only" in r.stderr
    assert env.read_bytes() == CFG


def test_rollback_restores_the_previous_bytes(env):
    _invoke("install", "--engine", "containerd", "--no-verify", "--config", str(env),
            "--runtime-path", RT, "--allow-missing-runtime")
    r = _invoke("rollback", "--engine", "containerd", "--no-verify", "--config", str(env))
    assert r.exit_code == 0, r.stderr
    assert env.read_bytes() == CFG


def test_unknown_engine_is_refused(env):
    r = _invoke("install", "--engine", "podman", "--config", str(env))
    assert r.exit_code == 2 and env.read_bytes() == CFG


def test_crio_install_and_doctor(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    drop = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    drop.parent.mkdir()
    r = _invoke("install", "--engine", "crio", "--config", str(drop), "--runtime-path", RT,
                "--allow-missing-runtime",
                "--reload", "none")
    assert r.exit_code == 0, r.stderr
    assert 'runtime_path = "/usr/bin/nvidia-container-runtime"' in drop.read_text()
    r = _invoke("doctor", "--engine", "crio", "--config", str(drop), "--json")
    checks = {c["id"]: c["status"] for c in json.loads(r.stdout)["checks"]}
    assert checks["crio-running"] == "warn"  # no CRI-O here
    assert checks["crio-dropin"] == ("ok" if Path(RT).exists() else "fail")
