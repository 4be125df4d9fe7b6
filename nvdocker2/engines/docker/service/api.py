"""A small Engine API client: just enough to ask dockerd what it runs.

Standard library only (http.client over a unix socket): the installer needs three GET
endpoints, runs from package scripts on hosts where the docker SDK is not installed (Debian 12
packages no python3-docker that we depend on), and should not pay the SDK's import time on
every `install`. http.client itself (with ssl and email) and socket are imported at the first
request, so `install --reload none` does not load them.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, cast
from urllib.parse import urlsplit

from nvdocker2.errors import BadInput

if TYPE_CHECKING:
    import http.client

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


class EngineUnavailable(Exception):
    """dockerd did not answer: socket missing, connection refused, timeout, broken reply."""


class EngineError(Exception):
    """dockerd answered with an HTTP error status."""


@dataclass(frozen=True)
class DockerHost:
    """Where dockerd's API listens: a unix socket path, or a plain tcp host and port."""

    url: str
    socket_path: str | None = None
    tcp_host: str | None = None
    tcp_port: int | None = None

    def describe(self) -> str:
        return self.socket_path if self.socket_path is not None else self.url


def parse_docker_host(value: str | None, environ: Mapping[str, str] | None = None) -> DockerHost:
    """`--docker-host`, else `DOCKER_HOST`, else the rootful default socket.

    Only `unix://` and plain `tcp://` are spoken; TLS, `ssh://` and `fd://` are refused with a
    hint rather than half-supported.
    """
    env = os.environ if environ is None else environ
    url = value or env.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "unix":
        path = url[len("unix://") :]
        if not path.startswith("/"):
            raise BadInput(
                f"docker host {url!r}: the socket path must be absolute",
                "write it as unix:///var/run/docker.sock",
            )
        return DockerHost(url=url, socket_path=path)
    if scheme == "tcp":
        if env.get("DOCKER_TLS_VERIFY") or parts.port == 2376:
            raise BadInput(
                f"docker host {url!r}: TLS connections to dockerd are not supported",
                "point --docker-host at dockerd's unix socket, e.g. unix:///var/run/docker.sock",
            )
        if not parts.hostname or parts.path not in ("", "/"):
            raise BadInput(
                f"docker host {url!r} is not of the form tcp://HOST:PORT",
                "write it as tcp://127.0.0.1:2375, or use the unix socket",
            )
        return DockerHost(url=url, tcp_host=parts.hostname, tcp_port=parts.port or 2375)
    raise BadInput(
        f"docker host {url!r}: only unix:// and tcp:// addresses are supported",
        "point --docker-host at dockerd's unix socket, e.g. unix:///var/run/docker.sock",
    )


@functools.lru_cache(maxsize=1)
def _unix_connection_class() -> Callable[[str, float], http.client.HTTPConnection]:
    import http.client
    import socket

    class UnixHTTPConnection(http.client.HTTPConnection):
        def __init__(self, path: str, timeout: float) -> None:
            super().__init__("localhost", timeout=timeout)
            self._path = path

        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self._path)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    return UnixHTTPConnection


class EngineClient:
    """GET requests against dockerd; one short-lived connection per request.

    Every failure to get an answer is an `EngineUnavailable`, so callers that poll (verify)
    can tell "not up yet" from "answered wrongly" without catching socket errors themselves.
    """

    def __init__(self, host: DockerHost, timeout: float = 5.0) -> None:
        self.host = host
        self.timeout = timeout

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.host.socket_path is not None:
            return _unix_connection_class()(self.host.socket_path, timeout)
        import http.client

        # a host without a socket path is tcp://HOST:PORT (parse_docker_host)
        return http.client.HTTPConnection(cast(str, self.host.tcp_host), self.host.tcp_port,
                                          timeout=timeout)

    def get(self, path: str, timeout: float | None = None) -> bytes:
        import http.client
        import socket

        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        except FileNotFoundError as exc:
            raise EngineUnavailable(f"{self.host.describe()} does not exist") from exc
        except ConnectionRefusedError as exc:
            raise EngineUnavailable(f"connection refused on {self.host.describe()}") from exc
        except PermissionError as exc:
            raise EngineUnavailable(f"permission denied on {self.host.describe()}") from exc
        except socket.timeout as exc:
            raise EngineUnavailable(f"no answer on {self.host.describe()} in time") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise EngineUnavailable(f"{self.host.describe()}: {exc}") from exc
        finally:
            conn.close()
        if resp.status >= 400:
            raise EngineError(
                f"GET {path}: HTTP {resp.status}: {body[:200].decode(errors='replace')}"
            )
        return body

    def _json(self, path: str, timeout: float | None) -> Any:
        body = self.get(path, timeout)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise EngineUnavailable(f"GET {path}: the answer is not JSON") from exc

    def ping(self, timeout: float | None = None) -> bool:
        """True when dockerd answers `GET /_ping` with OK."""
        return self.get("/_ping", timeout).strip() == b"OK"

    def info(self, timeout: float | None = None) -> dict[str, Any]:
        """`GET /info`: Runtimes, DefaultRuntime, LiveRestoreEnabled, ServerVersion, ..."""
        data = self._json("/info", timeout)
        if not isinstance(data, dict):
            raise EngineUnavailable("GET /info: the answer is not a JSON object")
        return data

    def running_containers(self, timeout: float | None = None) -> list[Any]:
        """`GET /containers/json`: the running containers (id, names, image, state)."""
        data = self._json("/containers/json", timeout)
        return data if isinstance(data, list) else []
