"""Where daemon.json lives for the Docker on this host (docs/reference.md §2), and why.

Rootful: /etc/docker/daemon.json. Rootless (not root and `$XDG_RUNTIME_DIR/docker.sock`
exists): `$XDG_CONFIG_HOME/docker/daemon.json`. The snap package:
/var/snap/docker/current/config/daemon.json. The reason is printed so an operator can tell
why a path was picked and override it with --config.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from nvdocker2.host import run

ROOTFUL_CONFIG = "/etc/docker/daemon.json"
# Where a dockerd lives when PATH (root's, under sudo) does not name it.
DOCKERD_PLACES = ("/usr/bin/dockerd", "/usr/sbin/dockerd", "/usr/local/bin/dockerd")
SNAP_CONFIG = "/var/snap/docker/current/config/daemon.json"
RUNTIME_EXE = "nvidia-container-runtime"


def _root(root: str, path: str) -> Path:
    return Path(root + path) if root != "/" else Path(path)


def rootless_socket(env: Mapping[str, str] | None = None, euid: int | None = None) -> Path | None:
    """`$XDG_RUNTIME_DIR/docker.sock` when we are not root and it exists, else None."""
    env = os.environ if env is None else env
    euid = os.geteuid() if euid is None else euid
    xdg = env.get("XDG_RUNTIME_DIR")
    if euid == 0 or not xdg:
        return None
    sock = Path(xdg) / "docker.sock"
    return sock if sock.exists() else None


def default_config(
    env: Mapping[str, str] | None = None, euid: int | None = None, root: str = "/"
) -> tuple[Path, str]:
    """(daemon.json path, why it was chosen). `env`, `euid`, `root` are for tests."""
    env = os.environ if env is None else env
    euid = os.geteuid() if euid is None else euid
    sock = rootless_socket(env, euid)
    if sock is not None:
        base = env.get("XDG_CONFIG_HOME") or os.path.join(
            env.get("HOME") or os.path.expanduser("~"), ".config"
        )
        return (
            Path(base) / "docker" / "daemon.json",
            f"rootless Docker: you are not root and {sock} exists",
        )
    snap_dir = _root(root, "/var/snap/docker/current/config")
    native = any(
        _root(root, p).exists()
        for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd", "/usr/local/bin/dockerd")
    )
    if snap_dir.is_dir() and not native:
        return (
            Path(SNAP_CONFIG),
            "Docker from the snap package: /var/snap/docker/current exists and there is "
            "no /usr/bin/dockerd",
        )
    if snap_dir.is_dir():
        return (
            Path(ROOTFUL_CONFIG),
            "rootful Docker (the default); the snap package is also installed: pass "
            f"--config {SNAP_CONFIG} to configure that one",
        )
    return Path(ROOTFUL_CONFIG), "rootful Docker (the default location)"


def reload_hint(config: Path, env: Mapping[str, str] | None = None) -> str:
    """The command an operator runs to make dockerd read `config`."""
    s = str(config)
    if s == SNAP_CONFIG:
        return "sudo snap restart docker"
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
    if s.startswith(str(Path(xdg))) or "/.config/docker/" in s:
        return "systemctl --user reload docker"
    if s == ROOTFUL_CONFIG:
        return "sudo systemctl reload docker (or: sudo kill -HUP $(cat /var/run/docker.pid))"
    return "send SIGHUP to the dockerd that reads this file (kill -HUP PID)"


def resolve_config(config: os.PathLike[str] | str | None) -> tuple[Path, str]:
    """(daemon.json path, why): --config made absolute, else default_config()."""
    if config is not None:
        return Path(os.path.abspath(os.path.expanduser(str(config)))), "given with --config"
    return default_config()


def default_runtime_path() -> tuple[str, bool]:
    """(absolute path of the nvidia-container-runtime beside this nvdocker2, whether it exists).

    dockerd's PATH may not hold it, so the entry gets an absolute path: the console script's
    own directory first, then the interpreter's, then PATH, then /usr/bin; in each only a
    file that no user other than root (or us) could have placed.
    """
    dirs = []
    if sys.argv and sys.argv[0] and os.path.basename(sys.argv[0]) not in ("-c", "-m"):
        dirs.append(os.path.dirname(os.path.abspath(sys.argv[0])))
    dirs.append(os.path.dirname(os.path.abspath(sys.executable)))
    # Only one no other user could have placed (nvdocker2.host.run): this path is written
    # into engine configs and run as root by the engine.
    found = run.first_safe([os.path.join(d, RUNTIME_EXE) for d in dirs])
    found = found or run.safe_which(RUNTIME_EXE)
    if found:
        return os.path.abspath(found), True
    return "/usr/bin/" + RUNTIME_EXE, False


def same_file(a: str, b: str) -> bool:
    """True when two runtime paths name the same executable (symlinks resolved)."""
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False
