"""What config.toml of the runtime shim and the hook may say (docs/reference.md §3),
stdlib only: every key NVIDIA's toolkit writes or reads and nvdocker2's own, with the type
each must have (`check_keys`); the defaults, modes and paths; the keys nvdocker2 reads but
does not act on (`NOT_USED`, with why); `ConfigError`; and the records a file fills
(`ToolkitConfig` and its tables' settings). nvdocker2.toolkit_config reads the files.

The records are `Record`s, not dataclasses: importing dataclasses pulls in inspect, ast
and re, about 10 ms of CPU at every container start (measured with `python3 -I -S`).
"""

from __future__ import annotations

DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
# [nvidia-container-runtime.modes.csv] mount-spec-path: where csv mode's CSV files are
CSV_MOUNT_SPEC_PATH = "/etc/nvidia-container-runtime/host-files-for-container.d"
USER_CONFIG = "nvidia-container-runtime/config.toml"  # under $XDG_CONFIG_HOME or ~/.config
CONFIG_ENV = "NVIDIA_CONTAINER_RUNTIME_CONFIG"
MAX_CONFIG_BYTES = 1024 * 1024

# Every driver capability libnvidia-container knows, in the order reference §4 gives its flags.
ALL_CAPABILITIES = ("compute", "utility", "video", "graphics", "display", "compat32", "ngx")
DEFAULT_SUPPORTED_CAPABILITIES = "compat32,compute,display,graphics,ngx,utility,video"
DEFAULT_RUNTIMES = ("docker-runc", "runc", "crun")
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # NVIDIA's and CDI's defaults, in CDI's order
LOG_LEVELS = ("debug", "info", "warning", "error")
# logrus's level names, which NVIDIA's runtime accepts, as the level this runtime logs at.
NVIDIA_LOG_LEVELS = {"trace": "debug", "warn": "warning", "fatal": "error", "panic": "error"}
MODES = ("legacy", "direct")  # what `nvdocker2 install --mode` writes
# Every mode some NVIDIA release knows, and ours. jit-cdi is read as direct; auto is resolved
# per container (nvdocker2.runtime.mode); every one of them is served.
CONFIG_MODES = ("auto", "legacy", "direct", "jit-cdi", "cdi", "csv")
SERVED_MODES = ("legacy", "direct", "cdi", "csv")
HOOK_NAME = "nvidia-container-runtime-hook"

STR, BOOL, STRS, TABLE = "a string", "true or false", "a list of strings", "a table"
# Every key of config.toml that a release of NVIDIA's toolkit knows (v1.13 to main: the toml
# tags of its config structs), with the type NVIDIA reads, and nvdocker2's own keys.
NVIDIA_KEYS = {
    "accept-nvidia-visible-devices-as-volume-mounts": BOOL,
    "accept-nvidia-visible-devices-envvar-when-unprivileged": BOOL,
    "disable-require": BOOL,
    "supported-driver-capabilities": STR,
    "swarm-resource": STR,
    "nvidia-container-cli": TABLE,
    "nvidia-container-cli.debug": STR,
    "nvidia-container-cli.environment": STRS,
    "nvidia-container-cli.ldcache": STR,
    "nvidia-container-cli.ldconfig": STR,
    "nvidia-container-cli.load-kmods": BOOL,
    "nvidia-container-cli.no-cgroups": BOOL,
    "nvidia-container-cli.no-pivot": BOOL,
    "nvidia-container-cli.path": STR,
    "nvidia-container-cli.root": STR,
    "nvidia-container-cli.user": STR,
    "nvidia-container-runtime": TABLE,
    "nvidia-container-runtime.debug": STR,
    "nvidia-container-runtime.log-level": STR,
    "nvidia-container-runtime.mode": STR,
    "nvidia-container-runtime.runtimes": STRS,
    "nvidia-container-runtime.modes": TABLE,
    "nvidia-container-runtime.modes.cdi": TABLE,
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": STRS,
    "nvidia-container-runtime.modes.cdi.default-kind": STR,
    "nvidia-container-runtime.modes.cdi.spec-dirs": STRS,
    "nvidia-container-runtime.modes.csv": TABLE,
    "nvidia-container-runtime.modes.csv.compat-container-root": STR,
    "nvidia-container-runtime.modes.csv.mount-spec-path": STR,
    "nvidia-container-runtime.modes.jit-cdi": TABLE,
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks": STRS,
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags": STRS,
    "nvidia-container-runtime.modes.legacy": TABLE,
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": STR,
    "nvidia-container-runtime-hook": TABLE,
    "nvidia-container-runtime-hook.path": STR,
    "nvidia-container-runtime-hook.skip-mode-detection": BOOL,
    "nvidia-ctk": TABLE,
    "nvidia-ctk.path": STR,
    "features": TABLE,
    "features.allow-cuda-compat-libs-from-container": BOOL,
    "features.allow-ldconfig-from-container": BOOL,
    "features.allow-unknown-oci-spec-fields": BOOL,
    "features.disable-cuda-compat-lib-hook": BOOL,
    "features.disable-imex-channel-creation": BOOL,
    "features.ignore-imex-channel-requests": BOOL,
    "features.no-additional-gids-for-device-nodes": BOOL,
}
OWN_KEYS = {"nvidia-container-runtime.driver-root": STR}

