"""config.toml of the runtime shim and the hook (SPEC §3), stdlib only.

The runtime and the hook run on every container start, so this module imports nothing but the
standard library (tomllib, or tomli on Python < 3.11, imported only when a file is parsed).
A missing file means defaults; a malformed file or a value of the wrong type is refused with
one line naming the file and the key. Keys this project does not know are ignored: real hosts
carry config.toml files written for NVIDIA's own toolkit, with many more sections.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
CONFIG_ENV = "NVIDIA_CONTAINER_RUNTIME_CONFIG"
MAX_CONFIG_BYTES = 1024 * 1024

# Every driver capability libnvidia-container knows, in the order SPEC §4 gives its flags.
ALL_CAPABILITIES = ("compute", "utility", "video", "graphics", "display", "compat32", "ngx")
DEFAULT_SUPPORTED_CAPABILITIES = "compat32,compute,display,graphics,ngx,utility,video"
DEFAULT_RUNTIMES = ("docker-runc", "runc", "crun")
LOG_LEVELS = ("debug", "info", "warning", "error")
MODES = ("legacy", "direct")


class ConfigError(Exception):
    """config.toml cannot be used; the message is one line naming the file and the key."""


@dataclass(frozen=True)
class RuntimeSettings:
    """`[nvidia-container-runtime]`."""

    runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
    debug: str | None = None
    log_level: str = "info"
    mode: str = "legacy"
    driver_root: str = "/"


@dataclass(frozen=True)
class HookSettings:
    """`[nvidia-container-runtime-hook]`."""

    path: str | None = None


@dataclass(frozen=True)
class CliSettings:
    """`[nvidia-container-cli]`: how the hook calls libnvidia-container."""

    path: str | None = None
    root: str | None = None
    ldconfig: str | None = "@/sbin/ldconfig"
    load_kmods: bool = True
    no_cgroups: bool = False
    user: str | None = None
    debug: str | None = None
    environment: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolkitConfig:
    """The whole config.toml, with defaults for what the file does not say.

    `source` is the file it was read from (None when no file existed: pure defaults) and
    `path`/`from_env` say which file was asked for and whether NVIDIA_CONTAINER_RUNTIME_CONFIG
    named it (the runtime then passes `--config` to the hook it injects).
    """

    disable_require: bool = False
    supported_driver_capabilities: tuple[str, ...] = tuple(
        DEFAULT_SUPPORTED_CAPABILITIES.split(",")
    )
    accept_envvar_unprivileged: bool = True
    accept_volume_mounts: bool = False
    swarm_resource: str = ""
    runtime: RuntimeSettings = RuntimeSettings()
    hook: HookSettings = HookSettings()
    cli: CliSettings = CliSettings()
    path: str = DEFAULT_CONFIG_PATH
    from_env: bool = False
    source: str | None = None


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


def load(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> ToolkitConfig:
    """Read the config file chosen by `config_path`; defaults when it does not exist."""
    path, from_env = config_path(explicit, environ)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return ToolkitConfig(path=path, from_env=from_env)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config.toml file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config.toml")
    return parse(data, path=path, from_env=from_env)


def parse(data: bytes, path: str = DEFAULT_CONFIG_PATH, from_env: bool = False) -> ToolkitConfig:
    """Parse config.toml bytes into a ToolkitConfig, checking the type of every known key."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python < 3.11 only
        import tomli as tomllib
    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    r = _Reader(doc, path)
    runtime = r.table("nvidia-container-runtime")
    hook = r.table("nvidia-container-runtime-hook")
    cli = r.table("nvidia-container-cli")

    supported = r.string(doc, "supported-driver-capabilities", DEFAULT_SUPPORTED_CAPABILITIES)
    caps = tuple(c.strip() for c in supported.split(",") if c.strip())
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
    if log_level not in LOG_LEVELS:
        raise ConfigError(
            f"{path}: key 'nvidia-container-runtime.log-level' must be one of "
            f"{', '.join(LOG_LEVELS)}, got {log_level!r}"
        )
    mode = r.string(runtime, "nvidia-container-runtime.mode", "legacy")
    if mode not in MODES:
        raise ConfigError(
            f"{path}: key 'nvidia-container-runtime.mode' must be \"legacy\" or \"direct\","
            f" got {mode!r}"
        )
    environment = r.string_list(cli, "nvidia-container-cli.environment", ())
    for entry in environment:
        if "=" not in entry or entry.startswith("=") or "\0" in entry:
            raise ConfigError(
                f"{path}: key 'nvidia-container-cli.environment' entries must be NAME=VALUE,"
                f" got {entry!r}"
            )
    cli_path = r.optional_string(cli, "nvidia-container-cli.path")
    hook_path = r.optional_string(hook, "nvidia-container-runtime-hook.path")
    for key, value in (("nvidia-container-cli.path", cli_path),
                       ("nvidia-container-runtime-hook.path", hook_path)):
        if value is not None and not os.path.isabs(value):
            raise ConfigError(f"{path}: key '{key}' must be an absolute path, got {value!r}")

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
            driver_root=r.string(runtime, "nvidia-container-runtime.driver-root", "/") or "/",
        ),
        hook=HookSettings(path=hook_path),
        cli=CliSettings(
            path=cli_path,
            root=r.optional_string(cli, "nvidia-container-cli.root"),
            ldconfig=r.optional_string(cli, "nvidia-container-cli.ldconfig", "@/sbin/ldconfig"),
            load_kmods=r.boolean(cli, "nvidia-container-cli.load-kmods", True),
            no_cgroups=r.boolean(cli, "nvidia-container-cli.no-cgroups", False),
            user=r.optional_string(cli, "nvidia-container-cli.user"),
            debug=r.optional_string(cli, "nvidia-container-cli.debug"),
            environment=environment,
        ),
        path=path,
        from_env=from_env,
        source=path,
    )


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
