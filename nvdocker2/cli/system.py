"""`nvdocker2 system create-device-nodes|create-dev-char-symlinks`: device nodes that stay
(NVIDIA's `nvidia-ctk system` commands of those names; the work is nvdocker2.devnodes')."""

from __future__ import annotations

import sys
from typing import Any

from nvdocker2.cli.app import Command, emit_json, Out, run_command, make_typer, typer
from nvdocker2.cli.options import install_option

system_app = make_typer(add_completion=False, help="Device nodes and /dev/char links that stay.")


def add(app: Any) -> None:
    app.add_typer(system_app, name="system")


def _dev_root() -> Any:
    return typer.Option("/", "--dev-root", metavar="DIR",
                        help="Work on DIR/dev instead of /dev.")


def _show(res: Any, made_word: str) -> None:
    if Out.json:
        emit_json(res.to_json())
        return
    if res.note:
        sys.stdout.write(res.note + "\n")
        return
    for e in res.entries:
        sys.stdout.write(f"{made_word if e.made else 'unchanged:'} {e.path} ({e.what})\n")


@system_app.command("create-device-nodes", cls=Command)
def create_device_nodes(
    dev_root: str = _dev_root(),
    proc_root: str = typer.Option("/", "--proc-root", metavar="DIR",
                                  help="Read DIR/proc/devices instead of /proc/devices."),
    json_: bool = install_option("json"),
) -> None:
    """Make the NVIDIA control nodes that are missing (nvidiactl, nvidia-modeset, nvidia-uvm,
    nvidia-uvm-tools, the MIG config and monitor caps nodes) with the majors in /proc/devices,
    so a CDI spec made now lists them. Makes nothing that is there; exit 3 when an entry
    of another kind or number is in the way (nothing is made then)."""

    def go() -> int:
        from nvdocker2 import devnodes

        _show(devnodes.create_device_nodes(dev_root, proc_root), "made")
        return 0

    run_command(json_, go)


@system_app.command("create-dev-char-symlinks", cls=Command)
def create_dev_char_symlinks(
    dev_root: str = _dev_root(),
    json_: bool = install_option("json"),
) -> None:
    """Link /dev/char/MAJOR:MINOR -> ../NODE for every NVIDIA node that lacks one (with the
    systemd cgroup driver, systemctl daemon-reload otherwise takes the GPUs from running
    containers). A link already leading to its node is left alone; exit 3 when a file
    that is not a symlink is in the way (nothing is made then)."""

    def go() -> int:
        from nvdocker2 import devnodes

        _show(devnodes.create_dev_char_symlinks(dev_root), "linked")
        return 0

    run_command(json_, go)
