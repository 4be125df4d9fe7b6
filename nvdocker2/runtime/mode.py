"""Which mode serves a container: config.toml's `mode`, with `auto` resolved for the
container at hand (docs/nvidia-toolkit.md), stdlib only (the runtime imports it at `create`).

NVIDIA's rule at main (internal/info/auto.go): a request naming only fully qualified CDI
devices is cdi; a Tegra board without NVML (or with an integrated GPU) is csv; anything else
is jit-cdi (legacy before v1.18). nvdocker2 follows it with the modes it serves: jit-cdi is
direct mode, a Tegra board is csv mode (nvdocker2.direct.csv_mode); where direct mode cannot
serve the host or the request (WSL, MIG devices), auto is legacy, which libnvidia-container
serves there. A request of CDI names alone (in NVIDIA_VISIBLE_DEVICES, or in annotations under
`annotation-prefixes`) resolves to cdi, which nvdocker2.runtime.cdi serves.
"""

from __future__ import annotations

import os


TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Mapping

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MIG_ENV = ("NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
TEGRA_RELEASE = "etc/nv_tegra_release"
SOC_FAMILY = "sys/devices/soc0/family"
GPUS = "proc/driver/nvidia/gpus"
WSL_NODE = "dev/dxg"


def requested_devices(env: Mapping[str, str], swarm_resource: str = "") -> list[str]:
    """The device names the container's environment asks for, read from the variable the
    hook reads (`swarm-resource`'s names first, then NVIDIA_VISIBLE_DEVICES)."""
    names = [n.strip() for n in swarm_resource.split(",") if n.strip()]
    for name in (*names, VISIBLE_DEVICES):
        if name in env:
            return [d.strip() for d in env[name].split(",") if d.strip()]
    return []


def is_cdi_name(device: str) -> bool:
    """`vendor/class=name`, a fully qualified CDI device name (nvidia.com/gpu=0)."""
    kind, eq, name = device.partition("=")
    vendor, slash, cls = kind.partition("/")
    return bool(eq and slash and vendor and cls and name and "." in vendor)


def _is_mig(device: str) -> bool:
    return device.upper().startswith("MIG-") or (
        ":" in device and not device.upper().startswith("GPU-"))


def host_platform(driver_root: str) -> tuple[str, str]:
    """("wsl" | "tegra" | "nvml" | "unknown", why) for the driver under `driver_root`, with
    NVIDIA's order: WSL first, then Tegra files without an NVML GPU, then an NVML GPU."""
    def at(rel: str) -> str:
        return os.path.join(driver_root, rel)

    if os.path.exists(at(WSL_NODE)):
        return "wsl", f"{at(WSL_NODE)} exists (WSL)"
    try:
        gpus = bool(os.listdir(at(GPUS)))
    except OSError:
        gpus = False
    tegra = os.path.exists(at(TEGRA_RELEASE))
    if not tegra:
        try:
            with open(at(SOC_FAMILY), "rb") as f:
                tegra = b"tegra" in f.read(64).lower()
        except OSError:
            pass
    if tegra and not gpus:
        return "tegra", "a Tegra board without a GPU in " + at(GPUS)
    if gpus:
        return "nvml", "GPUs in " + at(GPUS)
    return "unknown", "no GPU in " + at(GPUS)


def resolve_auto(env: Mapping[str, str], config: Any, driver_root: str | None = None
                 ) -> tuple[str, str]:
    """(mode, why) that `mode = "auto"` means for a container with environment `env`;
    `driver_root` is where the driver root is seen from (doctor's host root), else its own."""
    devices = requested_devices(env, config.swarm_resource)
    if devices and all(is_cdi_name(d) for d in devices):
        return "cdi", "the container asks only for CDI devices (" + ",".join(devices)[:80] + ")"
    platform, why = host_platform(driver_root or config.runtime.driver_root)
    if platform == "wsl":
        return "legacy", why + ": direct mode does not serve WSL; libnvidia-container does"
    if platform == "tegra":
        return "csv", why + ": NVIDIA's auto says csv: the mount-spec CSV files"
    if any(_is_mig(d) for d in devices) or any(env.get(n, "").strip() for n in MIG_ENV):
        return "legacy", "the container asks for MIG devices, which direct mode does not serve"
    return "direct", why + ": NVIDIA's auto says jit-cdi (v1.18 on), which is direct mode here"


def container_mode(spec: Mapping, config: Any) -> tuple[str, str]:
    """(mode, why) that serves the container of OCI `spec`: one of SERVED_MODES."""
    given = config.runtime.mode_given
    mode = config.runtime.mode
    if mode == "auto":
        from nvdocker2.hook.request import RequestError, env_map

        process = spec.get("process")
        env_list = process.get("env") if isinstance(process, dict) else None
        try:
            env = env_map(env_list if isinstance(env_list, list) else ())
        except RequestError:
            env = {}  # the request itself refuses this environment, in either mode
        annotations = spec.get("annotations")
        prefixes = tuple(config.cdi.annotation_prefixes)
        asked = [k for k in annotations if isinstance(k, str) and k.startswith(prefixes)
                 ] if isinstance(annotations, dict) else []
        if asked:
            mode, why = "cdi", "the container has CDI annotations (" + ",".join(
                sorted(asked))[:80] + ")"
        else:
            mode, why = resolve_auto(env, config)
        why = f"auto resolves to {mode}: {why}"
    else:
        why = f'{given!r} in {config.path}'
    return mode, why
