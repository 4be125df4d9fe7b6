"""`nvdocker2 agent`: keep the runtime installed on one node (nvdocker2.agent; a DaemonSet's
container or a systemd service). It takes install's options and drives install/uninstall
through this same command line, so it knows no engine either."""

from __future__ import annotations

import os
from typing import Any, Optional

from nvdocker2.cli.app import Command, run_command, typer
from nvdocker2.cli.options import ReloadMode, install_option
from nvdocker2.engines import registry
from nvdocker2.errors import BadInput, EnvironmentProblem


def add(app: Any) -> None:
    app.command("agent", cls=Command)(agent)


def agent(
    engine: str = typer.Option(
        "docker", "--engine", metavar="ENGINE",
        help="Container engine to keep configured (as install's --engine)."),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="PATH", show_default=False,
        help="The engine's config, as a path on the host [default: /etc/docker/daemon.json, "
        "/etc/containerd/config.toml, /etc/crio/crio.conf.d/99-nvidia.conf]."),
    host_root: str = typer.Option(
        "/", "--host-root", metavar="DIR",
        help="Where the host's / is (a container mounts it, e.g. /host): --config and the "
        "state directory (/var/lib/nvdocker2, the journal and the agent's lock) are found under "
        "it."),
    reload: ReloadMode = install_option("reload"),
    no_verify: bool = install_option("no_verify"),
    set_default: bool = typer.Option(False, "--set-default",
                                     help="Also make nvidia the engine's default runtime."),
    runtime_name: str = install_option("runtime_name"),
    runtime_path: Optional[str] = typer.Option(
        None, "--runtime-path", metavar="PATH", show_default=False,
        help="nvidia-container-runtime as a path on the host [default: install's]."),
    containerd_address: Optional[str] = typer.Option(
        None, "--containerd-address", metavar="PATH", show_default=False,
        help="containerd's (or CRI-O's) socket, as install's --containerd-address."),
    timeout: float = install_option("timeout"),
    ready_file: Optional[str] = typer.Option(
        None, "--ready-file", metavar="PATH", show_default=False,
        help="A file that exists exactly while the agent is ready (for an exec readiness probe)."),
    healthz: Optional[int] = typer.Option(
        None, "--healthz", metavar="PORT", min=0, max=65535, show_default=False,
        help="Serve GET /healthz on 127.0.0.1:PORT (200 when ready, else 503)."),
    keep_on_exit: bool = typer.Option(
        False, "--keep-on-exit",
        help="On SIGTERM/SIGINT leave the config installed (default: uninstall, which puts "
        "back what the journal recorded)."),
    poll: float = typer.Option(5.0, "--poll", metavar="SECONDS", min=0.1,
                               help="Check the config at least this often (inotify, where "
                               "available, notices a rewrite at once)."),
    install_toolkit: Optional[str] = typer.Option(
        None, "--install-toolkit", metavar="DIR", show_default=False,
        help="For a node without packages: copy the runtime and hook from this image into "
        "DIR on the host (NVIDIA's operator uses /usr/local/nvidia/toolkit), run by the host's "
        "python3 (3.9 or later), point the engine at DIR/nvidia-container-runtime, write the "
        "node's CDI spec /var/run/cdi/nvidia.yaml (never over one it did not write), and "
        "remove both on uninstall."),
    backoff: float = typer.Option(10.0, "--backoff", metavar="SECONDS", min=0.1,
                                  help="First wait when the same drift comes back or install "
                                  "fails; doubled each time, up to 32 times this."),
) -> None:
    """Keep the nvidia runtime installed on this node: install, report ready, re-apply drift,
    uninstall on SIGTERM/SIGINT (a DaemonSet's container; see docs/kubernetes.md)."""

    def go() -> int:
        from nvdocker2 import agent as node_agent

        names = registry.names()
        if engine not in names:
            raise BadInput(f"--engine {engine} is not an engine nvdocker2 knows",
                           f"use --engine {', '.join(names[:-1])} or {names[-1]}")
        if install_toolkit and runtime_path:
            raise BadInput("--install-toolkit and --runtime-path both name the runtime",
                           "drop --runtime-path: the engine runs DIR/nvidia-container-runtime")
        if not os.path.isdir(host_root):
            raise BadInput(f"--host-root {host_root} is not a directory",
                           "mount the host's / there, or drop --host-root")
        try:
            opts = node_agent.options(
                engine, config, host_root, reload.value, not no_verify, set_default,
                runtime_name, runtime_path, containerd_address, timeout, ready_file, healthz,
                keep_on_exit, poll, backoff, install_toolkit)
        except ValueError as e:
            raise BadInput(str(e), "put the config in its own directory, e.g. "
                           "/etc/containerd/config.toml") from None
        try:
            return node_agent.run(opts)
        except node_agent.CannotStart as e:
            raise EnvironmentProblem(str(e), e.hint) from None

    run_command(False, go)
