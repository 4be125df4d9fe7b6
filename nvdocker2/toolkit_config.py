"""config.toml of the runtime shim and the hook (docs/reference.md §3), stdlib only.

The runtime and the hook run on every container start, so this module imports os and sys and
nothing else at import time. A missing file means defaults; a malformed file or a value of the
wrong type is refused with one line naming the file and the key. Every key some release of
NVIDIA's toolkit writes or reads is known here (`NVIDIA_KEYS`, docs/nvidia-toolkit.md): its
type is checked, and it has NVIDIA's meaning or is listed by `doctor` as not used, with why
(`NOT_USED`). A key no NVIDIA release knows is a warning (`ToolkitConfig.warnings`), never a
refusal.

Start-up cost decides two choices here (each saves about 10 ms of CPU per container start,
measured with `python3 -I -S`): results are `Record`s, not dataclasses (importing dataclasses
pulls in inspect, ast and re), and a file in the plain subset of TOML that config.toml files
use (tables, `key = "string" | 'string' | true | false | integer | [strings]`, comments) is
read by `_read_plain_toml`; anything else goes to tomllib (tomli on Python < 3.11), so the
result, and every error, is tomllib's.

Rootless engines (docs/reference.md §3): when the runtime or the hook runs as a user other
than root, or as the root of a user namespace that does not map the host's root (rootless
Docker runs them so), the user's own `$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml`
(else `~/.config/...`) is read after the global file, and each key it sets overrides the
global file's, key by key. It is read only when no other user could have written it
(nvdocker2.host.files.read_own_file); otherwise it is refused, with one line, like a
malformed file.
"""

from __future__ import annotations

import os
import sys
TYPE_CHECKING = False  # typing itself costs milliseconds at every container start
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Mapping

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


def config_path(explicit: str | None = None, environ: Mapping[str, str] | None = None
                ) -> tuple[str, bool]:
    """Which config.toml to read: `--config`, else NVIDIA_CONTAINER_RUNTIME_CONFIG, else the
    default. Returns (absolute path, whether it came from the environment variable)."""
    if explicit:
        return os.path.abspath(explicit), False
    env = os.environ if environ is None else environ
    named = env.get(CONFIG_ENV)
    if named:
        return os.path.abspath(named), True
    return DEFAULT_CONFIG_PATH, False


def user_config_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The per-user config.toml: `$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml`,
    else `$HOME/.config/...`; None without an absolute XDG_CONFIG_HOME or HOME (a relative
    one is ignored, as the XDG Base Directory specification says)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or ""
    if not base.startswith("/"):
        home = env.get("HOME") or ""
        if not home.startswith("/"):
            return None
        base = os.path.join(home, ".config")
    return os.path.join(os.path.normpath(base), USER_CONFIG)


def load(explicit: str | None = None, environ: Mapping[str, str] | None = None,
         user: bool | None = None) -> ToolkitConfig:
    """Read the config file chosen by `config_path` (defaults when it does not exist), then,
    when `user` (default: whether this process runs rootless), the per-user file over it."""
    path, from_env = config_path(explicit, environ)
    data = _read_file(path)
    if user is None:
        from nvdocker2.host.run import rootless

        user = rootless()
    user_path = user_config_path(environ) if user else None
    over = read_user_file(user_path) if user_path else None
    return layered(data, path, from_env, over, user_path)


def layered(data: bytes | None, path: str, from_env: bool, user_data: bytes | None,
            user_path: str | None) -> ToolkitConfig:
    """The config of the global file's bytes (None: no file) with the per-user file's keys
    over them (None: no per-user file), each file's errors naming it."""
    if user_data is None or user_path is None:
        if data is None:
            return ToolkitConfig(path=path, from_env=from_env)
        return parse(data, path=path, from_env=from_env)
    base = _document(data, path) if data is not None else {}
    _build(base, path, from_env, path)
    user_doc = _document(user_data, user_path)
    _build(user_doc, user_path, False, user_path)
    merged = _build(_merge(base, user_doc), path, from_env, path if data is not None else None)
    return merged.replace(user_source=user_path)


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config.toml file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config.toml")
    return data


