"""`nvdocker2 doctor`: diagnose a GPU container host and say how to fix each problem (SPEC §5).

`run_doctor` is what the CLI calls; `diagnose` returns the results for other callers.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from pathlib import PurePosixPath
from typing import TextIO

from nvdocker2.doctor.context import Context, EngineUnreachable
from nvdocker2.doctor.registry import FAIL, CheckResult, run_checks
from nvdocker2.doctor.render import render

__all__ = ["CheckResult", "Context", "diagnose", "engine_info", "run_doctor"]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def engine_info(host: str, timeout: float) -> dict:
    """`GET /info` from the Engine API at `host` (unix:// or tcp://), as a dict."""
    try:
        if host.startswith("unix://"):
            conn: http.client.HTTPConnection = _UnixHTTPConnection(host[len("unix://"):], timeout)
        elif host.startswith(("tcp://", "http://")):
            conn = http.client.HTTPConnection(host.split("://", 1)[1].rstrip("/"),
                                              timeout=timeout)
        else:
            raise EngineUnreachable(f"unsupported address {host}")
        conn.request("GET", "/info")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
    except (OSError, http.client.HTTPException) as exc:
        raise EngineUnreachable(getattr(exc, "strerror", None) or str(exc)) from None
    if resp.status != 200:
        raise EngineUnreachable(f"GET /info answered HTTP {resp.status}")
    try:
        return json.loads(body)
    except ValueError:
        raise EngineUnreachable("GET /info did not answer JSON") from None


def diagnose(config: str | None = None, docker_host: str | None = None,
             smoke: bool = False, ctx: Context | None = None) -> list[CheckResult]:
    """Run every check against this host (or `ctx`) and return the results in report order."""
    ctx = ctx or Context(
        config_override=PurePosixPath(os.path.abspath(config)) if config else None,
        docker_host_override=docker_host,
        engine_info=engine_info,
        smoke=smoke,
        smoke_image=os.environ.get("NVDOCKER2_SMOKE_IMAGE") or "ubuntu",
    )
    return run_checks(ctx)


def run_doctor(config: str | None = None, docker_host: str | None = None,
               as_json: bool = False, smoke: bool = False,
               stream: TextIO | None = None, ctx: Context | None = None) -> int:
    """Diagnose, render to `stream` (stdout), and return the exit code: 0 when nothing
    failed, 1 otherwise."""
    results = diagnose(config, docker_host, smoke, ctx)
    render(results, stream or sys.stdout, as_json)
    return 1 if any(r.status == FAIL for r in results) else 0
