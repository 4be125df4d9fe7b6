"""`nvdocker2 doctor`: diagnose a GPU container host and say how to fix each problem (reference §5).

`run_doctor` is what the CLI calls; `diagnose` returns the results for other callers.
"""

from __future__ import annotations

import os
import sys
from pathlib import PurePosixPath
from typing import TextIO

from nvdocker2.doctor.context import Context, EngineUnreachable
from nvdocker2.doctor.registry import FAIL, CheckResult, run_checks
from nvdocker2.doctor.render import render

__all__ = ["CheckResult", "Context", "diagnose", "engine_info", "run_doctor", "run_engine_checks"]


def engine_info(host: str, timeout: float) -> dict:
    """`GET /info` from the Engine API at `host`, through the installer's client."""
    from nvdocker2.engines.docker.service.api import (
        EngineClient,
        EngineError,
        EngineUnavailable,
        parse_docker_host,
    )
    from nvdocker2.errors import NvDockerError

    try:
        return EngineClient(parse_docker_host(host), timeout).info(timeout)
    except (EngineUnavailable, EngineError) as exc:
        raise EngineUnreachable(str(exc)) from None
    except NvDockerError as exc:  # an address the client does not speak (ssh://, TLS)
        raise EngineUnreachable(exc.message, exc.hint) from None


def diagnose(
    config: str | None = None,
    docker_host: str | None = None,
    smoke: bool = False,
    ctx: Context | None = None,
) -> list[CheckResult]:
    """Run every check against this host (or `ctx`) and return the results in report order."""
    ctx = ctx or Context(
        config_override=PurePosixPath(os.path.abspath(config)) if config else None,
        docker_host_override=docker_host,
        engine_info=engine_info,
        smoke=smoke,
        smoke_image=os.environ.get("NVDOCKER2_SMOKE_IMAGE") or "ubuntu",
    )
    return run_checks(ctx)


def run_doctor(
    config: str | None = None,
    docker_host: str | None = None,
    as_json: bool = False,
    smoke: bool = False,
    stream: TextIO | None = None,
    ctx: Context | None = None,
    verbose: bool = False,
) -> int:
    """Diagnose, render to `stream` (stdout), and return the exit code: 0 when nothing
    failed, 1 otherwise. `verbose`: every check on its own line, with what it found."""
    results = diagnose(config, docker_host, smoke, ctx)
    render(results, stream or sys.stdout, as_json, verbose)
    return 1 if any(r.status == FAIL for r in results) else 0


def run_engine_checks(checks: list, as_json: bool, verbose: bool = False) -> int:
    """Run an engine's checks and render them as Docker's doctor does; exit 1 on a failure."""
    results = []
    for cid, title, fn in checks:
        o = fn()
        results.append(CheckResult(cid, title, o.status, o.detail, o.hint))
    render(results, sys.stdout, as_json, verbose)
    return 1 if any(r.status == FAIL for r in results) else 0
