"""`install --mode direct` end to end: the real CLI, a private dockerd, and the runtime's
config.toml as a file of the same transaction as daemon.json (backed up, in the dry run's
diff, undone byte for byte by uninstall and rollback, restored when dockerd rejects the
change, refused when another user planted it)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from dockerd_cli import INSTALL, make_stand_ins, nvdocker2, systemd_env, tcp_host

HAND_WRITTEN = b"""\
# ops: do not reorder
[nvidia-container-runtime]
mode = 'legacy'   # until the driver upgrade
log-level = "info"

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig"
"""
DIRECT = HAND_WRITTEN.replace(b"mode = 'legacy'   #", b'mode = "direct"   #')


@pytest.fixture
def toml(tmp_path):
    path = tmp_path / "etc" / "nvidia-container-runtime" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(HAND_WRITTEN)
    return path


_made: list[Path] = []


def request_cleanup(path: Path) -> None:
    _made.append(path)


@pytest.fixture(autouse=True)
def _remove_made():
    yield
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def _env(toml: Path, **extra: str) -> dict:
    return {"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml), **extra}


def _backups_of(path: Path) -> list[dict]:
    state = Path(os.environ["NVDOCKER2_STATE_DIR"])
    metas = [json.loads(p.read_text()) for p in (state / "backups").glob("*.meta.json")] \
        if (state / "backups").is_dir() else []
    return [m for m in metas if m["config"] == str(path)]


def test_install_mode_direct_sets_the_mode_backs_it_up_and_uninstall_gives_it_back(dockerd,
                                                                                   toml):
    original = dockerd.config_file.read_bytes()
    out = nvdocker2(dockerd, *INSTALL, "--mode", "direct", env=_env(toml))
    assert out.returncode == 0, out.stderr
    assert toml.read_bytes() == DIRECT
    assert "nvidia" in dockerd.info()["Runtimes"]
    [backup] = _backups_of(toml)
    assert backup["existed"] and backup["for_config"] == str(dockerd.config_file)

    status = nvdocker2(dockerd, "status", "--json", env=_env(toml), daemon_flags=False)
    assert json.loads(status.stdout)["runtime_mode"]["matches"] is True

    out = nvdocker2(dockerd, "uninstall", env=_env(toml))
    assert out.returncode == 0, out.stderr
    assert toml.read_bytes() == HAND_WRITTEN
    assert dockerd.config_file.read_bytes() == original
    assert "nvidia" not in dockerd.info()["Runtimes"]


def test_uninstall_removes_a_config_toml_install_created(dockerd, tmp_path):
    toml = tmp_path / "new" / "config.toml"
    out = nvdocker2(dockerd, *INSTALL, "--mode", "direct", env=_env(toml))
    assert out.returncode == 0, out.stderr
    assert toml.read_bytes() == b'[nvidia-container-runtime]\nmode = "direct"\n'
    out = nvdocker2(dockerd, "uninstall", env=_env(toml))
    assert out.returncode == 0, out.stderr
    assert not toml.exists() and not toml.parent.exists()


def test_dry_run_shows_both_diffs_and_writes_nothing(dockerd, toml):
    original = dockerd.config_file.read_bytes()
    out = nvdocker2(dockerd, *INSTALL, "--mode", "direct", "--dry-run", "--json",
                    env=_env(toml))
    assert out.returncode == 0, out.stderr
    diff = json.loads(out.stdout)["diff"]
    assert f"--- a{toml}\n" in diff and f"--- a{dockerd.config_file}\n" in diff
    assert "+mode = \"direct\"   # until the driver upgrade\n" in diff
    assert toml.read_bytes() == HAND_WRITTEN
    assert dockerd.config_file.read_bytes() == original
    assert not _backups_of(toml)


def test_rollback_reverts_daemon_json_and_config_toml(dockerd, toml):
    original = dockerd.config_file.read_bytes()
    assert nvdocker2(dockerd, *INSTALL, "--mode", "direct", env=_env(toml)).returncode == 0
    out = nvdocker2(dockerd, "rollback", env=_env(toml))
    assert out.returncode == 0, out.stderr
    assert toml.read_bytes() == HAND_WRITTEN
    assert dockerd.config_file.read_bytes() == original
    assert "nvidia" not in dockerd.info()["Runtimes"]


def test_a_rejected_reload_restores_config_toml_with_daemon_json(make_dockerd, tmp_path, toml):
    # As in test_install_e2e: dockerd's flags cannot be seen, and it refuses the file on
    # reload ("default-runtime" is also its --default-runtime flag): exit 4, both restored.
    stand_ins = make_stand_ins(tmp_path)
    flag, tcp = tcp_host()
    daemon = make_dockerd(extra_args=["--default-runtime=runc", flag])
    original = daemon.config_file.read_bytes()
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_HIDE_PID="1", **_env(toml))
    out = nvdocker2(daemon, *INSTALL, "--set-default", "--mode", "direct", "--docker-host",
                    tcp, env=env, daemon_flags=False)
    assert out.returncode == 4, out.stderr
    assert "(with 1 other file)" in out.stderr
    assert toml.read_bytes() == HAND_WRITTEN
    assert daemon.config_file.read_bytes() == original


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a file as nobody")
def test_a_symlink_nobody_planted_at_config_toml_is_refused_before_writing(dockerd, tmp_path):
    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="nvdocker2-mode-"))  # nobody cannot reach tmp_path
    request_cleanup(top)
    os.chmod(top, 0o755)
    d = top / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)  # sticky and world-writable, like /tmp: nobody can add an entry
    victim = tmp_path / "victim"
    victim.write_bytes(b"# root's file\n")
    toml = d / "config.toml"
    subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                    "--clear-groups", "ln", "-s", str(victim), str(toml)], check=True)
    assert os.lstat(toml).st_uid == nobody.pw_uid
    original = dockerd.config_file.read_bytes()
    out = nvdocker2(dockerd, *INSTALL, "--mode", "direct", env=_env(toml))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {toml}: refusing to edit this config.toml")
    assert victim.read_bytes() == b"# root's file\n"
    assert dockerd.config_file.read_bytes() == original
    assert "nvidia" not in dockerd.info()["Runtimes"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to nogroup")
def test_config_toml_in_a_group_writable_directory_is_refused(dockerd, toml):
    os.chown(toml.parent, 0, pwd.getpwnam("nobody").pw_gid)
    os.chmod(toml.parent, 0o775)
    original = dockerd.config_file.read_bytes()
    for extra in ((), ("--dry-run",)):
        out = nvdocker2(dockerd, *INSTALL, "--mode", "direct", *extra, env=_env(toml))
        assert out.returncode == 2, out.stderr
        assert f"{toml.parent} is writable by other users" in out.stderr
    assert toml.read_bytes() == HAND_WRITTEN
    assert dockerd.config_file.read_bytes() == original