_FEATURE_WHY = "a feature of NVIDIA's CDI and jit-cdi modifiers; nvdocker2's modes do not have it"
# The keys nvdocker2 reads but does not act on, and why (doctor lists the ones a file sets).
NOT_USED = {
    "nvidia-container-runtime.modes.csv.compat-container-root":
        "NVIDIA's csv mode sets up CUDA's forward-compatibility libraries there; nvdocker2's"
        " mounts the CSV files' paths only",
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks":
        "jit-cdi is direct mode here, which discovers the driver itself, without nvcdi",
    "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags":
        "jit-cdi is direct mode here, which discovers the driver itself, without nvcdi",
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode":
        "not passed on: nvidia-container-cli before 1.17.5 refuses --cuda-compat-mode, so "
        "its own default applies",
    "nvidia-container-runtime-hook.skip-mode-detection":
        "nvdocker2's hook never refuses a container by mode (docker --gpus is served by the "
        "legacy hook in every mode), which is what true asks for",
    "nvidia-ctk.path": "nvdocker2 runs no nvidia-ctk hooks; direct mode's hook is the runtime",
    "features.allow-cuda-compat-libs-from-container":
        "tied to cuda-compat-mode, which is not passed on",
    "features.allow-ldconfig-from-container":
        "ldconfig always runs from the host (docs/direct.md); never from the container",
    "features.allow-unknown-oci-spec-fields": "nvdocker2 keeps every field of config.json",
    "features.disable-cuda-compat-lib-hook": _FEATURE_WHY,
    "features.disable-imex-channel-creation": _FEATURE_WHY,
    "features.ignore-imex-channel-requests": _FEATURE_WHY,
    "features.no-additional-gids-for-device-nodes": _FEATURE_WHY,
}


class ConfigError(Exception):
    """config.toml cannot be used; the message is one line naming the file and the key."""


_TYPES = {STR: str, BOOL: bool, STRS: list, TABLE: dict}


def check_keys(doc: dict, path: str) -> tuple[list[str], tuple[str, ...]]:
    """The type of every key NVIDIA's toolkit or nvdocker2 knows (ConfigError naming the
    first wrong one); returns the warnings for keys no NVIDIA release knows, and the keys
    set here that nvdocker2 does not use (`NOT_USED`)."""
    warnings: list[str] = []
    unused: list[str] = []
    todo = [("", doc)]
    while todo:
        prefix, table = todo.pop()
        for name, value in table.items():
            key = prefix + name
            want = NVIDIA_KEYS.get(key) or OWN_KEYS.get(key)
            if want is None:
                shown = key if key.isprintable() else repr(key)
                warnings.append(f"key '{shown}' is not one any NVIDIA release knows; ignored")
                continue
            kind = _TYPES[want]
            if not isinstance(value, kind) or (kind is str and isinstance(value, bool)) or (
                    kind is list and not all(isinstance(v, str) for v in value)):
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                raise ConfigError(
                    f"{path}: key '{key}' must be {want}, got {type(value).__name__} {shown}")
            if kind is dict:
                todo.append((key + ".", value))
            elif key in NOT_USED:
                unused.append(key)
    return warnings, tuple(sorted(unused))


