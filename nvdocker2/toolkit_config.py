"""config.toml of the runtime shim and the hook (docs/reference.md §3), stdlib only.

The runtime and the hook run on every container start, so this module imports os and sys and
nothing else of the standard library at import time. Here: which files are read and their
bytes, their text as values, and the values as a `ToolkitConfig` (each known key type-checked,
each value checked for what it means). What a file may say (the keys, their types, defaults,
`ConfigError`, the records) is nvdocker2.toolkit_schema; every public name of either is
importable from here.

A missing file means defaults; a malformed file or a value of the wrong type is refused with
one line naming the file and the key. Every key some release of NVIDIA's toolkit writes or
reads is known here (`NVIDIA_KEYS`, docs/nvidia-toolkit.md): its
type is checked, and it has NVIDIA's meaning or is listed by `doctor` as not used, with why
(`NOT_USED`). A key no NVIDIA release knows is a warning (`ToolkitConfig.warnings`), never a
refusal.

Start-up cost decides two choices here (each saves about 10 ms of CPU per container start,
measured with `python3 -I -S`): results are `Record`s, not dataclasses (importing dataclasses
pulls in inspect, ast and re), and a file in the plain subset of TOML that config.toml files
use (tables, `key = "string" | 'string' | true | false | integer | [strings]`, comments) is
read by `read_plain_toml`; anything else goes to tomllib (tomli on Python < 3.11), so the
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

from nvdocker2.toolkit_schema import (
    ALL_CAPABILITIES as ALL_CAPABILITIES,
    BOOL as BOOL,
    CDI_SPEC_DIRS as CDI_SPEC_DIRS,
    CONFIG_ENV as CONFIG_ENV,
    CONFIG_MODES as CONFIG_MODES,
    CSV_MOUNT_SPEC_PATH as CSV_MOUNT_SPEC_PATH,
    DEFAULT_CONFIG_PATH as DEFAULT_CONFIG_PATH,
    DEFAULT_RUNTIMES as DEFAULT_RUNTIMES,
    DEFAULT_SUPPORTED_CAPABILITIES as DEFAULT_SUPPORTED_CAPABILITIES,
    HOOK_NAME as HOOK_NAME,
    LOG_LEVELS as LOG_LEVELS,
    MAX_CONFIG_BYTES as MAX_CONFIG_BYTES,
    MODES as MODES,
    NOT_USED as NOT_USED,
    NVIDIA_KEYS as NVIDIA_KEYS,
    NVIDIA_LOG_LEVELS as NVIDIA_LOG_LEVELS,
    OWN_KEYS as OWN_KEYS,
    SERVED_MODES as SERVED_MODES,
    STR as STR,
    STRS as STRS,
    TABLE as TABLE,
    USER_CONFIG as USER_CONFIG,
    ConfigError as ConfigError,
    check_keys as check_keys,
    CdiSettings as CdiSettings,
    CliSettings as CliSettings,
    HookSettings as HookSettings,
    Record as Record,
    RuntimeSettings as RuntimeSettings,
    ToolkitConfig as ToolkitConfig,
)

TYPE_CHECKING = False  # typing itself costs milliseconds at every container start
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Mapping


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
    doc = read_plain_toml(text)
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


def read_plain_toml(text: str) -> dict | None:
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
