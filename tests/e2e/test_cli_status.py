"""`nvdocker2 status` against a real private dockerd: it says whether the running dockerd
matches daemon.json, before and after a reload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
RT = "/usr/bin/nvidia-container-runtime"


def nv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, timeout=120)


def test_status_reports_what_dockerd_runs_and_whether_it_matches_the_file(dockerd):
    cfg = str(dockerd.config_file)
    r = nv("install", "--config", cfg, "--runtime-path", RT, "--allow-missing-runtime", "--reload",
           "none", "--no-verify")
    assert r.returncode == 0, r.stderr
    r = nv("status", "--config", cfg, "--docker-host", dockerd.host, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["dockerd"]
    assert d["reachable"] is True and d["agrees_with_file"] is False and d["differs"] == ["nvidia"]
    r = nv("status", "--config", cfg, "--docker-host", dockerd.host)
    assert "differs from the file for nvidia" in r.stdout
    dockerd.sighup()
    dockerd.wait_info(lambda info: "nvidia" in info.get("Runtimes", {}))
    r = nv("status", "--config", cfg, "--docker-host", dockerd.host, "--json")
    d = json.loads(r.stdout)["dockerd"]
    assert d["agrees_with_file"] is True and d["runtimes"]["nvidia"] == RT
    assert d["version"] == dockerd.info()["ServerVersion"]


def test_status_takes_install_s_pidfile_and_names_that_dockerd_in_its_hint(dockerd):
    """`status --pidfile` means what install's does: the drift hint signals the dockerd the
    pid file names (this one runs under no systemd unit), not the host's Docker."""
    cfg = str(dockerd.config_file)
    r = nv("install", "--config", cfg, "--runtime-path", RT, "--allow-missing-runtime", "--reload",
           "none", "--no-verify")
    assert r.returncode == 0, r.stderr
    r = nv("status", "--config", cfg, "--docker-host", dockerd.host, "--pidfile",
           str(dockerd.pidfile))
    assert r.returncode == 0, r.stderr
    assert f"(apply the file: sudo kill -HUP {dockerd.pid})" in r.stdout
    r = nv("status", "--config", cfg, "--docker-host", dockerd.host, "--pidfile",
           str(dockerd.pidfile), "--json")
    assert json.loads(r.stdout)["dockerd"]["pid"] == dockerd.pid


def test_status_says_restart_where_a_reload_keeps_what_the_file_no_longer_sets(dockerd):
    """dockerd 20.10 keeps its runtimes and default on SIGHUP when the file has no "runtimes"
    and no "default-runtime" key: after an uninstall nothing but a restart clears them, and
    status says so (a SIGHUP, tried here, leaves the drift)."""
    cfg = str(dockerd.config_file)
    common = ("--config", cfg, "--docker-host", dockerd.host, "--pidfile", str(dockerd.pidfile))
    r = nv("install", *common, "--runtime-path", RT, "--allow-missing-runtime", "--set-default",
           "--reload", "signal")
    assert r.returncode == 0, r.stderr
    r = nv("uninstall", *common, "--reload", "none")
    assert r.returncode == 0, r.stderr
    assert "runtimes" not in json.loads(dockerd.config_file.read_text() or "{}")
    dockerd.sighup()
    r = nv("status", *common, "--json")
    d = json.loads(r.stdout)["dockerd"]
    assert d["default_runtime"] == "nvidia" and "nvidia" in d["runtimes"]
    assert d["differs"] == ["default-runtime", "nvidia"] and d["restart_needed"] is True
    assert d["kept_on_reload"] == ["nvidia", "default-runtime"]
    out = nv("status", *common).stdout
    assert "restart needed: restart dockerd the way it was started" in out
    assert f"pid {dockerd.pid}" in out and "HUP" not in out
