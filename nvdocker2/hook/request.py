"""What a container asks of the GPU driver: the pure decision of docs/reference.md §4 rules 2–5.

`container_request` turns a container's environment, privilege, mounts and the toolkit config
into a frozen `Request`, or `None` when the container is not a GPU container, or raises
`RequestError` for a request that must be refused. It reads no file and runs nothing, so the
hook (which hands the result to nvidia-container-cli) and direct mode (which edits the OCI spec
itself) decide exactly the same way, and tests can walk the whole decision table.
"""

from __future__ import annotations

# collections.abc imports the whole collections package (a millisecond at every GPU container
# start); os has already loaded the module that defines its ABCs.
try:
    from _collections_abc import Mapping
except ImportError:  # pragma: no cover - a Python without it
    from collections.abc import Mapping

from nvdocker2.device_ids import (  # noqa: F401 - re-exported: the hook's one validator
    MAX_DEVICE_IDS,
    MAX_ID_LENGTH,
    RequestError,
    is_void,
    parse_device_list,
    parse_imex_channels,
    validate_id,
)
from nvdocker2.toolkit_config import ALL_CAPABILITIES, Record, ToolkitConfig

TYPE_CHECKING = False  # typing itself costs milliseconds at every container start
if TYPE_CHECKING:  # pragma: no cover
    from typing import Iterable, Sequence, Union

    # "all" | "none" | tuple of validated ids
    Devices = Union[str, tuple[str, ...]]

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
MIG_CONFIG = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR = "NVIDIA_MIG_MONITOR_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
CUDA_VERSION = "CUDA_VERSION"
# Feature gates (nvdocker2.direct.gated serves them): on only when set to exactly "enabled",
# as NVIDIA's toolkit compares them (internal/modifier/cdi.go gatedDevices).
GATE_ENVS = (("gds", "NVIDIA_GDS"), ("mofed", "NVIDIA_MOFED"), ("gdrcopy", "NVIDIA_GDRCOPY"),
             ("nvswitch", "NVIDIA_NVSWITCH"))
DEFAULT_CAPABILITIES = ("utility", "compute")
DEVICE_MOUNT_ROOT = "/var/run/nvidia-container-devices/"

MAX_REQUIRE_LENGTH = 4096

_TRUE = frozenset(("1", "t", "T", "true", "TRUE", "True"))


class Request(Record):
    """A GPU container's request, every part validated (immutable: a frozen record).

    `devices` is "all", "none" (driver set up, no device) or a tuple of ids, each a decimal
    index, `N:M` (a MIG device by GPU and instance index) or a `GPU-`/`MIG-` UUID.
    `capabilities` are in the order of nvidia-container-cli's flags; `requirements` are
    expressions for `--require`; `mig_config`/`mig_monitor` are device lists like `devices`,
    or None, and appear only for privileged containers. `imex_channels` is "all", "none" or
    a tuple of channel numbers (decimal strings), None when not asked. `gated` are the feature
    gates set to exactly "enabled" (nvdocker2.direct.gated: "gds", "mofed", "gdrcopy",
    "nvswitch"); nvidia-container-cli has no flags for them, so only direct mode serves them.
    """

    devices: Devices
    capabilities: tuple[str, ...]
    requirements: tuple[str, ...] = ()
    mig_config: Devices | None = None
    mig_monitor: Devices | None = None
    imex_channels: Devices | None = None
    gated: tuple[str, ...] = ()
    privileged: bool = False
    legacy_image: bool = False

    @property
    def device_list(self) -> str | None:
        """The value of nvidia-container-cli's `--device=`, None when no device is asked."""
        return device_arg(self.devices)


def device_arg(devices: Devices | None) -> str | None:
    if devices is None or devices == "none":
        return None
    if isinstance(devices, str):
        return devices
    return ",".join(devices)


def env_map(env: Iterable[str]) -> dict[str, str]:
    """An OCI `process.env` list as a dict; a later duplicate wins, entries without `=` are
    ignored (as runc does)."""
    out: dict[str, str] = {}
    for entry in env:
        if not isinstance(entry, str):
            raise RequestError(f"process.env holds a non-string entry: {entry!r:.60}")
        name, sep, value = entry.partition("=")
        if sep:
            out[name] = value
    return out


