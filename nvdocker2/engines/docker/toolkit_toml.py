"""One key of a runtime config.toml, set by install and put back by uninstall: the edit behind
the rootless `[nvidia-container-cli] no-cgroups` (rootless.py) and `install --mode`
(runtime_mode.py). Each is a file of the daemon.json transaction: backed up, written
atomically, restored with daemon.json; what the key held before is in daemon.json's journal.

Edits go through tomlkit, which keeps comments and layout; the result is parsed again and must
differ from the old document in that one key alone, and the runtime must read it. The journal
record keeps the key's old TOML text too (`'legacy'  # why`), so uninstall gives back the
bytes as they were. tomlkit is imported only where a file is edited: every Docker command
imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvdocker2 import toolkit_config
from nvdocker2.changes import ABSENT, Change
from nvdocker2.errors import BadInput
from nvdocker2.store.journal import slot, unslot


def _hint(path: Path) -> str:
    return f"fix {path} by hand, then run again; nothing was changed"


def parse(raw: bytes | None, path: Path) -> tuple[Any, dict[str, Any]]:
    """(tomlkit document, plain dict) of the file's bytes (None: no file)."""
    import tomlkit

    try:
        text = "" if raw is None else raw.decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text ({e.reason})", _hint(path)) from None
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as e:
        raise BadInput(f"{path}: invalid TOML: {e}", _hint(path)) from None
    try:
        return doc, toolkit_config.read_toml(text, str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), _hint(path)) from None


def table_of(doc: dict[str, Any], table: str, path: Path) -> Any:
    """The plain table `table` of `doc` (ABSENT: none); BadInput when it is not a table."""
    value = doc.get(table, ABSENT)
    if value is not ABSENT and not isinstance(value, dict):
        raise BadInput(f"{path}: key '{table}' must be a table, got {type(value).__name__}",
                       _hint(path))
    return value


def current(raw: bytes | None, path: Path, table: str, key: str) -> Any:
    """What `[table] key` holds in the file's bytes (ABSENT: not set, or no file)."""
    t = table_of(parse(raw, path)[1], table, path)
    return ABSENT if t is ABSENT else t.get(key, ABSENT)


def _checked(new_text: str, expected: dict[str, Any], path: Path, table: str, key: str,
             runtime_reads: bool = True) -> bytes:
    """`new_text`, after checking it holds `expected` (old with one key changed) and, unless
    it puts back what was there (`runtime_reads` False), that the runtime reads it."""
    data = new_text.encode("utf-8")
    # tomlkit keeps the other keys as they were: this refusal is a safety net.
    if toolkit_config.read_toml(new_text, str(path)) != expected:  # pragma: no cover
        raise BadInput(f"{path}: cannot change [{table}] {key} without touching other keys",
                       f"edit {path} by hand")
    if not runtime_reads:
        return data
    try:
        toolkit_config.parse(data, str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), _hint(path)) from None
    return data


def _label(path: Path, table: str, key: str) -> str:
    return f"{path}: [{table}] {key}"


def set_key(raw: bytes | None, path: Path, table: str, key: str, value: Any
            ) -> tuple[bytes | None, Change, dict[str, Any] | None]:
    """(new bytes, the change, the journal record of what it replaced; None: unchanged).

    The record: {"path", "previous": SLOT, "previous_toml": the old value's TOML text (with
    its comment), "installed": value, "file": the file existed, "table": the table existed,
    "dir": the directory existed}."""
    import tomlkit

    doc, old = parse(raw, path)
    t = table_of(old, table, path)
    before = ABSENT if t is ABSENT else t.get(key, ABSENT)
    label = _label(path, table, key)
    if before == value and type(before) is type(value):
        return raw, Change(label, "unchanged", before, value), None
    old_item = None if before is ABSENT else doc[table][key]
    previous_toml = getattr(old_item, "as_string", lambda: None)()
    if t is ABSENT:
        doc.add(table, tomlkit.table())
    # A new item, not the value: newer tomlkit would keep a replaced string's quotes (a
    # literal 'legacy' gives 'direct'), older tomlkit writes "direct"; one form everywhere.
    doc[table][key] = tomlkit.string(value) if isinstance(value, str) else value
    expected = dict(old)
    expected[table] = {**(t or {}), key: value}
    new = _checked(tomlkit.dumps(doc), expected, path, table, key)
    record = {"path": str(path), "previous": slot(before), "installed": value,
              "file": raw is not None, "table": t is not ABSENT, "dir": path.parent.is_dir()}
    if previous_toml is not None:
        record["previous_toml"] = previous_toml
    return new, Change(label, "added" if before is ABSENT else "replaced", before, value), record


def put_back(raw: bytes | None, record: dict[str, Any], path: Path, table: str, key: str,
             installed: Any) -> tuple[bytes | None, Change | None, str | None]:
    """(bytes after undoing install's `record`, the change, a warning when it is left alone).

    The key goes back to what it held before install (its old TOML text where recorded),
    unless someone changed it since from `installed`; a table or file install created goes
    away again when nothing else is left in it."""
    import tomlkit

    if raw is None:
        return None, None, None
    label = _label(path, table, key)
    doc, old = parse(raw, path)
    t = table_of(old, table, path)
    now = ABSENT if t is ABSENT else t.get(key, ABSENT)
    if now != installed or type(now) is not type(installed):
        shown = "not set" if now is ABSENT else tomlkit.item(now).as_string()
        return raw, None, (f"{label} is {shown} now, not the "
                           f"{tomlkit.item(installed).as_string()} install wrote: left as it is")
    previous = unslot(record.get("previous"))
    expected = dict(old)
    rest = {k: v for k, v in t.items() if k != key}
    if previous is ABSENT:
        del doc[table][key]
        if not rest and not record.get("table", True):
            del doc[table]
            del expected[table]
        else:
            expected[table] = rest
    else:
        doc[table][key] = _item(record.get("previous_toml"), previous)
        expected[table] = {**rest, key: previous}
    text = tomlkit.dumps(doc)
    if table not in doc and text.endswith("\n\n"):
        text = text.rstrip("\n") + "\n"  # the blank line tomlkit put above the table
    change = Change(label, "removed" if previous is ABSENT else "replaced", installed, previous)
    if not record.get("file", True) and not text.strip():
        return None, change, None
    return _checked(text, expected, path, table, key, runtime_reads=False), change, None


def _item(toml_text: Any, value: Any) -> Any:
    """The recorded old value as tomlkit wrote it (quotes, comment), when that text still
    reads as `value`; else `value` itself."""
    import tomlkit

    if not isinstance(toml_text, str):
        return value
    try:
        item = tomlkit.parse(f"x = {toml_text}\n")["x"]
    except tomlkit.exceptions.ParseError:
        return value
    return item if item == value else value
