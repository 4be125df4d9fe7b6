"""containerd's drop-ins through the CLI: on 1.x nothing leaves config.toml (registry passwords
included), a new drop-in gets config.toml's mode, an older nvdocker2's 1.x drop-in is removed,
doctor names a drop-in that hides config.toml's CRI section, and uninstall lists every runtime
it takes off."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ...cli_run import cli, engine_env

from nvdocker2.store.journal import Journal
from nvdocker2.engines.containerd import edit

RT = "/usr/bin/nvidia-container-runtime"
SECRET = "hunter2-registry-password"
CRI = 'plugins."io.containerd.grpc.v1.cri"'


def _secret_config(d: Path) -> bytes:
    return (f'version = 2\nimports = ["{d}/conf.d/*.toml"]\n# registry credentials: root only\n'
            f'[{CRI}]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n'
            f'[{CRI}.registry.configs."registry.example".auth]\n'
            f'  username = "ci"\n  password = "{SECRET}"\n').encode()


def _holding(top: Path, needle: bytes, skip: Path) -> list[Path]:
    return sorted(p for p in top.rglob("*") if p.is_file() and skip not in p.parents
                  and needle in p.read_bytes())


@pytest.fixture
def secret_cfg(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    (tmp_path / "conf.d").mkdir()
    cfg = tmp_path / "config.toml"
    fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, _secret_config(tmp_path))
    os.close(fd)
    return cfg


def test_containerd_1_with_an_imported_directory_copies_no_password_out_of_config_toml(
        secret_cfg, tmp_path):
    before = secret_cfg.read_bytes()
    code, _, err = cli("install", "--engine", "containerd", "--config", str(secret_cfg),
                         "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
    assert code == 0, err
    # The attack: read the password from a file another user can read. Only config.toml (0600)
    # holds it; the imported directory got nothing.
    assert _holding(tmp_path, SECRET.encode(), tmp_path / "state") == [secret_cfg]
    assert list((tmp_path / "conf.d").iterdir()) == []
    assert stat.S_IMODE(secret_cfg.stat().st_mode) == 0o600
    after = secret_cfg.read_bytes()
    assert after.startswith(before) and f"BinaryName = \"{RT}\"".encode() in after
    code, _, err = cli("uninstall", "--engine", "containerd", "--config", str(secret_cfg),
                         "--reload", "none")
    assert code == 0, err
    assert secret_cfg.read_bytes() == before


def test_a_new_dropin_gets_the_mode_of_the_config_it_is_part_of(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(b'version = 3\n[plugins."io.containerd.cri.v1.images"]\n'
                    b'  snapshotter = "overlayfs"\n')
    cfg.chmod(0o600)
    code, _, err = cli("install", "--engine", "containerd", "--config", str(cfg),
                         "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
    assert code == 0, err
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    assert drop.read_bytes().startswith(edit.MARK.encode())
    assert stat.S_IMODE(drop.stat().st_mode) == 0o600


def _legacy(tmp_path: Path, cfg: Path) -> Path:
    """What an older nvdocker2 left on containerd 1.x: a drop-in holding a copy of the whole
    CRI section (the password too) plus the runtime, and its journal entry."""
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    drop.write_text(edit.MARK + f'version = 2\n[{CRI}]\nsandbox_image = "registry.k8s.io/pause:'
                    f'3.9"\n[{CRI}.registry.configs."registry.example".auth]\npassword = '
                    f'"{SECRET}"\n[{CRI}.containerd.runtimes.nvidia]\nruntime_type = '
                    f'"io.containerd.runc.v2"\n[{CRI}.containerd.runtimes.nvidia.options]\n'
                    f'BinaryName = "{RT}"\n')
    Journal(tmp_path / "state", cfg).write({"config": str(cfg), "runtimes": {"nvidia": {
        "dropin": str(drop), "dropin_existed": False, "file_existed": True,
        "previous": {"present": False}, "installed": RT, "set_default": False}}})
    return drop


def test_uninstall_removes_the_dropin_an_older_nvdocker2_installed(secret_cfg, tmp_path):
    before = secret_cfg.read_bytes()
    drop = _legacy(tmp_path, secret_cfg)
    code, out, err = cli("uninstall", "--engine", "containerd", "--config", str(secret_cfg),
                         "--reload", "none")
    assert code == 0, err
    assert f"removed {drop}" in out.splitlines()
    assert not drop.exists() and secret_cfg.read_bytes() == before


def test_doctor_reports_the_shadowing_dropin_and_install_moves_the_runtime_home(
        secret_cfg, tmp_path):
    before = secret_cfg.read_bytes()
    drop = _legacy(tmp_path, secret_cfg)
    code, out, err = cli("doctor", "--engine", "containerd", "--config", str(secret_cfg),
                         "--json")
    shadow = next(c for c in json.loads(out)["checks"] if c["id"] == "containerd-shadow")
    assert shadow["status"] == "fail" and str(drop) in shadow["detail"], shadow
    assert code == 1

    code, out, err = cli("install", "--engine", "containerd", "--config", str(secret_cfg),
                         "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
    assert code == 0, err
    assert f"removed {drop}" in out.splitlines()
    assert not drop.exists() and secret_cfg.read_bytes().startswith(before)
    assert _holding(tmp_path, SECRET.encode(), tmp_path / "state") == [secret_cfg]
    code, out, err = cli("doctor", "--engine", "containerd", "--config", str(secret_cfg),
                         "--json")
    shadow = next(c for c in json.loads(out)["checks"] if c["id"] == "containerd-shadow")
    assert shadow["status"] == "ok", shadow

    # Another tool's import with a CRI section hides config.toml's too: a warning.
    other = tmp_path / "conf.d" / "50-other.toml"
    other.write_text(f'version = 2\n[{CRI}]\n  enable_selinux = true\n')
    code, out, err = cli("doctor", "--engine", "containerd", "--config", str(secret_cfg),
                         "--json")
    shadow = next(c for c in json.loads(out)["checks"] if c["id"] == "containerd-shadow")
    assert shadow["status"] == "warn" and str(other) in shadow["detail"], shadow

    code, out, err = cli("uninstall", "--engine", "containerd", "--config", str(secret_cfg),
                         "--reload", "none")
    assert code == 0, err
    assert secret_cfg.read_bytes() == before


def test_uninstall_lists_the_builtin_runc_it_takes_off_with_the_runtime(tmp_path, monkeypatch):
    cfg = engine_env(tmp_path, monkeypatch, b'version = 2\n[plugins."io.containerd.grpc.v1.cri"'
                     b'.containerd]\n  snapshotter = "overlayfs"\n')
    before = cfg.read_bytes()
    code, out, err = cli("install", "--engine", "containerd", "--config", str(cfg),
                         "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
    assert code == 0, err
    listed = [ln for ln in out.splitlines() if ln.startswith(("added ", "removed "))]
    assert [ln.split(":")[0] for ln in listed] == [
        f"added {CRI}.containerd.runtimes.runc", f"added {CRI}.containerd.runtimes.nvidia"]
    code, out, err = cli("uninstall", "--engine", "containerd", "--config", str(cfg),
                         "--reload", "none")
    assert code == 0, err
    assert [ln for ln in out.splitlines() if ln.startswith(("added ", "removed "))] == [
        f"removed {CRI}.containerd.runtimes.nvidia", f"removed {CRI}.containerd.runtimes.runc"]
    assert cfg.read_bytes() == before