class Record:
    """An immutable record with what callers use of a frozen dataclass: keyword or positional
    construction with the class's defaults, ==, hash, repr, and `replace(**changes)`.
    Assigning a field raises AttributeError (as dataclasses' FrozenInstanceError does).

    Fields are the annotated class attributes, in order; the class value is the default.
    """

    _fields: tuple[str, ...] = ()
    _defaults: dict = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        fields: list[str] = []
        defaults: dict = {}
        for klass in reversed(cls.__mro__):
            for name in klass.__dict__.get("__annotations__", {}):
                if name.startswith("_"):
                    continue
                if name not in fields:
                    fields.append(name)
                if name in klass.__dict__:
                    defaults[name] = klass.__dict__[name]
        cls._fields = tuple(fields)
        cls._defaults = defaults

    def __init__(self, *args, **kwargs) -> None:
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes {len(self._fields)} arguments")
        values = dict(zip(self._fields, args))
        for name, value in kwargs.items():
            if name not in self._fields or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated {name!r}")
            values[name] = value
        for name in self._fields:
            if name not in values:
                if name not in self._defaults:
                    raise TypeError(f"{type(self).__name__}: missing {name!r}")
                values[name] = self._defaults[name]
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes):
        """A copy with some fields changed (dataclasses.replace)."""
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return type(self)(**values)


class RuntimeSettings(Record):
    """`[nvidia-container-runtime]`."""

    runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
    debug: str | None = None
    log_level: str = "info"
    mode: str = "legacy"
    driver_root: str = "/"
    mode_given: str = "legacy"
    csv_mount_spec_path: str = CSV_MOUNT_SPEC_PATH


class CdiSettings(Record):
    """`[nvidia-container-runtime.modes.cdi]`, with NVIDIA's defaults."""

    spec_dirs: tuple[str, ...] = CDI_SPEC_DIRS
    default_kind: str = "nvidia.com/gpu"
    annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)


class HookSettings(Record):
    """`[nvidia-container-runtime-hook]`."""

    path: str | None = None


class CliSettings(Record):
    """`[nvidia-container-cli]`: how the hook calls libnvidia-container."""

    path: str | None = None
    root: str | None = None
    ldconfig: str | None = "@/sbin/ldconfig"
    load_kmods: bool = True
    no_cgroups: bool = False
    user: str | None = None
    debug: str | None = None
    environment: tuple[str, ...] = ()
    ldcache: str | None = None
    no_pivot: bool = False


class ToolkitConfig(Record):
    """The whole config.toml, with defaults for what the file does not say.

    `source` is the file it was read from (None when no file existed: pure defaults) and
    `path`/`from_env` say which file was asked for and whether NVIDIA_CONTAINER_RUNTIME_CONFIG
    named it (the runtime then passes `--config` to the hook it injects). `user_source` is
    the per-user file whose keys override it (None: none was read).
    """

    disable_require: bool = False
    supported_driver_capabilities: tuple[str, ...] = tuple(
        DEFAULT_SUPPORTED_CAPABILITIES.split(",")
    )
    accept_envvar_unprivileged: bool = True
    accept_volume_mounts: bool = False
    swarm_resource: str = ""
    runtime: RuntimeSettings = RuntimeSettings()
    cdi: CdiSettings = CdiSettings()
    hook: HookSettings = HookSettings()
    cli: CliSettings = CliSettings()
    path: str = DEFAULT_CONFIG_PATH
    from_env: bool = False
    source: str | None = None
    user_source: str | None = None
    warnings: tuple[str, ...] = ()
    unused: tuple[str, ...] = ()
