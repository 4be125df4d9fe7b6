"""containerd's config.toml: bytes ⇄ values, its version, where it keeps CRI runtimes.

Values are read with tomllib (tomli before 3.11), which gives line and column for syntax
errors; edits that must keep the rest of the file byte for byte are made as text and checked
by parsing the result again (see edit.py). tomlkit is used where a value inside an existing
table must change in place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2.engines.tomlread import tomllib
from nvdocker2.errors import BadInput

MAX_BYTES = 16 << 20
RUNC_V2 = "io.containerd.runc.v2"
# Where each config version keeps the CRI runtimes: plugins.<CRI>.containerd.runtimes.
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
TEMPLATE_HINT = (
    "k3s and RKE2 write config.toml from config.toml.tmpl at every start: add the runtime to "
    "the template by hand (or let k3s find nvidia-container-runtime on PATH), then restart k3s"
)
_TEMPLATE_RE = re.compile(r"\{\{[-\s]*(?:template|\.|if|range|end|define|-)")


@dataclass(frozen=True)
class Config:
    """One parsed config.toml. `data` is the plain value; `text` the exact text."""

    path: Path
    raw: bytes | None
    text: str
    data: dict[str, Any]
    version: int

    @property
    def existed(self) -> bool:
        return self.raw is not None

    @property
    def newline(self) -> str:
        return "\r\n" if "\r\n" in self.text else "\n"

    def cri(self) -> tuple[str, ...]:
        """The key path of the table holding `runtimes` and `default_runtime_name`."""
        return ("plugins", CRI_PLUGIN[self.version], "containerd")

    def imports(self) -> list[str]:
        imp = self.data.get("imports", [])
        return list(imp)


def _where(path: Path, e: Exception) -> str:
    msg = str(e)
    return f"{path}: not valid TOML: {msg}"


def check_template(path: Path, text: str) -> None:
    """Refuse a config that a template regenerates (k3s, RKE2) or that is one."""
    name = path.name
    tmpl = [p for p in (path.parent / (name + ".tmpl"), path.parent / "config-v3.toml.tmpl")
            if p.exists()]
    if name.endswith(".tmpl") or _TEMPLATE_RE.search(text):
        raise BadInput(f"{path}: this is a Go template (k3s/RKE2 config.toml.tmpl), not a "
                       "containerd config", TEMPLATE_HINT)
    if tmpl:
        raise BadInput(f"{path}: it is generated from {tmpl[0]} at every start of k3s/RKE2; "
                       "a change here would be lost", TEMPLATE_HINT)


def parse(path: Path, raw: bytes | None) -> Config:
    """Parse `raw` (None: no file, an empty config version 2) or raise BadInput (exit 2)."""
    if raw is None:
        return Config(path, None, "", {}, 2)
    if len(raw) > MAX_BYTES:
        raise BadInput(f"{path}: {len(raw)} bytes is over the {MAX_BYTES >> 20} MiB limit",
                       "this is not a containerd config; check --config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 (byte {e.start})", "TOML files are UTF-8") from None
    check_template(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(_where(path, e), "fix the file (containerd would not start with it), "
                       "then run again; nothing was changed") from None
    except RecursionError:
        raise BadInput(f"{path}: nested too deeply", "this is not a containerd config") from None
    version = data.get("version", 1)
    if isinstance(version, bool) or version not in (1, 2, 3):
        raise BadInput(f"{path}: version = {version!r}: containerd knows config versions 1, 2 "
                       "and 3", "fix the version line")
    imp = data.get("imports", [])
    if not isinstance(imp, list) or not all(isinstance(i, str) for i in imp):
        raise BadInput(f"{path}: imports must be a list of strings",
                       'e.g. imports = ["/etc/containerd/conf.d/*.toml"]')
    cfg = Config(path, raw, text, data, int(version))
    table_at(cfg.data, cfg.cri() + ("runtimes",), str(path))
    return cfg


def table_at(data: dict[str, Any], keys: tuple[str, ...], where: str) -> dict[str, Any] | None:
    """The table at `keys` (None when some level is missing); BadInput when a level is not a
    table, naming the key."""
    cur: dict[str, Any] = data
    for i, k in enumerate(keys):
        nxt = cur.get(k)
        if nxt is None:
            return None
        if not isinstance(nxt, dict):
            raise BadInput(f"{where}: {dotted(keys[: i + 1])} must be a table, not "
                           f"{type(nxt).__name__}", "fix that key; nothing was changed")
        cur = nxt
    return cur


def quote(key: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dotted(keys: tuple[str, ...] | list[str]) -> str:
    return ".".join(quote(k) for k in keys)


def merged(cfg: Config, imported: list[Config], deep: bool) -> dict[str, Any]:
    """The plugins an engine would run: root then imports in order; containerd ≤ 1.7 replaces a
    whole plugin section with an import's, 2.x merges tables key by key."""
    out: dict[str, Any] = deep_copy(cfg.data)
    for imp in imported:
        plugins = imp.data.get("plugins", {})
        if not isinstance(plugins, dict):
            continue
        dst = out.setdefault("plugins", {})
        for name, section in plugins.items():
            if deep and isinstance(section, dict) and isinstance(dst.get(name), dict):
                _deep_merge(dst[name], section)
            else:
                dst[name] = deep_copy(section)
    return out


def deep_copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: deep_copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [deep_copy(x) for x in v]
    return v


def _deep_merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_merge(dst[k], v)
        else:
            dst[k] = deep_copy(v)
