"""Docker's doctor: daemon.json (`checks_config`), the running dockerd (`checks_dockerd`), the
smoke test (`checks_smoke`) and CDI mode (`checks_cdi`) beside the host's checks from
nvdocker2.doctor, all reading one `DockerContext` (`facts`).

`run_doctor` is what `DockerFront.doctor` calls; `diagnose` returns the results for other
callers.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any, TextIO

from nvdocker2.doctor import CheckPlan, report
from nvdocker2.doctor.model import Check, CheckResult, run_checks
from nvdocker2.engines.docker.doctor.facts import DockerContext, EngineUnreachable

__all__ = ["DockerContext", "all_checks", "diagnose", "engine_info", "run_doctor"]


def all_checks(smoke: bool = False) -> list[Check]:
    """Every Docker check in report order (the smoke checks only when asked for)."""
    from nvdocker2.doctor import checks_cdi_nodes, checks_driver, checks_nvidia_config
    from nvdocker2.doctor import checks_toolkit
    from nvdocker2.engines.docker.doctor import checks_cdi, checks_config, checks_dockerd
    from nvdocker2.engines.docker.doctor import checks_smoke

    every = [*checks_config.CHECKS, *checks_dockerd.CHECKS, *checks_driver.CHECKS,
             *checks_smoke.CHECKS, *checks_toolkit.CHECKS, *checks_nvidia_config.CHECKS,
             *checks_cdi_nodes.CHECKS,  # every reader's specs
             *checks_cdi.CHECKS]  # CDI mode comes last
    return [c for c in every if smoke or not c.smoke]


def engine_info(host: str, timeout: float) -> dict[str, Any]:
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


def plan(
    config: str | None = None,
    docker_host: str | None = None,
    smoke: bool = False,
    ctx: DockerContext | None = None,
) -> CheckPlan:
    """Docker's checks against this host (or `ctx`)."""
    ctx = ctx or DockerContext(
        config_override=PurePosixPath(os.path.abspath(config)) if config else None,
        docker_host_override=docker_host,
        engine_info=engine_info,
        smoke=smoke,
        smoke_image=os.environ.get("NVDOCKER2_SMOKE_IMAGE") or "ubuntu",
    )
    return CheckPlan(ctx, all_checks(ctx.smoke))


def diagnose(
    config: str | None = None,
    docker_host: str | None = None,
    smoke: bool = False,
    ctx: DockerContext | None = None,
) -> list[CheckResult]:
    """Run every check against this host (or `ctx`) and return the results in report order."""
    p = plan(config, docker_host, smoke, ctx)
    return run_checks(p.facts, p.checks)


def run_doctor(
    config: str | None = None,
    docker_host: str | None = None,
    as_json: bool = False,
    smoke: bool = False,
    stream: TextIO | None = None,
    ctx: DockerContext | None = None,
    verbose: bool = False,
) -> int:
    """Diagnose, render to `stream` (stdout), and return the exit code: 0 when nothing
    failed, 1 otherwise. `verbose`: every check on its own line, with what it found."""
    return report(plan(config, docker_host, smoke, ctx), stream, as_json, verbose)
