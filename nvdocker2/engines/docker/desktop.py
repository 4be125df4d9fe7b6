"""Docker Desktop: a daemon whose daemon.json nvdocker2 must not edit.

Docker Desktop runs dockerd in its own VM (on Windows, its WSL2 backend's `docker-desktop`
distribution) and keeps that daemon's daemon.json in its settings; the file `install` would
edit on this machine is never read by it. Its WSL2 backend already gives containers GPUs with
`docker run --gpus all`, without nvdocker2. Desktop is recognised from what the Engine API
says (`/info`: OperatingSystem "Docker Desktop") or from Desktop's own socket path
(~/.docker/desktop/docker.sock, the `desktop-linux` context's), never by running a program.
`install` asks here first, before anything is locked, read or written.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from nvdocker2.errors import BadInput

DESKTOP_OS = "Docker Desktop"
DESKTOP_SOCKET_PART = "/.docker/desktop/"
WHAT_WORKS = (
    "Docker Desktop's WSL2 backend gives containers GPUs without nvdocker2: "
    "docker run --gpus all IMAGE; its daemon.json is edited in Docker Desktop's settings "
    "(Settings > Docker Engine), not on this machine"
)
# /info answers within milliseconds; a daemon that does not is not Desktop's concern here.
INFO_TIMEOUT = 3.0


def engine_host(docker_host: Optional[str]) -> Any:
    """The DockerHost `install` and `status` talk to: --docker-host, else DOCKER_HOST, else a
    rootless Docker's socket for its user, else the rootful default."""
    from nvdocker2 import locations
    from nvdocker2.engines.docker.service.api import parse_docker_host

    if docker_host is None and not os.environ.get("DOCKER_HOST"):
        sock = locations.rootless_socket()
        docker_host = f"unix://{sock}" if sock is not None else None
    return parse_docker_host(docker_host)


def desktop_reason(info: Optional[dict[str, Any]], socket_path: Optional[str]) -> Optional[str]:
    """Why the daemon is Docker Desktop's (a phrase), or None when nothing says it is."""
    if isinstance(info, dict) and info.get("OperatingSystem") == DESKTOP_OS:
        return f'its Engine API reports OperatingSystem "{DESKTOP_OS}"'
    if socket_path and DESKTOP_SOCKET_PART in socket_path:
        return f"{socket_path} is Docker Desktop's socket"
    return None


def detect(docker_host: Optional[str], ask: bool = True) -> tuple[Any, Optional[str]]:
    """(the host, why it is Docker Desktop or None); a daemon that does not answer, or is not
    asked (`ask` False), is not taken for Desktop unless its socket path says so."""
    host = engine_host(docker_host)
    info = None
    if ask:
        from nvdocker2.engines.docker.service.api import (
            EngineClient,
            EngineError,
            EngineUnavailable,
        )

        try:
            info = EngineClient(host, timeout=INFO_TIMEOUT).info()
        except (EngineUnavailable, EngineError):
            pass
    return host, desktop_reason(info, host.socket_path)


def refuse_on_desktop(docker_host: Optional[str], config: str, ask: bool = True) -> None:
    """Raise `BadInput` (exit 2) when the daemon is Docker Desktop's: nothing is written.
    `ask`: whether the Engine API may be asked (`--reload none` asks dockerd nothing)."""
    host, why = detect(docker_host, ask)
    if why is not None:
        raise BadInput(
            f"{host.describe()} is Docker Desktop's daemon ({why}); it never reads {config},"
            " so nvdocker2 does not install there",
            WHAT_WORKS,
        )
