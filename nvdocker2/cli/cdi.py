"""`nvdocker2 cdi generate|refresh|validate`: CDI specs for this host's GPUs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

from nvdocker2 import locations
from nvdocker2.cli.app import Command, emit_json, Out, run_command, to_stderr, make_typer, typer
from nvdocker2.cli.options import config_option, install_option, to_typer
from nvdocker2.engines import registry
from nvdocker2.errors import BadInput


cdi_app = make_typer(add_completion=False,
                 help="Container Device Interface specs for this host's GPUs.")


def add(app: Any) -> None:
    app.add_typer(cdi_app, name="cdi")


@cdi_app.command("generate", cls=Command)
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
    device_class: str = typer.Option(
        "gpu", "--class", metavar="CLASS",
        help="gpu: nvidia.com/gpu (GPUs and MIG devices); imex-channel: "
        "nvidia.com/imex-channel=N, written to /etc/cdi/nvidia-imex-channel.yaml by default; "
        "gds, mofed, gdrcopy, nvswitch: nvidia.com/CLASS=all, the nodes of that feature, "
        "written to /etc/cdi/nvidia-CLASS.yaml by default.",
    ),
    json_: bool = install_option("json"),
) -> None:
    """Write a CDI spec (nvidia.com/gpu=INDEX|UUID|GPU:MIG|MIG-UUID|all, with --class
    imex-channel nvidia.com/imex-channel=N|all, with --class gds|mofed|gdrcopy|nvswitch
    nvidia.com/CLASS=all) from what direct mode discovers."""

    def go() -> int:
        from nvdocker2.direct.commands import generate_cdi

        path = runtime_path or locations.default_runtime_path()[0]
        res = generate_cdi(output, driver_root=driver_root, runtime_path=path, ldconfig=ldconfig,
                           device_class=device_class)
        if Out.json:
            emit_json({"output": res.output, "gpus": res.gpus, "mounts": res.mounts,
                        "driver_root": res.driver_root, "wsl": res.wsl})
        elif device_class == "imex-channel":
            sys.stdout.write(f"wrote {res.output}: {res.gpus} IMEX channel(s), driver root "
                             f"{res.driver_root}\n")
        elif device_class != "gpu":
            sys.stdout.write(f"wrote {res.output}: nvidia.com/{device_class}=all, "
                             f"{res.nodes} device node(s), driver root {res.driver_root}\n")
        else:
            gpus = "WSL2, every GPU through /dev/dxg" if res.wsl else f"{res.gpus} GPU(s)"
            sys.stdout.write(f"wrote {res.output}: {gpus}, {res.mounts} driver "
                             f"files, driver root {res.driver_root}\n")
        return 0

    run_command(json_, go)


@cdi_app.command("refresh", cls=Command)
def cdi_refresh(
    config: Optional[Path] = to_typer(config_option("cdi refresh", "whose CDI mode to refresh")),
    cdi_spec_dir: Optional[str] = typer.Option(
        None, "--cdi-spec-dir", metavar="DIR", show_default=False,
        help="Directory of the spec [default: where install --mode cdi wrote it, else /etc/cdi].",
    ),
    timeout: float = install_option("timeout"),
    json_: bool = install_option("json"),
) -> None:
    """Regenerate the CDI spec install --mode cdi wrote from the GPUs present; write it only
    when it changed (the packages run this at boot). Does nothing where install --mode cdi
    wrote no spec: a spec it did not write, or one replaced since, is left as it is.
    nvdocker2.console runs the common forms of this command without the parser; keep them
    alike."""

    def go() -> int:
        res = registry.frontend("docker").cdi_refresh(config, cdi_spec_dir, timeout)
        if Out.json:
            emit_json(res.to_json())
        else:
            sys.stdout.write(res.line() + "\n")
        return 0

    run_command(json_, go)



_READERS = ("podman-4.3", "docker-25", "docker-26.1", "docker-28.0", "docker-28.1")


@cdi_app.command("validate", cls=Command)
def cdi_validate(
    file: str = typer.Argument(
        "/etc/cdi/nvidia.yaml", metavar="[FILE]", show_default=False,
        help="The spec to check [default: /etc/cdi/nvidia.yaml].",
    ),
    for_: Optional[str] = typer.Option(
        None, "--for", metavar="READER",
        help="Check for one reader only: " + ", ".join(_READERS) + " (the CDI library each "
        "was built with: 0.5.2, 0.6.2, 0.7.1, 0.8.0, 1.0.1) [default: all of them].",
    ),
    json_: bool = install_option("json"),
) -> None:
    """Check a CDI spec as the readers' CDI library loads it: fields, cdiVersion, names, device
    nodes, hooks and mounts. Exit 0 when every reader asked accepts it, 2 when one refuses it."""

    def go() -> int:
        from nvdocker2 import cdi_validate as cv
        from nvdocker2.store.atomic import os_error

        if for_ is not None and for_ not in cv.READERS:
            raise BadInput(f"--for {for_}: not a reader this command knows",
                           "use one of: " + ", ".join(cv.READERS))
        readers = [cv.READERS[for_]] if for_ else list(cv.READERS.values())
        try:
            with open(file, "rb") as f:
                data = f.read()
                mode = os.fstat(f.fileno()).st_mode
        except FileNotFoundError:
            raise BadInput(f"{file}: no such file",
                           "write one with: nvdocker2 cdi generate --output " + file) from None
        except IsADirectoryError:
            raise BadInput(f"{file}: a directory, not a spec file",
                           "name the spec file itself, e.g. /etc/cdi/nvidia.yaml") from None
        except OSError as err:
            raise os_error(err, file) from None
        report = cv.validate(os.path.abspath(file), data, readers, mode)
        for note in report.notes:
            to_stderr(f"warning: {note}")
        refused = [v for v in report.verdicts if not v.ok]
        if Out.json:
            emit_json(report.to_json())
        if not refused:
            if not Out.json:
                names = ", ".join(f"{v.reader.name} (CDI {v.reader.library.version})"
                                  for v in report.verdicts)
                sys.stdout.write(f"ok: {report.path}: cdiVersion {report.version}, "
                                 f"{len(report.devices)} device(s) of {report.kind}; "
                                 f"accepted by {names}\n")
            return 0
        first = refused[0]
        also = "".join(f"; also by {', '.join(v.reader.name for v in refused[1:])}"
                       if len(refused) > 1 else "")
        accepted = [v.reader.name for v in report.verdicts if v.ok]
        hint = ("fix that field (nvdocker2 cdi generate writes a spec every reader accepts)"
                if not accepted else f"accepted by {', '.join(accepted)}: if only those read "
                "it, check with --for; else fix that field")
        to_stderr(f"error: {report.path}: {first.reader.name} (CDI "
                f"{first.reader.library.version}) refuses it: {first.error}{also}")
        to_stderr(f"hint: {hint}")
        return 2

    run_command(json_, go)