def read_user_file(path: str) -> bytes | None:
    """The per-user file's bytes (None: there is none), refused when another user could
    have written it."""
    from nvdocker2.host.files import Untrusted, read_own_file

    try:
        data = read_own_file(path, MAX_CONFIG_BYTES)
    except Untrusted as e:
        raise ConfigError(
            f"{path}: refusing this per-user config.toml: {e} (only a file of yours or root's,"
            " that no one else can write, is read; fix it with chown/chmod go-w, or remove it)"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config.toml file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if data is not None and len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config.toml")
    return data


def _merge(base: dict, over: dict) -> dict:
    """`base` with every key of `over` in its place; tables are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) \
            else value
    return out


def parse(data: bytes, path: str = DEFAULT_CONFIG_PATH, from_env: bool = False) -> ToolkitConfig:
    """Parse config.toml bytes into a ToolkitConfig, checking the type of every known key."""
    return _build(_document(data, path), path, from_env, path)


def _document(data: bytes, path: str) -> dict:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    doc = _read_plain_toml(text)
    if doc is None:
        doc = read_toml(text, path)
    return doc


def _build(doc: dict, path: str, from_env: bool, source: str | None) -> ToolkitConfig:
    """The ToolkitConfig of a parsed document, checking the type of every known key."""
    r = _Reader(doc, path)
    warnings, unused = check_keys(doc, path)
    runtime = r.table("nvidia-container-runtime")
    hook = r.table("nvidia-container-runtime-hook")
    cli = r.table("nvidia-container-cli")

    supported = r.string(doc, "supported-driver-capabilities", DEFAULT_SUPPORTED_CAPABILITIES)
    caps = tuple(c.strip() for c in supported.split(",") if c.strip())
    if caps == ("all",):
        caps = ALL_CAPABILITIES
    for c in caps:
        if c not in ALL_CAPABILITIES:
            raise ConfigError(
                f"{path}: key 'supported-driver-capabilities' names unknown capability "
                f"{c!r} (known: {', '.join(sorted(ALL_CAPABILITIES))})"
            )

    runtimes = r.string_list(runtime, "nvidia-container-runtime.runtimes", DEFAULT_RUNTIMES)
    if not runtimes or any(not x for x in runtimes):
        raise ConfigError(
            f"{path}: key 'nvidia-container-runtime.runtimes' must list at least one runtime"
            " name or absolute path, without empty strings"
        )
    log_level = r.string(runtime, "nvidia-container-runtime.log-level", "info")
    log_level = NVIDIA_LOG_LEVELS.get(log_level, log_level)
    if log_level not in LOG_LEVELS:
        raise ConfigError(
            f"{path}: key 'nvidia-container-runtime.log-level' must be one of "
            f"{', '.join(LOG_LEVELS)}, got {log_level!r}"
        )
    mode_given = r.string(runtime, "nvidia-container-runtime.mode", "legacy")
    mode = "direct" if mode_given == "jit-cdi" else mode_given
    if mode not in CONFIG_MODES:
        warnings.append(
            f"key 'nvidia-container-runtime.mode': {mode_given!r} is a mode no NVIDIA release"
            " knows; read as \"auto\""
        )
        mode = "auto"
    cdi = _cdi_settings(r, runtime, path)
    environment = r.string_list(cli, "nvidia-container-cli.environment", ())
    for entry in environment:
        if "=" not in entry or entry.startswith("=") or "\0" in entry:
            raise ConfigError(
                f"{path}: key 'nvidia-container-cli.environment' entries must be NAME=VALUE,"
                f" got {entry!r}"
            )
    cli_path = r.optional_string(cli, "nvidia-container-cli.path")
    hook_path = r.optional_string(hook, "nvidia-container-runtime-hook.path")
    if hook_path == HOOK_NAME:
        hook_path = None  # NVIDIA's default, the hook of this package, found as always
    for key, value in (("nvidia-container-cli.path", cli_path),
                       ("nvidia-container-runtime-hook.path", hook_path)):
        if value is not None and not os.path.isabs(value):
            raise ConfigError(f"{path}: key '{key}' must be an absolute path, got {value!r}")
    cli_root = r.optional_string(cli, "nvidia-container-cli.root")
    # The driver root in every mode is NVIDIA's `[nvidia-container-cli] root`; nvdocker2's
    # older `[nvidia-container-runtime] driver-root` says the same and may not differ from it.
    driver_root = r.optional_string(runtime, "nvidia-container-runtime.driver-root")
    if driver_root and cli_root and os.path.normpath(driver_root) != os.path.normpath(cli_root):
        raise ConfigError(
            f"{path}: key 'nvidia-container-runtime.driver-root' ({driver_root!r}) differs from"
            f" 'nvidia-container-cli.root' ({cli_root!r}); both name the driver root: keep one"
        )

    return ToolkitConfig(
        disable_require=r.boolean(doc, "disable-require", False),
        supported_driver_capabilities=caps,
        accept_envvar_unprivileged=r.boolean(
            doc, "accept-nvidia-visible-devices-envvar-when-unprivileged", True),
        accept_volume_mounts=r.boolean(
            doc, "accept-nvidia-visible-devices-as-volume-mounts", False),
        swarm_resource=r.string(doc, "swarm-resource", ""),
        runtime=RuntimeSettings(
            runtimes=runtimes,
            debug=r.optional_string(runtime, "nvidia-container-runtime.debug"),
            log_level=log_level,
            mode=mode,
            driver_root=driver_root or cli_root or "/",
            mode_given=mode_given,
            csv_mount_spec_path=r.string(
                _modes_csv(runtime), "nvidia-container-runtime.modes.csv.mount-spec-path",
                CSV_MOUNT_SPEC_PATH),
        ),
        cdi=cdi,
        hook=HookSettings(path=hook_path),
        cli=CliSettings(
            path=cli_path,
            root=cli_root,
            ldconfig=r.optional_string(cli, "nvidia-container-cli.ldconfig", "@/sbin/ldconfig"),
            load_kmods=r.boolean(cli, "nvidia-container-cli.load-kmods", True),
            no_cgroups=r.boolean(cli, "nvidia-container-cli.no-cgroups", False),
            user=r.optional_string(cli, "nvidia-container-cli.user"),
            debug=r.optional_string(cli, "nvidia-container-cli.debug"),
            environment=environment,
            ldcache=r.optional_string(cli, "nvidia-container-cli.ldcache"),
            no_pivot=r.boolean(cli, "nvidia-container-cli.no-pivot", False),
        ),
        path=path,
        from_env=from_env,
        source=source,
        warnings=tuple(sorted(warnings)),
        unused=unused,
    )


def _cdi_settings(r: _Reader, runtime: dict, path: str) -> CdiSettings:
    """`[nvidia-container-runtime.modes.cdi]`: absolute spec directories, a `vendor/class`
    default kind and non-empty annotation prefixes, else refused naming the key."""
    from nvdocker2.device_ids import is_kind

    key = "nvidia-container-runtime.modes.cdi"
    modes = runtime.get("modes") if isinstance(runtime.get("modes"), dict) else {}
    table = modes.get("cdi") if isinstance(modes.get("cdi"), dict) else {}
    default = CdiSettings()
    dirs = r.string_list(table, key + ".spec-dirs", default.spec_dirs)
    if any(not d.startswith("/") for d in dirs):
        raise ConfigError(f"{path}: key '{key}.spec-dirs' must list absolute paths, got"
                          f" {list(dirs)!r:.80}")
    kind = r.string(table, key + ".default-kind", default.default_kind)
    if not is_kind(kind):
        raise ConfigError(f"{path}: key '{key}.default-kind' must be a CDI kind like"
                          f" nvidia.com/gpu, got {kind!r:.60}")
    prefixes = r.string_list(table, key + ".annotation-prefixes", default.annotation_prefixes)
    if any(not p for p in prefixes):
        raise ConfigError(f"{path}: key '{key}.annotation-prefixes' may not hold an empty"
                          " prefix (it would take every annotation as a CDI request)")
    return CdiSettings(spec_dirs=tuple(os.path.normpath(d) for d in dirs), default_kind=kind,
                       annotation_prefixes=prefixes)


def _modes_csv(runtime: dict) -> dict:
    """`[nvidia-container-runtime.modes.csv]` (check_keys checked both tables' types)."""
    return runtime.get("modes", {}).get("csv", {})


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


def read_toml(text: str, path: str) -> dict:
    """tomllib's reading of `text` (tomli before Python 3.11); ConfigError naming `path`."""
    if sys.version_info >= (3, 11):
        import tomllib  # novermin: only on 3.11+, tomli below
    else:  # pragma: no cover - exercised on Python < 3.11 only
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")
# Control characters but tab, newline and carriage return (which the reader looks at itself).
_CONTROLS = dict.fromkeys((*range(9), *range(11, 13), *range(14, 32), 127))


def _read_plain_toml(text: str) -> dict | None:
    """The plain subset of TOML config.toml files are written in, or None for anything else.

    Accepted, one per line: blank lines, comments, `[bare-table]` and `[bare.dotted]`
    headers (a table is named by a header at most once, and only before any table below it), and
    `bare-key = VALUE [# comment]` where VALUE is a basic string without escapes, a literal
    string, true, false, a decimal integer, or a one-line array of such strings. Each value
    read is what tomllib reads; any other construct, control character, repeated key or
    table means None, and the caller hands the text to tomllib (which also reports errors).
    """
    doc: dict = {}
    table = doc
    seen_tables: set = set()
    lines = text.split("\n")
    # One pass in C over the whole text; the per-character look only where it may find one.
    controls = len(text.translate(_CONTROLS)) != len(text)
    for number, raw in enumerate(lines):
        line = raw[:-1] if raw.endswith("\r") and number < len(lines) - 1 else raw
        if controls or "\r" in line:
            for ch in line:
                if (ch < " " and ch != "\t") or ch == "\x7f":
                    return None
        line = line.strip(" \t")
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            end = line.find("]")
            if end < 0 or line.startswith("[["):
                return None
            name = line[1:end].strip(" \t")
            rest = line[end + 1:].lstrip(" \t")
            if not name or (rest and rest[0] != "#"):
                return None
            parts = name.split(".")
            if not all(p and _BARE.issuperset(p) for p in parts):
                return None
            table = doc
            for depth, part in enumerate(parts[:-1]):
                parent = ".".join(parts[:depth + 1])
                if part not in table:
                    table[part] = {}
                    seen_tables.add(parent)  # made implicitly: a later [parent] goes to tomllib
                elif parent not in seen_tables or not isinstance(table[part], dict):
                    return None
                table = table[part]
            if name in seen_tables or parts[-1] in table:
                return None
            seen_tables.add(name)
            table[parts[-1]] = {}
            table = table[parts[-1]]
            continue
        key, eq, rest = line.partition("=")
        key = key.strip(" \t")
        if not eq or not key or not _BARE.issuperset(key) or key in table:
            return None
        parsed = _plain_value(rest.lstrip(" \t"))
        if parsed is None:
            return None
        value, rest = parsed
        rest = rest.lstrip(" \t")
        if rest and rest[0] != "#":
            return None
        table[key] = value
    return doc


def _plain_string(s: str):
    """("text", rest) for a leading "basic" (no escapes) or 'literal' string, else None."""
    if not s or s[0] not in "\"'":
        return None
    quote = s[0]
    if s.startswith(quote * 3):
        return None
    end = s.find(quote, 1)
    if end < 0:
        return None
    body = s[1:end]
    if quote == '"' and "\\" in body:
        return None
    return body, s[end + 1:]


def _plain_value(s: str):
    if not s:
        return None
    if s[0] in "\"'":
        return _plain_string(s)
    if s[0] == "[":
        items = []
        rest = s[1:].lstrip(" \t")
        while not rest.startswith("]"):
            parsed = _plain_string(rest)
            if parsed is None:
                return None
            item, rest = parsed
            items.append(item)
            rest = rest.lstrip(" \t")
            if rest.startswith(","):
                rest = rest[1:].lstrip(" \t")
            elif not rest.startswith("]"):
                return None
        return items, rest[1:]
    word = s
    for i, ch in enumerate(s):
        if ch in " \t#":
            word = s[:i]
            break
    rest = s[len(word):]
    if word == "true":
        return True, rest
    if word == "false":
        return False, rest
    digits = word[1:] if word[:1] in "+-" else word
    if digits and _DIGITS.issuperset(digits) and (digits == "0" or digits[0] != "0"):
        return int(word), rest
    return None


class _Reader:
    """Typed access to the parsed TOML that names the key and file on a wrong type."""

    def __init__(self, doc: dict, path: str) -> None:
        self.doc = doc
        self.path = path

    def _wrong(self, key: str, want: str, value: Any) -> ConfigError:
        return ConfigError(
            f"{self.path}: key '{key}' must be {want}, got {type(value).__name__} {value!r}"
        )

    def table(self, name: str) -> dict:
        value = self.doc.get(name, {})
        if not isinstance(value, dict):
            raise self._wrong(name, "a table", value)
        return value

    def _get(self, table: dict, key: str) -> Any:
        return table.get(key.rsplit(".", 1)[-1] if "." in key else key)

    def string(self, table: dict, key: str, default: str) -> str:
        value = self._get(table, key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value

    def optional_string(self, table: dict, key: str, default: str | None = None) -> str | None:
        """A string where "" means unset (as NVIDIA's toolkit treats it)."""
        value = self._get(table, key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value or None

    def boolean(self, table: dict, key: str, default: bool) -> bool:
        value = self._get(table, key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value)
        return value

    def string_list(self, table: dict, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self._get(table, key)
        if value is None:
            return tuple(default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a list of strings", value)
        return tuple(value)
