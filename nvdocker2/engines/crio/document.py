"""CRI-O's drop-in as a document: nvdocker2's own /etc/crio/crio.conf.d/99-nvidia.conf.

The file is ours alone (it starts with `MARK`; a file that does not is refused), so it is
rendered from its data: the same runtimes always give the same bytes. `parse` gives plain data
or BadInput naming the file and the key of the wrong type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit

from nvdocker2.errors import BadInput
from nvdocker2.oneline import one_line

MARK = "# Written by nvdocker2; `nvdocker2 uninstall --engine crio` removes this file.\n"
RUNTIMES = "crio.runtime.runtimes"
DEFAULT_KEY = "crio.runtime.default_runtime"


def runtime_table(path: str) -> dict[str, Any]:
    return {"runtime_path": path, "runtime_type": "oci"}


def render(data: dict[str, Any]) -> bytes | None:
    """The drop-in's bytes for `data` (None: no runtime left, so no file)."""
    if not data.get("crio", {}).get("runtime", {}).get("runtimes"):
        return None
    return (MARK + tomlkit.dumps(data)).encode()


def _table(data: dict[str, Any], key: str, where: str, path: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise BadInput(f"{path}: {where} is a {type(value).__name__}, not a table",
                       f"fix {where} in that file, or remove the file and install again")
    return value


def parse(path: Path, raw: bytes | None) -> dict[str, Any]:
    """Our drop-in as plain data ({} when there is none); BadInput when it is not ours, not
    TOML, or holds a value of the wrong type where the runtimes go."""
    if raw is None:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or not text.startswith(MARK):
        raise BadInput(f"{path} exists and was not written by nvdocker2",
                       "move it away or pass --config with another drop-in name")
    try:
        data = tomlkit.parse(text).unwrap()
    except Exception as e:  # tomlkit's ParseError and the errors of its older releases
        raise BadInput(f"{path}: not valid TOML: {one_line(e)}",
                       "fix the file, or remove it and install again") from None
    rt = _table(_table(data, "crio", "crio", path), "runtime", "crio.runtime", path)
    for name, entry in _table(rt, "runtimes", RUNTIMES, path).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("runtime_path", ""), str):
            raise BadInput(f"{path}: {RUNTIMES}.{one_line(name)} is not a table with a string "
                           "runtime_path", "fix that table, or remove the file and install again")
    if not isinstance(rt.get("default_runtime", ""), str):
        raise BadInput(f"{path}: {DEFAULT_KEY} is not a string",
                       "fix it, or remove the file and install again")
    return data


def runtimes(data: dict[str, Any]) -> dict[str, Any]:
    """The runtime tables in `data` (name -> table)."""
    found: dict[str, Any] = data.get("crio", {}).get("runtime", {}).get("runtimes", {})
    return found


def default_name(data: dict[str, Any]) -> str | None:
    """The default_runtime `data` sets, or None."""
    name: str | None = data.get("crio", {}).get("runtime", {}).get("default_runtime")
    return name
