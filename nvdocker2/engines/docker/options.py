"""Docker's own command-line options (what `--engine docker`, the default, adds to the
commands). Read on every start of `nvdocker2`: standard library and `engines.front` only."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List

from nvdocker2.engines.front import CliOption

CHANGING = ("install", "uninstall", "rollback")


class RuntimeMode(str, Enum):
    legacy = "legacy"
    direct = "direct"
    cdi = "cdi"


def _docker_host(commands: tuple[str, ...], what: str) -> CliOption:
    return CliOption("docker_host", ("--docker-host",), commands,
                     f"Engine API {what} [default: $DOCKER_HOST, else "
                     "unix:///var/run/docker.sock].", rank=100, metavar="URL")


OPTIONS = [
    CliOption("runtime_arg", ("--runtime-arg",), ("install",),
              "Add to the entry's runtimeArgs (repeatable).", rank=40, kind=List[str],
              metavar="ARG"),
    CliOption("restart", ("--restart",), CHANGING,
              "Restart dockerd instead of reloading it (containers without live-restore "
              "stop); needs --reload systemd, sysv, or auto on systemd.", rank=80, kind=bool,
              default=False, show_default=True),
    _docker_host(CHANGING, "to verify the change through"),
    _docker_host(("status",), "to ask what the running dockerd uses"),
    CliOption("docker_host", ("--docker-host",), ("doctor",),
              "Engine API of the dockerd to check [default: $DOCKER_HOST, else the current "
              "docker context, else the socket of this host's Docker].", rank=100,
              metavar="URL"),
    CliOption("pidfile", ("--pidfile",), CHANGING,
              "dockerd's pid file, checked to be a dockerd before it is signalled "
              "[default: /var/run/docker.pid; rootless $XDG_RUNTIME_DIR/docker.pid; "
              "snap /run/snap.docker/docker.pid].", rank=110, kind=Path, metavar="PATH"),
    CliOption("pidfile", ("--pidfile",), ("status",),
              "dockerd's pid file, as install takes it: the dockerd whose reload or restart "
              "status suggests when it differs from the file [default: as install].",
              rank=110, kind=Path, metavar="PATH"),
    CliOption("dockerd_log", ("--dockerd-log",), CHANGING,
              "dockerd's log file: its error lines are quoted when dockerd rejects a change.",
              rank=130, kind=Path, metavar="PATH"),
    CliOption("mode", ("--mode",), ("install",),
              "direct|legacy: also set [nvidia-container-runtime] mode in the runtime's "
              "config.toml ($NVIDIA_CONTAINER_RUNTIME_CONFIG, else "
              "/etc/nvidia-container-runtime/config.toml): direct = the runtime gives GPUs "
              "itself, without libnvidia-container. cdi: no runtime entry; write the CDI spec "
              "of this host's GPUs and turn CDI on in daemon.json where this Docker (>= 25) "
              "needs it.", rank=140, kind=RuntimeMode, metavar="direct|legacy|cdi",
              show_default=True),
    CliOption("mode", ("--mode",), ("uninstall",),
              "cdi: undo install --mode cdi (remove the spec it wrote, put features back).",
              rank=140, kind=RuntimeMode, metavar="cdi", show_default=True),
    CliOption("cdi_spec_dir", ("--cdi-spec-dir",), ("install", "uninstall"),
              "With --mode cdi: where the spec nvidia.yaml goes [default: /etc/cdi].",
              rank=150, metavar="DIR"),
    CliOption("smoke", ("--smoke",), ("doctor",),
              "Also start a tiny GPU container (image: $NVDOCKER2_SMOKE_IMAGE, default ubuntu; "
              "never pulled).", rank=165, kind=bool, default=False, show_default=True),
]
