"""`nvdocker2 cdi generate|refresh`: CDI specs for this host's GPUs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from nvdocker2 import locations
from nvdocker2.cli.app import _Command, _emit_json, _Out, _run, _typer, typer
from nvdocker2.cli.options import COMMON, config_option, to_typer
from nvdocker2.engines import registry


def _common(param: str) -> Any:
    return to_typer(next(o for o in COMMON if o.param == param and "install" in o.commands))


cdi_app = _typer(add_completion=False, help="Container Device Interface specs for this host's GPUs.")


def add(app: Any) -> None:
    app.add_typer(cdi_app, name="cdi")


@cdi_app.command("generate", cls=_Command)
def cdi_generate(
    output: Optional[str] = typer.Option(
        None, "--output", metavar="PATH",
        help="Where to write the spec [default: /etc/cdi/nvidia.yaml]; a name ending in .json "
        "gets JSON, anything else YAML.",
    ),
    driver_root: Optional[str] = typer.Option(
        None, "--driver-root", metavar="DIR",
        help="Where the driver lives [default: driver-root in config.toml, else /].",
    ),
    runtime_path: Optional[str] = typer.Option(
        None, "--runtime-path", metavar="PATH",
        help="nvidia-container-runtime for the ld-cache hook [default: the one beside nvdocker2].",
    ),
    ldconfig: Optional[str] = typer.Option(
        None, "--ldconfig", metavar="PATH",
        help="The host's ldconfig [default: [nvidia-container-cli] ldconfig, else /sbin/ldconfig].",
    ),
    json_: bool = _common("json"),
) -> None:
    """Write a CDI spec (nvidia.com/gpu=INDEX|UUID|all) from what direct mode discovers."""

    def go() -> int:
        from nvdocker2.direct.commands import generate_cdi

        path = runtime_path or locations.default_runtime_path()[0]
        res = generate_cdi(output, driver_root=driver_root, runtime_path=path, ldconfig=ldconfig)
        if _Out.json:
            _emit_json({"output": res.output, "gpus": res.gpus, "mounts": res.mounts,
                        "driver_root": res.driver_root})
        else:
            sys.stdout.write(f"wrote {res.output}: {res.gpus} GPU(s), {res.mounts} driver "
                             f"files, driver root {res.driver_root}\n")
        return 0

    _run(json_, go)


@cdi_app.command("refresh", cls=_Command)
def cdi_refresh(
    config: Optional[Path] = to_typer(config_option("cdi refresh", "whose CDI mode to refresh")),
    cdi_spec_dir: Optional[str] = typer.Option(
        None, "--cdi-spec-dir", metavar="DIR", show_default=False,
        help="Directory of the spec [default: where install --mode cdi wrote it, else /etc/cdi].",
    ),
    timeout: float = _common("timeout"),
    json_: bool = _common("json"),
) -> None:
    """Regenerate the CDI spec from the GPUs present; write it only when it changed (the
    packages run this at boot). Does nothing where install --mode cdi wrote no spec."""

    def go() -> int:
        res = registry.frontend("docker").cdi_refresh(config, cdi_spec_dir, timeout)
        if _Out.json:
            _emit_json(res.to_json())
        elif not res.present:
            sys.stdout.write(f"no CDI spec at {res.spec}: nothing to refresh "
                             "(nvdocker2 install --mode cdi writes one)\n")
        elif res.changed:
            sys.stdout.write(f"rewrote {res.spec}: {', '.join(res.devices)} "
                             f"(backup {res.backup})\n")
        else:
            sys.stdout.write(f"unchanged: {res.spec} already lists the GPUs present "
                             f"({', '.join(res.devices)}); nothing written\n")
        return 0

    _run(json_, go)

