"""The runtime's per-user config.toml that install edits for a rootless Docker (reference §3).

A rootless dockerd's user cannot write device cgroups, so its GPU containers need
`[nvidia-container-cli] no-cgroups = true`. Root's global config.toml is shared with every
rootful engine of the host and is never touched here: the key goes into the user's own
`$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml` (else `~/.config/...`), which the
runtime reads over the global file only when it runs rootless. It is the second file of the
daemon.json transaction (backed up, written atomically, put back with daemon.json); what it
held before is recorded in daemon.json's journal, and uninstall puts that back only while the
key still holds what install wrote.

Edits go through tomlkit, which keeps comments and layout; the result is parsed again and must
differ from the old document in that one key alone. tomlkit is imported only where a file is
edited: every Docker command imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from nvdocker2 import locations, toolkit_config
from nvdocker2.changes import ABSENT, Change
from nvdocker2.errors import BadInput
from nvdocker2.store.journal import slot, unslot

TABLE = "nvidia-container-cli"
KEY = "no-cgroups"
JOURNAL_KEY = "user_config"  # in daemon.json's journal record


def install_path(env: Mapping[str, str] | None = None, euid: int | None = None) -> Path | None:
    """The per-user config.toml an install edits: only when Docker is rootless for this user
    (not root, `$XDG_RUNTIME_DIR/docker.sock` exists); None otherwise."""
    if locations.rootless_socket(env, euid) is None:
        return None
    path = toolkit_config.user_config_path(env)
    return Path(path) if path else None


def check_trusted(path: Path) -> None:
    """BadInput unless the runtime would read the file (the same trust checks): writing into a
    file it refuses would not help, and keeping its mode would keep it refused."""
    try:
        toolkit_config.read_user_file(str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), f"fix or remove {path}, then run install again; nothing was "
                               "changed") from None


def _parse(raw: bytes | None, path: Path) -> tuple[Any, dict]:
    """(tomlkit document, plain dict) of the file's bytes (None: no file)."""
    import tomlkit

    text = "" if raw is None else raw.decode("utf-8", "strict")
    hint = f"fix {path} by hand, then run again; nothing was changed"
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as e:
        raise BadInput(f"{path}: invalid TOML: {e}", hint) from None
    try:
        return doc, toolkit_config.read_toml(text, str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), hint) from None


def _table(doc: dict, path: Path) -> Any:
    value = doc.get(TABLE, ABSENT)
    if value is not ABSENT and not isinstance(value, dict):
        raise BadInput(f"{path}: key '{TABLE}' must be a table, got {type(value).__name__}",
                       f"fix {path} by hand, then run again; nothing was changed")
    return value


def _checked(new_text: str, expected: dict, path: Path) -> bytes:
    """`new_text`, after checking it holds `expected` (old with one key changed) and that the
    runtime reads it."""
    data = new_text.encode("utf-8")
    # tomlkit keeps the other keys as they were: this refusal is a safety net.
    if toolkit_config.read_toml(new_text, str(path)) != expected:  # pragma: no cover
        raise BadInput(f"{path}: cannot change [{TABLE}] {KEY} without touching other keys",
                       f"edit {path} by hand")
    try:
        toolkit_config.parse(data, str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), f"fix {path} by hand, then run again; nothing was "
                               "changed") from None
    return data


def set_no_cgroups(raw: bytes | None, path: Path) -> tuple[bytes | None, Change, dict | None]:
    """(new bytes, the change, the journal record of what it replaced; None: unchanged)."""
    import tomlkit

    doc, old = _parse(raw, path)
    table = _table(old, path)
    before = ABSENT if table is ABSENT else table.get(KEY, ABSENT)
    key = f"{path}: [{TABLE}] {KEY}"
    if before is True:
        return raw, Change(key, "unchanged", True, True), None
    if table is ABSENT:
        doc.add(TABLE, tomlkit.table())
    doc[TABLE][KEY] = True
    expected = dict(old)
    expected[TABLE] = {**(table or {}), KEY: True}
    new = _checked(tomlkit.dumps(doc), expected, path)
    record = {"path": str(path), "previous": slot(before), "file": raw is not None,
              "table": table is not ABSENT, "dir": path.parent.is_dir()}
    return new, Change(key, "added" if before is ABSENT else "replaced", before, True), record


def put_back(raw: bytes | None, record: dict, path: Path
             ) -> tuple[bytes | None, Change | None, str | None]:
    """(bytes after undoing install's `record`, the change, a warning when it is left alone).

    The key goes back to what it held before install, unless someone changed it since; a
    table or file install created goes away again when nothing else is left in it."""
    import tomlkit

    key = f"{path}: [{TABLE}] {KEY}"
    if raw is None:
        return None, None, None
    doc, old = _parse(raw, path)
    table = _table(old, path)
    now = ABSENT if table is ABSENT else table.get(KEY, ABSENT)
    if now is not True:
        shown = "not set" if now is ABSENT else tomlkit.item(now).as_string()
        return raw, None, f"{key} is {shown} now, not the true install wrote: left as it is"
    previous = unslot(record.get("previous"))
    expected = dict(old)
    rest = {k: v for k, v in table.items() if k != KEY}
    if previous is ABSENT:
        del doc[TABLE][KEY]
        if not rest and not record.get("table", True):
            del doc[TABLE]
            del expected[TABLE]
        else:
            expected[TABLE] = rest
    else:
        doc[TABLE][KEY] = previous
        expected[TABLE] = {**rest, KEY: previous}
    text = tomlkit.dumps(doc)
    if TABLE not in doc and text.endswith("\n\n"):
        text = text.rstrip("\n") + "\n"  # the blank line tomlkit put above the table
    change = Change(key, "removed" if previous is ABSENT else "replaced", True, previous)
    if not record.get("file", True) and not text.strip():
        return None, change, None
    return _checked(text, expected, path), change, None
