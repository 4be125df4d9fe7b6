"""Installer-side commands of direct mode: `cdi generate` (`install --mode direct` is a file of
the Docker transaction: nvdocker2.engines.docker.runtime_mode).

Unlike the rest of `nvdocker2.direct` (imported on every container start, stdlib only), this
module belongs to the `nvdocker2` CLI: it writes files through the one atomic-write helper
and turns `DirectError`s into the installer's `NvDockerError`s with the exit codes of reference §2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2.store.atomic import atomic_write, os_error
from nvdocker2.direct import cdi
from nvdocker2.direct.discover import discover
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.gated import GATES
from nvdocker2.direct.spec import host_ldconfig
from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.host import files


def _write(path: Path, text: str) -> None:
    try:
        files.make_dirs(path.parent, 0o755)
    except OSError as err:
        raise os_error(err, str(path.parent)) from None
    atomic_write(path, text.encode("utf-8"))


def _settings() -> Any:
    from nvdocker2 import toolkit_config

    try:
        return toolkit_config.load()
    except toolkit_config.ConfigError as err:
        raise BadInput(str(err), "fix config.toml, or point NVIDIA_CONTAINER_RUNTIME_CONFIG at"
                       " a valid one") from None


def cdi_document(
    *, driver_root: str | None, runtime_path: str, ldconfig: str | None
) -> tuple[dict[str, Any], str]:
    """(the CDI spec of this host's GPUs, the driver root it came from); the one generator
    behind `cdi generate`, `install --mode cdi` and `cdi refresh` (defaults from config.toml).
    """
    settings = _settings()
    root = driver_root or settings.runtime.driver_root
    try:
        spec = cdi.cdi_spec(
            discover(root),
            runtime_path=runtime_path,
            ldconfig=host_ldconfig(ldconfig or settings.cli.ldconfig),
        )
    except DirectError as err:
        raise EnvironmentProblem(err.message, err.hint) from None
    return spec, root


@dataclass(frozen=True)
class CdiResult:
    output: str
    gpus: int
    mounts: int
    driver_root: str
    wsl: bool = False  # WSL2: one device `all`, /dev/dxg
    nodes: int = 0  # the device nodes of device `all`


def generate_cdi(
    output: str | None,
    *,
    driver_root: str | None,
    runtime_path: str,
    ldconfig: str | None,
    device_class: str = "gpu",
) -> CdiResult:
    """Write the CDI spec for this host's driver (defaults from config.toml): of its GPUs
    (`device_class` "gpu"), of its IMEX channels ("imex-channel") or of a feature gate's
    nodes ("gds", "mofed", "gdrcopy", "nvswitch": nvdocker2.direct.gated)."""
    if device_class not in cdi.CLASSES:
        raise BadInput(f"--class {device_class!r:.40}: not a device class",
                       f"give one of {', '.join(cdi.CLASSES)}")
    if device_class == "imex-channel":
        out = output or cdi.IMEX_OUTPUT
        root = driver_root or _settings().runtime.driver_root
        spec = cdi.imex_spec(discover(root))
        if not spec["devices"]:
            raise EnvironmentProblem(
                f"no IMEX channels under {os.path.join(root, 'dev/nvidia-caps-imex-channels')}",
                "IMEX channels appear once the nvidia-caps-imex-channels driver made them"
                " (NVreg_CreateImexChannel0=1, or mknod from /proc/devices)")
    elif device_class in GATES:
        out = output or cdi.class_output(device_class)
        root = driver_root or _settings().runtime.driver_root
        spec = cdi.gated_spec(discover(root), device_class)
        if not spec["devices"]:
            there = ", ".join(os.path.join(root, p.lstrip("/")) for p in GATES[device_class])
            raise EnvironmentProblem(
                f"no {device_class} device nodes: none of {there}",
                f"the {device_class} kernel module makes them; load it, then run this again")
    else:
        out = output or cdi.DEFAULT_OUTPUT
        spec, root = cdi_document(driver_root=driver_root, runtime_path=runtime_path,
                                  ldconfig=ldconfig)
    _write(Path(out), cdi.render(spec, out))
    return CdiResult(
        output=os.path.abspath(out),
        gpus=sum(1 for d in spec["devices"] if d["name"].isdigit()),
        mounts=len(spec.get("containerEdits", {}).get("mounts", [])),
        driver_root=os.path.abspath(root),
        wsl=any(n.get("path") == "/dev/dxg" for d in spec["devices"]
                for n in d["containerEdits"].get("deviceNodes", ())),
        nodes=sum(len(d["containerEdits"].get("deviceNodes", ())) for d in spec["devices"]
                  if d["name"] == "all"),
    )
