"""The Docker engine (reference §2, §8, §9): daemon.json edits planned for the engine transaction.

`engine.py` is the engine (`DockerEngine`: daemon.json plans) and the install, uninstall and
rollback transactions `front.py` runs for the CLI; the document format is `daemonjson/`,
dockerd as the service `service/`, CDI mode `cdi.py` and `cdi_refresh.py`.
"""

from nvdocker2.engines.docker.engine import (
    DockerEngine,
    Result,
    expectation,
    install,
    rollback,
    run,
    transitional,
    uninstall,
    wrap_shape,
)

__all__ = ["DockerEngine", "Result", "expectation", "install", "rollback", "run",
           "transitional", "uninstall", "wrap_shape"]