def is_true(value: str | None) -> bool:
    """Go's strconv.ParseBool truth, which NVIDIA's images and tools use for flags."""
    return value is not None and value.strip() in _TRUE


def _devices_from_mounts(mounts: Sequence[Mapping]) -> str | None:
    """Ids given as `/dev/null` mounted on /var/run/nvidia-container-devices/<id>, joined."""
    ids = []
    for mount in mounts:
        if not isinstance(mount, Mapping):
            continue
        dest = mount.get("destination")
        if mount.get("source") != "/dev/null" or not isinstance(dest, str):
            continue
        if dest.startswith(DEVICE_MOUNT_ROOT):
            ids.append(dest[len(DEVICE_MOUNT_ROOT):])
    return ",".join(ids) if ids else None


def _capabilities(env: Mapping[str, str], legacy: bool, config: ToolkitConfig) -> tuple[str, ...]:
    supported = config.supported_driver_capabilities
    value = env.get(DRIVER_CAPABILITIES)
    if value is None and legacy:
        wanted = set(supported)
    elif value is None or not value.strip():
        wanted = {c for c in DEFAULT_CAPABILITIES if c in supported}
    else:
        wanted = set()
        for item in (c.strip() for c in value.split(",")):
            if not item:
                continue
            if item == "all":
                wanted.update(supported)
            elif item in supported:
                wanted.add(item)
            else:
                known = "known" if item in ALL_CAPABILITIES else "unknown"
                raise RequestError(
                    f"{DRIVER_CAPABILITIES}: {known} capability {item!r:.40} is not supported"
                    f" here (supported: {','.join(supported)})"
                )
    return tuple(c for c in ALL_CAPABILITIES if c in wanted)


def _requirements(env: Mapping[str, str], legacy: bool, config: ToolkitConfig
                  ) -> tuple[str, ...]:
    if config.disable_require or is_true(env.get(DISABLE_REQUIRE)):
        return ()
    reqs = []
    for name in sorted(env):
        if name.startswith(REQUIRE_PREFIX):
            value = env[name].strip()
            if not value:
                continue
            if len(value) > MAX_REQUIRE_LENGTH or any(ord(c) < 32 for c in value):
                raise RequestError(f"{name}: requirement too long or has control characters")
            reqs.append(value)
    if legacy:
        version = env[CUDA_VERSION].strip()
        parts = version.split(".")
        if len(parts) < 2 or not all(p.isascii() and p.isdigit() for p in parts[:2]):
            raise RequestError(
                f"{CUDA_VERSION}: {version!r:.40} is not a CUDA version like 11.8 or 11.8.0"
            )
        reqs.append(f"cuda>={int(parts[0])}.{int(parts[1])}")
    return tuple(reqs)


def _visible_devices(envs: Mapping[str, str], privileged: bool, mounts: Sequence[Mapping],
                     config: ToolkitConfig, legacy: bool) -> tuple[str | None, str]:
    """(the device list the container asks for, where it was read), None for no list or one
    that the trust rules ignore: volume mounts where config.toml accepts them, else the
    environment (`swarm-resource`'s names, then NVIDIA_VISIBLE_DEVICES, `all` for a legacy
    CUDA image), ignored for an unprivileged container unless config.toml accepts it."""
    raw: str | None = None
    source = VISIBLE_DEVICES
    if config.accept_volume_mounts:
        raw = _devices_from_mounts(mounts)
        source = "mounts under " + DEVICE_MOUNT_ROOT
    if raw is None:
        source = VISIBLE_DEVICES
        names = [VISIBLE_DEVICES]
        if config.swarm_resource:
            names[:0] = [n.strip() for n in config.swarm_resource.split(",") if n.strip()]
        for name in names:
            if name in envs:
                raw, source = envs[name], name
                break
        if raw is None and legacy:
            raw = "all"
        if raw is not None and not (privileged or config.accept_envvar_unprivileged):
            return None, source
    if raw is None or not raw.strip():
        return None, source
    return raw, source


