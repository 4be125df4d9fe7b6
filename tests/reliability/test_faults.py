"""Faults at every step: no space, permission denied, read-only file system, a failing rename,
SIGKILL or SIGTERM between the complete temp file and the rename. Each time daemon.json stays
byte-identical, the exit code is 3 (or 1 when interrupted), and no temp file stays behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from nvdocker2.engines import docker as docker_engine
from nvdocker2.store.atomic import TMP_MARK
from nvdocker2.store.backups import KEEP_BACKUPS, Backups
from nvdocker2.store.journal import Journal
from nvdocker2.errors import EnvironmentProblem

from .conftest import NVDOCKER2, fill, run_cli

RT = "/usr/bin/nvidia-container-runtime"
ORIGINAL = b'{\n    "debug": true\n}\n'
NONE = ["--reload", "none", "--no-verify", "--runtime-path", RT, "--allow-missing-runtime"]


def leftovers(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if TMP_MARK in n)


def test_no_space_beside_daemon_json_exits_3_file_unchanged(tmp_path, mounts):
    etc = mounts("tmpfs", tmp_path / "etc", size=64 * 1024)
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    fill(etc)
    r = run_cli("install", "--config", str(cfg), *NONE)
    assert r.returncode == 3, r.stderr
    assert "no space left on device" in r.stderr and r.stderr.startswith(f"error: {cfg}")
    assert cfg.read_bytes() == ORIGINAL and leftovers(etc) == []
    assert Backups(tmp_path / "state").all() == []


def test_state_dir_full_means_no_write_of_daemon_json(tmp_path, mounts):
    state = mounts("tmpfs", tmp_path / "state", size=64 * 1024)
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    big = json.dumps({"labels": [f"l{i}" for i in range(5000)]}, indent=4).encode()
    cfg.write_bytes(big)  # a backup of this does not fit any more
    (state / "lock").touch()
    fill(state)
    r = run_cli("install", "--config", str(cfg), *NONE)
    assert r.returncode == 3, r.stderr
    assert "no space left on device" in r.stderr
    assert cfg.read_bytes() == big and leftovers(etc) == []


def test_state_dir_read_only_means_no_write_of_daemon_json(tmp_path, mounts):
    src = tmp_path / "state-src"
    src.mkdir()
    mounts("ro-bind", tmp_path / "state", src=src)
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    r = run_cli("install", "--config", str(cfg), *NONE)
    assert r.returncode == 3, r.stderr
    assert "read-only file system" in r.stderr
    assert cfg.read_bytes() == ORIGINAL and leftovers(etc) == []


def test_read_only_config_directory_exits_3(tmp_path, mounts):
    src = tmp_path / "etc-src"
    src.mkdir()
    (src / "daemon.json").write_bytes(ORIGINAL)
    etc = mounts("ro-bind", tmp_path / "etc", src=src)
    r = run_cli("install", "--config", str(etc / "daemon.json"), *NONE)
    assert r.returncode == 3, r.stderr
    assert "read-only file system" in r.stderr and "hint: " in r.stderr
    assert (etc / "daemon.json").read_bytes() == ORIGINAL and leftovers(src) == []
    assert Backups(tmp_path / "state").all() == []


@pytest.mark.parametrize("target", ["file", "dir"])
def test_immutable_file_or_directory_exits_3(tmp_path, target):
    """Root ignores mode bits, so permission denied is made with chattr +i."""
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    victim = cfg if target == "file" else etc
    r = subprocess.run(["chattr", "+i", str(victim)], capture_output=True, text=True)
    if r.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chattr +i failed: {r.stderr}")
        pytest.skip(f"chattr +i not possible here: {r.stderr.strip()}")
    try:
        r = run_cli("install", "--config", str(cfg), *NONE)
        assert r.returncode == 3, r.stderr
        assert "permission denied" in r.stderr and "lsattr" in r.stderr
        assert cfg.read_bytes() == ORIGINAL
    finally:
        subprocess.run(["chattr", "-i", str(victim)], check=True)
    assert leftovers(etc) == []
    # The journal must not claim an install that did not happen, nor a backup stay of it.
    assert Journal(tmp_path / "state", cfg).load() == {}
    assert Backups(tmp_path / "state").all() == []


def _immutable(path):
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"chattr +i failed: {r.stderr}")
        pytest.skip(f"chattr +i not possible here: {r.stderr.strip()}")


def test_failed_runs_leave_no_backup_and_push_no_real_one_out(tmp_path):
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    backups = Backups(state)
    for n in range(KEEP_BACKUPS):  # the newest backups kept, each of a real change
        if n % 2:
            docker_engine.uninstall(cfg, state=state)
        else:
            docker_engine.install(cfg, runtime_path=RT, state=state)
    real = [b.id for b in backups.all()]
    assert len(real) == KEEP_BACKUPS
    _immutable(cfg)
    try:
        for _ in range(3):
            r = run_cli("install", "--config", str(cfg), *NONE)
            assert r.returncode == 3 and "permission denied" in r.stderr, r.stderr
            assert [b.id for b in backups.all()] == real
    finally:
        subprocess.run(["chattr", "-i", str(cfg)], check=True)
    assert run_cli("install", "--config", str(cfg), *NONE).returncode == 0
    assert [b.id for b in backups.all()][1:] == real[:-1]


def test_failing_rename_keeps_old_file_and_journal(tmp_path, monkeypatch):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst) == str(cfg):
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(EnvironmentProblem) as ei:
        docker_engine.install(cfg, runtime_path=RT, state=tmp_path / "state")
    assert ei.value.exit_code == 3 and "Input/output error" in ei.value.message
    assert cfg.read_bytes() == ORIGINAL and leftovers(etc) == []
    assert Journal(tmp_path / "state", cfg).load() == {}


def _paused_install(cfg, *extra):
    env = dict(os.environ, NVDOCKER2_TEST_PAUSE_BEFORE_RENAME="60")
    p = subprocess.Popen(
        [str(NVDOCKER2), "install", "--config", str(cfg), *NONE, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = p.stderr.readline()
    assert "test hook: pausing before rename" in line, line
    return p


def test_sigkill_between_temp_write_and_rename_leaves_old_file_then_next_run_cleans(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    p = _paused_install(cfg)
    stray = leftovers(etc)
    assert len(stray) == 1 and (etc / stray[0]).read_bytes().startswith(b'{\n    "debug": true,')
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert cfg.read_bytes() == ORIGINAL
    r = run_cli("install", "--config", str(cfg), *NONE)
    assert r.returncode == 0, r.stderr
    assert f"removed {etc / stray[0]}, left behind by an interrupted earlier run" in r.stdout
    assert leftovers(etc) == [] and os.listdir(etc) == ["daemon.json"]
    assert json.loads(cfg.read_bytes())["runtimes"]["nvidia"] == {"path": RT}


def test_sigterm_before_rename_cleans_up_and_keeps_the_old_file(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    p = _paused_install(cfg)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1, err
    assert "interrupted" in err and "Traceback" not in err
    assert cfg.read_bytes() == ORIGINAL and os.listdir(etc) == ["daemon.json"]
    assert Journal(tmp_path / "state", cfg).load() == {}


def test_interrupted_run_releases_the_lock(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    p = _paused_install(cfg)
    p.kill()
    p.wait(timeout=30)
    r = run_cli("install", "--config", str(cfg), "--timeout", "2", *NONE)
    assert r.returncode == 0, r.stderr


def test_python_module_entry_point_works(tmp_path):
    cfg = tmp_path / "daemon.json"
    r = subprocess.run(
        [sys.executable, "-m", "nvdocker2", "install", "--config", str(cfg), *NONE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
