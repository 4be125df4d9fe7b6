"""install / uninstall / rollback of daemon.json, each as one transaction (SPEC §2, §8).

The transaction itself is the one every engine runs (nvdocker2.engines.transaction); the
daemon.json plans are the Docker engine's (nvdocker2.engines.docker) and dockerd is its service
(nvdocker2.engines.docker.service). This module is the stable name the CLI, CDI mode and
callers import them by.
"""

from __future__ import annotations

from nvdocker2.engines.docker import DockerEngine, install, rollback, uninstall, wrap_shape
from nvdocker2.engines.docker.service import (
    Daemon,
    Expectation,
    NoDaemon,
    VerifyFailed,
    expectation,
    transitional,
)
from nvdocker2.engines.transaction import Reporter, Result, unified_diff

__all__ = [
    "Daemon", "DockerEngine", "Expectation", "NoDaemon",
    "Reporter", "Result", "VerifyFailed", "expectation", "install", "rollback", "transitional",
    "uninstall", "unified_diff", "wrap_shape",
]