def request_source(spec: Mapping, config: ToolkitConfig) -> tuple[str | None, str]:
    """`_visible_devices` of an OCI spec: what cdi mode reads its bare and qualified names
    from, under the same trust rules as every other mode."""
    process = spec.get("process")
    if not isinstance(process, Mapping):
        raise RequestError("config.json: 'process' must be an object")
    env = process.get("env") or []
    mounts = spec.get("mounts") or []
    if not isinstance(env, list) or not isinstance(mounts, list):
        raise RequestError("config.json: 'process.env' and 'mounts' must be lists")
    envs = env_map(env)
    legacy = CUDA_VERSION in envs and REQUIRE_CUDA not in envs
    return _visible_devices(envs, is_privileged(spec), mounts, config, legacy)


def container_request(
    env: Iterable[str],
    privileged: bool,
    mounts: Sequence[Mapping],
    config: ToolkitConfig,
) -> Request | None:
    """Decide what a container asks for (docs/reference.md §4 rules 3–5).

    `env` is the OCI `process.env` list, `privileged` whether the bounding set holds
    CAP_SYS_ADMIN, `mounts` the OCI `mounts` list. Returns None for a container that is not a
    GPU container (the hook then does nothing); raises RequestError for a refused request.
    """
    envs = env_map(env)
    legacy = CUDA_VERSION in envs and REQUIRE_CUDA not in envs
    raw, source = _visible_devices(envs, privileged, mounts, config, legacy)
    if raw is None or is_void(raw):
        return None
    devices = parse_device_list(raw, source)

    mig = {}
    for name in (MIG_CONFIG, MIG_MONITOR):
        value = envs.get(name)
        if value is None or not value.strip():
            mig[name] = None
            continue
        if not privileged:
            raise RequestError(
                f"{name} is only allowed in privileged containers (CAP_SYS_ADMIN)"
            )
        mig[name] = parse_device_list(value, name)
    imex = envs.get(IMEX_CHANNELS)
    channels = parse_imex_channels(imex, IMEX_CHANNELS) if imex and imex.strip() else None

    return Request(
        devices=devices,
        capabilities=_capabilities(envs, legacy, config),
        requirements=_requirements(envs, legacy, config),
        mig_config=mig[MIG_CONFIG],
        mig_monitor=mig[MIG_MONITOR],
        imex_channels=channels,
        gated=requested_gates(envs),
        privileged=privileged,
        legacy_image=legacy,
    )


def requested_gates(env: Mapping[str, str]) -> tuple[str, ...]:
    """The feature gates `env` enables, in GATE_ENVS order: only the exact value "enabled"
    turns one on (`Enabled`, `true`, `enabled;x` leave it off, as NVIDIA's toolkit does)."""
    return tuple(gate for gate, name in GATE_ENVS if env.get(name) == "enabled")


def is_privileged(spec: Mapping) -> bool:
    """docs/reference.md §4 rule 2: privileged means CAP_SYS_ADMIN in the bounding set."""
    process = spec.get("process")
    caps = process.get("capabilities") if isinstance(process, Mapping) else None
    bounding = caps.get("bounding") if isinstance(caps, Mapping) else None
    return isinstance(bounding, list) and "CAP_SYS_ADMIN" in bounding


def request_from_spec(spec: Mapping, config: ToolkitConfig) -> Request | None:
    """`container_request` over an OCI spec (config.json as a dict), checking its shape."""
    process = spec.get("process")
    if not isinstance(process, Mapping):
        raise RequestError("config.json: 'process' must be an object")
    env = process.get("env", [])
    if env is None:
        env = []
    if not isinstance(env, list):
        raise RequestError("config.json: 'process.env' must be a list of strings")
    mounts = spec.get("mounts", [])
    if mounts is None:
        mounts = []
    if not isinstance(mounts, list):
        raise RequestError("config.json: 'mounts' must be a list")
    return container_request(env, is_privileged(spec), mounts, config)
