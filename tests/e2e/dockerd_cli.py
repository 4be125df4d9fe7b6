"""Running the nvdocker2 CLI against a private dockerd, for the end-to-end tests of reloading
and verifying (test_install_e2e.py, test_reload_cli.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUNTIME = "/usr/bin/nvidia-container-runtime"
INSTALL = ("install", "--runtime-path", RUNTIME, "--allow-missing-runtime")


def nvdocker2(daemon, *args: str, env: dict | None = None, daemon_flags: bool = True):
    """Run the CLI against `daemon` (its config file, socket and pidfile)."""
    argv = [sys.executable, "-m", "nvdocker2", *args]
    if daemon is not None:
        argv += ["--config", str(daemon.config_file)]
        if daemon_flags:
            argv += ["--docker-host", daemon.host, "--pidfile", str(daemon.pidfile)]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, **(env or {})),
    )


def reloads(daemon) -> int:
    """How many SIGHUPs dockerd has acted on (its log says so each time)."""
    return daemon.log_file.read_text(errors="replace").count("Got signal to reload configuration")


def sleeper(daemon) -> str:
    return daemon.docker(
        "run", "-d", "--network=none", daemon.image, "sleep", "1000"
    ).stdout.strip()


def state(daemon, cid: str) -> str:
    return daemon.docker(
        "inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}", cid
    ).stdout.strip()


def make_stand_ins(tmp_path: Path) -> Path:
    """A bin dir with the systemctl/service/journalctl stand-ins (tests/fixtures/systemctl)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("systemctl", "service", "journalctl"):
        (bindir / name).symlink_to(FIXTURES / "systemctl")
    return bindir


def systemd_env(stand_ins: Path, daemon, **extra: str) -> dict:
    return {
        "PATH": f"{stand_ins}:{os.environ['PATH']}",
        "NVD2_DOCKERD_ROOT": str(daemon.root),
        **extra,
    }


def tcp_host() -> tuple[str, str]:
    """A free local tcp address: (dockerd flag, --docker-host value). Through tcp nvdocker2
    cannot see which process serves the API (no SO_PEERCRED), so dockerd's flags stay unknown."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"--host=tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port}"
