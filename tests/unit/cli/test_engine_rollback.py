"""`rollback --engine crio|containerd --config A` touches only A's files: the newest backup of
another config is not A's to restore, and a backup id of another config is refused."""

from __future__ import annotations

import json

from ..cli_run import cli, engine_env

RT = "/usr/bin/nvidia-container-runtime"


def _install(drop, rt=RT):
    code, out, err = cli("install", "--engine", "crio", "--config", str(drop), "--runtime-path",
                         rt, "--allow-missing-runtime", "--reload", "none", "--json")
    assert code == 0, err
    return json.loads(out)["backup"]


def test_crio_rollback_of_config_a_leaves_config_b_alone(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    a = tmp_path / "a" / "crio.conf.d" / "99-nvidia.conf"
    b = tmp_path / "b" / "crio.conf.d" / "99-nvidia.conf"
    a.parent.mkdir(parents=True)
    b.parent.mkdir(parents=True)
    _install(a)
    b_backup = _install(b, "/opt/b/runtime")  # B's change is the newest
    b_bytes = b.read_bytes()

    code, _, err = cli("rollback", b_backup, "--engine", "crio", "--config", str(a),
                         "--reload", "none")
    assert code == 2
    assert err.startswith("error: ") and len(err.splitlines()) == 2
    assert f"is of {b}" in err and err.splitlines()[1].startswith("hint: ")
    assert a.exists() and b.read_bytes() == b_bytes

    code, _, err = cli("rollback", "--engine", "crio", "--config", str(a), "--reload", "none")
    assert code == 0, err
    assert not a.exists()  # A's install undone: A had no drop-in before it
    assert b.read_bytes() == b_bytes


def test_containerd_rollback_ignores_another_configs_newer_backups(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    base = b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n'
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_bytes(base)
    b.write_bytes(base)
    for cfg in (a, b):
        code, _, err = cli("install", "--engine", "containerd", "--config", str(cfg),
                             "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
        assert code == 0, err
    b_bytes = b.read_bytes()
    code, _, err = cli("rollback", "--engine", "containerd", "--config", str(a),
                         "--reload", "none")
    assert code == 0, err
    assert a.read_bytes() == base and b.read_bytes() == b_bytes
