"""The exact nvidia-container-cli command line and environment for a Request (reference §4 rule 6).

Pure functions: the hook execs what they return. Every element that carries a value is written
as `--flag=VALUE`, so no value (a device id, a requirement, a configured path) can ever become
an option of its own; the only bare element is the rootfs, which is absolute.
"""

from __future__ import annotations

import os

from nvdocker2.hook.request import Request, device_arg
from nvdocker2.toolkit_config import ToolkitConfig

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLI_NAME = "nvidia-container-cli"


class CliNotFound(Exception):
    """No nvidia-container-cli to run; the message says where it looked and the fix."""


def find_cli(config: ToolkitConfig) -> str:
    """`[nvidia-container-cli] path`, else the first executable on the fixed SYSTEM_PATH;
    refused (CliNotFound) when a user other than root could have placed or replaced it
    (`nvdocker2.host.run.unsafe_to_run`: the file or a directory above it).

    Never the hook's own PATH: under `docker run --gpus` the hook inherits dockerd's whole
    environment, which must not decide what runs as root.
    """
    if config.cli.path:
        if os.access(config.cli.path, os.X_OK) and os.path.isfile(config.cli.path):
            return _safe(os.path.abspath(config.cli.path))
        raise CliNotFound(
            f"[nvidia-container-cli] path = {config.cli.path!r} in {config.path} is not an"
            " executable file"
        )
    for directory in SYSTEM_PATH.split(":"):
        candidate = os.path.join(directory, CLI_NAME)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return _safe(candidate)
    raise CliNotFound(
        f"{CLI_NAME} not found in {SYSTEM_PATH}; install libnvidia-container-tools or set"
        f" [nvidia-container-cli] path in {config.path}"
    )


def _safe(cli: str) -> str:
    from nvdocker2.host.run import unsafe_to_run

    why = unsafe_to_run(cli)
    if why is not None:
        raise CliNotFound(f"refusing to run {cli}: {why}; it must belong to root, in"
                          " directories only root can write")
    return cli


def build_argv(cli: str, request: Request, config: ToolkitConfig, pid: int, rootfs: str
               ) -> list[str]:
    """`nvidia-container-cli [global flags] configure [flags] --pid=PID ROOTFS` as a list."""
    if not os.path.isabs(rootfs):
        raise ValueError(f"rootfs must be absolute, got {rootfs!r}")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"pid must be a positive integer, got {pid!r}")
    return [*argv_before_pid(cli, request, config), f"--pid={pid}", rootfs]


def argv_before_pid(cli: str, request: Request, config: ToolkitConfig) -> list[str]:
    """`nvidia-container-cli [global flags] configure [flags]`: all of the command line but
    `--pid=PID ROOTFS`, which is what the runtime can decide before the container exists."""
    c = config.cli
    argv = [cli]
    if c.root:
        argv.append(f"--root={c.root}")
    if c.load_kmods:
        argv.append("--load-kmods")
    if c.no_pivot:
        argv.append("--no-pivot")
    if c.debug:
        argv.append(f"--debug={c.debug}")
    if c.ldcache:
        argv.append(f"--ldcache={c.ldcache}")
    if c.user:
        argv.append(f"--user={c.user}")
    argv.append("configure")
    if c.ldconfig:
        argv.append(f"--ldconfig={c.ldconfig}")
    if c.no_cgroups:
        argv.append("--no-cgroups")
    devices = request.device_list
    if devices:
        argv.append(f"--device={devices}")
    mig_config = device_arg(request.mig_config)
    if mig_config:
        argv.append(f"--mig-config={mig_config}")
    mig_monitor = device_arg(request.mig_monitor)
    if mig_monitor:
        argv.append(f"--mig-monitor={mig_monitor}")
    channels = device_arg(request.imex_channels)
    if channels:
        argv.append(f"--imex-channel={channels}")  # one flag, the list as NVIDIA's hook gives it
    argv.extend(f"--{cap}" for cap in request.capabilities)
    argv.extend(f"--require={req}" for req in request.requirements)
    return argv


def cli_environment(config: ToolkitConfig) -> dict[str, str]:
    """The cli's whole environment: PATH, then `[nvidia-container-cli] environment` entries.

    Built from nothing: neither the container's env nor the hook's own (dockerd's, under
    `--gpus`) reaches the cli, so LD_PRELOAD, PATH or LD_LIBRARY_PATH from either cannot.
    """
    env = {"PATH": SYSTEM_PATH}
    for entry in config.cli.environment:
        name, _, value = entry.partition("=")
        env[name] = value
    return env
