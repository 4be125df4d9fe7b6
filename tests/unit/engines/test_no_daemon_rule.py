"""One rule for every engine when its daemon is not running (README, "Exit codes"): a change to
be verified stops before anything is written (exit 3, one error line and one hint of ours);
--no-verify writes the files and says "verified: no"; a dry run shows the diff and lists what
it could not check (exit 0), and fails as the change would with --require-daemon.

containerd and CRI-O run here with nothing but their files: no systemctl on PATH (engine_env),
or a systemctl that fails the way it does on a host whose init is not systemd."""

from __future__ import annotations

import json
import os

import pytest
from ..cli_run import cli, engine_env

from nvdocker2.engines import commands

RT = "/usr/bin/nvidia-container-runtime"
V2 = b"version = 2\n# site settings\n"
ENGINES = {
    "containerd": ("config.toml", V2, "containerd", "containerd"),
    "crio": ("crio.conf.d/99-nvidia.conf", None, "CRI-O", "crio"),
}


def _setup(tmp_path, monkeypatch, engine):
    engine_env(tmp_path, monkeypatch)
    name, original, _, _ = ENGINES[engine]
    cfg = tmp_path / name
    cfg.parent.mkdir(exist_ok=True)
    if original is not None:
        cfg.write_bytes(original)
    return cfg, original


def _untouched(cfg, original, tmp_path):
    assert (cfg.read_bytes() if cfg.exists() else None) == original
    assert not (tmp_path / "state" / "backups").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_no_running_engine_stops_the_change_before_anything_is_written(engine, tmp_path,
                                                                      monkeypatch):
    cfg, original = _setup(tmp_path, monkeypatch, engine)
    _, _, who, unit = ENGINES[engine]
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime")
    assert code == 3 and out == ""
    assert err.splitlines() == [
        f"error: systemd does not run the {unit} unit here; the change could not be verified",
        f"hint: start {who} (systemctl start {unit}), or pass --no-verify to only write the file"]
    _untouched(cfg, original, tmp_path)

    # the dry run shows the diff and names what it could not check
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime",
                         "--dry-run", "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["changed"] and obj["dry_run"] and RT in obj["diff"]
    assert obj["unchecked"] == [f"whether {who} runs the change: systemd does not run the "
                                f"{unit} unit here"]
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime",
                         "--dry-run")
    assert code == 0 and f"\nunchecked: whether {who} runs the change: " in out
    code, _, err2 = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path",
                        RT, "--allow-missing-runtime", "--dry-run", "--require-daemon")
    assert code == 3 and err2.startswith(f"error: systemd does not run the {unit} unit here")
    _untouched(cfg, original, tmp_path)

    # --no-verify: written, exit 0, not verified
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime",
                         "--no-verify")
    assert code == 0, err
    assert "\nreload: none\nverified: no\n" in out
    assert f"note: reload mode none: systemd does not run the {unit} unit here" in out
    assert RT.encode() in cfg.read_bytes()


@pytest.mark.parametrize("engine", ENGINES)
def test_reload_systemd_without_systemd_is_refused_before_writing(engine, tmp_path, monkeypatch):
    cfg, original = _setup(tmp_path, monkeypatch, engine)
    monkeypatch.setattr(commands, "systemd_booted", lambda: False)
    _, _, who, unit = ENGINES[engine]
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime",
                         "--reload", "systemd")
    assert code == 3 and out == ""
    assert err.splitlines() == [
        f"error: systemd is not running on this host, so it cannot restart {unit}",
        f"hint: use --reload none to only write the file, then restart {who} yourself"]
    _untouched(cfg, original, tmp_path)


@pytest.mark.parametrize("engine", ENGINES)
def test_systemctls_own_errors_become_one_line_of_ours(engine, tmp_path, monkeypatch):
    """A systemctl that answers as it does where systemd is not PID 1."""
    cfg, original = _setup(tmp_path, monkeypatch, engine)
    monkeypatch.setattr(commands, "systemd_booted", lambda: True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(mode=0o755)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'System has not been booted with systemd as init "
                         "system (PID 1). Can'\"'\"'t operate.' >&2\necho 'Failed to connect "
                         "to bus: Host is down' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    _, _, who, unit = ENGINES[engine]
    code, out, err = cli("install", "--engine", engine, "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime",
                         "--reload", "systemd")
    assert code in (4, 5), err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert f"systemd is not running on this host, so it cannot restart {unit}" in lines[0]
    assert "booted" not in err and "bus" not in err and "\\n" not in err
    assert os.path.exists(tmp_path / "state" / "backups")


def test_docker_reload_systemd_where_systemd_is_not_running_says_so_in_our_words(tmp_path,
                                                                                 monkeypatch):
    """dockerd's `--reload systemd` through a systemctl that answers as it does where systemd is
    not PID 1: the file is put back and the error is ours, not systemctl's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(mode=0o755)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho 'Failed to connect to bus: Host is down' >&2\nexit 1\n")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(b"{}\n")
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", "--reload",
                         "systemd", "--no-verify")
    assert code == 3, err
    lines = err.splitlines()
    assert lines[0].startswith("error: systemd is not running on this host, so it cannot reload "
                               "docker; ")
    assert lines[1] == ("hint: use --reload signal (SIGHUP to the dockerd in --pidfile) or "
                        "--reload none")
    assert "bus" not in err and cfg.read_bytes() == b"{}\n"
