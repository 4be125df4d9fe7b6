"""dockerd as the installer sees it: reload or restart it, and verify through the Engine API.

`make_daemon(DaemonOptions(...), reporter)` is the one entry point the CLI needs; the
transaction calls `check_candidate`, `reload` and `verify` on what it returns.
"""

from __future__ import annotations

from nvdocker2.dockerd.api import (
    DockerHost,
    EngineClient,
    EngineError,
    EngineUnavailable,
    parse_docker_host,
)
from nvdocker2.dockerd.daemon import DaemonOptions, Dockerd, NoReload, make_daemon, mismatches
from nvdocker2.dockerd.progress import (
    PlainReporter,
    RecordingReporter,
    Reporter,
    SilentReporter,
    reporter_for,
)

__all__ = [
    "DaemonOptions",
    "DockerHost",
    "Dockerd",
    "EngineClient",
    "EngineError",
    "EngineUnavailable",
    "NoReload",
    "PlainReporter",
    "RecordingReporter",
    "Reporter",
    "SilentReporter",
    "make_daemon",
    "mismatches",
    "parse_docker_host",
    "reporter_for",
]
