"""The SIGKILL and concurrent-writer guarantees for the containerd and CRI-O engines
(reference §2 "Atomic", "One writer at a time"; §11): the same properties as test_sigkill.py and
test_concurrency.py prove for daemon.json, run through `--engine`."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from nvdocker2.store.atomic import PAUSE_HOOK, TMP_MARK
from nvdocker2.engines.containerd.document import tomllib

RT = "/usr/bin/nvidia-container-runtime"
KILLS = int(os.environ.get("NVDOCKER2_SIGKILL_RUNS", "30"))
CONTAINERD = b"""version = 2\r
# an operator's file: CRLF, comments, tabs\r
[plugins."io.containerd.grpc.v1.cri"]\r
\tsandbox_image = "registry.k8s.io/pause:3.9"   # pinned\r
\t[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\r
\t\truntime_type = "io.containerd.runc.v2"\r
\t\t[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\r
\t\t\tSystemdCgroup = true\r
"""
ENGINES = {"containerd": ("config.toml", CONTAINERD), "crio": ("99-nvidia.conf", None)}


def _cli(engine: str, config: Path, action: str, name: str = "nvidia") -> list[str]:
    argv = [sys.executable, "-m", "nvdocker2", action, "--engine", engine, "--config",
            str(config), "--reload", "none", "--timeout", "120", "--runtime-name", name]
    if action == "install":
        argv += ["--runtime-path", RT, "--allow-missing-runtime", "--set-default"]
    return argv


def _run(engine, config, action, **env):
    return subprocess.run(_cli(engine, config, action), capture_output=True, text=True,
                          timeout=180, env={**os.environ, **env})


@pytest.fixture(params=sorted(ENGINES))
def setup(request, tmp_path, monkeypatch):
    engine = request.param
    name, original = ENGINES[engine]
    d = tmp_path / "etc"
    d.mkdir()
    cfg = d / name
    if original is not None:
        cfg.write_bytes(original)
        os.chmod(cfg, 0o640)
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    r = _run(engine, cfg, "install")
    assert r.returncode == 0, r.stderr
    installed = cfg.read_bytes()
    r = _run(engine, cfg, "uninstall")
    assert r.returncode == 0, r.stderr
    assert (cfg.read_bytes() if cfg.exists() else None) == original
    return engine, cfg, original, installed, tmp_path / "state"


def _state(cfg: Path) -> bytes | None:
    return cfg.read_bytes() if cfg.exists() else None


def test_sigkill_at_random_instants_leaves_old_or_new_file(setup):
    engine, cfg, original, installed, state = setup
    seed = int(os.environ.get("NVDOCKER2_SIGKILL_SEED", random.randrange(1 << 30)))
    print(f"NVDOCKER2_SIGKILL_SEED={seed}")
    rnd = random.Random(seed)
    t0 = time.monotonic()
    _run(engine, cfg, "install")
    typical = time.monotonic() - t0
    _run(engine, cfg, "uninstall")
    killed = 0
    while killed < KILLS:
        action = "install" if _state(cfg) == original else "uninstall"
        p = subprocess.Popen(_cli(engine, cfg, action), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=rnd.uniform(0.05, typical * 1.2))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            killed += 1
        assert _state(cfg) in (original, installed)
        if cfg.exists():
            assert cfg.stat().st_mode & 0o777 == (0o640 if original else 0o644)
    # One clean run of each converges, and leaves no temp file anywhere.
    assert _run(engine, cfg, "install").returncode == 0
    assert _state(cfg) == installed
    assert _run(engine, cfg, "uninstall").returncode == 0
    assert _state(cfg) == original
    assert [n for n in os.listdir(cfg.parent) if TMP_MARK in n] == []
    for sub in ("backups", "journal"):
        if (state / sub).is_dir():
            assert [n for n in os.listdir(state / sub) if TMP_MARK in n] == []


@pytest.mark.parametrize("point", range(4))
def test_sigkill_before_each_rename_then_a_clean_run_converges(setup, point):
    """Killed while paused before its n-th rename (backup, its metadata, journal, the file),
    the install leaves the old file; the next install and uninstall land exactly."""
    engine, cfg, original, installed, _ = setup
    p = subprocess.Popen(_cli(engine, cfg, "install"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, PAUSE_HOOK: "0.25"})
    seen = 0
    deadline = time.monotonic() + 60
    while seen <= point and time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:  # it ended before that rename: an engine that makes fewer renames
            break
        if "pausing before rename" in line:
            if seen == point:
                break
            seen += 1
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert _state(cfg) in (original, installed)
    assert _run(engine, cfg, "install").returncode == 0
    assert _state(cfg) == installed
    assert _run(engine, cfg, "uninstall").returncode == 0
    assert _state(cfg) == original


def test_parallel_installs_all_land(tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(CONTAINERD)
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "nvdocker2", "install", "--engine", "containerd", "--config",
         str(cfg), "--reload", "none", "--timeout", "180", "--runtime-name", f"rt{i}",
         "--runtime-path", f"/opt/rt{i}/runtime",
         "--allow-missing-runtime"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True) for i in range(8)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    data = tomllib.loads(cfg.read_text())
    rts = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    for i in range(8):
        assert rts[f"rt{i}"]["options"] == {"SystemdCgroup": True,
                                            "BinaryName": f"/opt/rt{i}/runtime"}
    assert cfg.read_bytes().startswith(CONTAINERD)
    assert sorted(os.listdir(tmp_path)) == ["config.toml", "state"]


def test_writer_holding_the_lock_makes_others_exit_3_untouched(tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(CONTAINERD)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(state))
    holder = FileLock(str(state / "lock"))
    holder.acquire()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "nvdocker2", "install", "--engine", "containerd",
             "--config", str(cfg), "--reload", "none", "--timeout", "1"],
            capture_output=True, text=True, timeout=60)
    finally:
        holder.release()
    assert p.returncode == 3 and p.stderr.startswith("error: ") and "hint: " in p.stderr
    assert cfg.read_bytes() == CONTAINERD
