"""Line-level edits of a TOML text that keep every byte they do not change: render a runtime
table, set or delete one key in place, find and drop a table by its header. nvdocker2's
containerd edits (edit.py) go through these, and check every result by parsing it."""

from __future__ import annotations

import re
from typing import Any

import tomlkit

from nvdocker2.changes import ABSENT
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.tomlread import tomllib


def toml_value(v: Any) -> str:
    s: str = tomlkit.item(v).as_string()
    return s


def _indent(line: str) -> str:
    """The spaces and tabs that `line` starts with."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def render_table(prefix: tuple[str, ...], table: dict[str, Any], indent: str, nl: str) -> str:
    """`[prefix]` with its plain keys, then its sub-tables, containerd's indented style."""
    lines = [f"{indent}[{D.dotted(prefix)}]"]
    subs = []
    for k, v in table.items():
        if isinstance(v, dict):
            subs.append((k, v))
        else:
            lines.append(f"{indent}  {D.quote(k)} = {toml_value(v)}")
    out = nl.join(lines) + nl
    for k, v in subs:
        out += nl + render_table(prefix + (k,), v, indent + "  ", nl)
    return out


def header_indent(text: str, keys: tuple[str, ...]) -> str:
    m = re.search(r"^([ \t]*)\[" + re.escape(D.dotted(keys)), text, re.MULTILINE)
    return m.group(1) if m else ""


def has_header(text: str, keys: tuple[str, ...]) -> bool:
    return re.search(r"^[ \t]*\[" + re.escape(D.dotted(keys)) + r"\][ \t]*(#.*)?$", text,
                     re.MULTILINE) is not None


def tk_set(text: str, keys: tuple[str, ...], value: Any) -> str:
    """Set (or with ABSENT delete) one key in place; the rest keeps its layout.

    A one-line key of a table with its own [header] is edited as a line (a new key goes after
    the table's last line, indented like its siblings), so deleting what was set gives back the
    bytes before on every tomlkit (newer ones add a blank line after an inserted key). Other
    layouts go through tomlkit.
    """
    edited = _line_set(text, keys, value)
    if edited is not None:
        return edited
    doc = tomlkit.parse(text)
    cur: Any = doc
    for k in keys[:-1]:
        if k not in cur:
            cur[k] = tomlkit.table(is_super_table=True)
        cur = cur[k]
    if value is ABSENT:
        if keys[-1] in cur:
            del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return tomlkit.dumps(doc)


def _line_set(text: str, keys: tuple[str, ...], value: Any) -> str | None:
    """`tk_set` as a line edit (adding a key, or deleting a one-line key), or None when
    tomlkit must do it."""
    if value is not ABSENT and not isinstance(value, (str, bool, int)) and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines)
                  if line.lstrip().startswith("[") and _header_keys(line) == keys[:-1]), None)
    if start is None:
        return None
    end = next((j for j in range(start + 1, len(lines)) if lines[j].lstrip().startswith("[")),
               len(lines))
    key_re = re.compile(r"([ \t]*)" + re.escape(keys[-1]) + r"[ \t]*=")
    nl = "\r\n" if lines[start].endswith("\r\n") else "\n"
    rendered = f"{keys[-1]} = {tomlkit.item(value).as_string()}" if value is not ABSENT else ""
    for i in range(start + 1, end):
        if not key_re.match(lines[i]):
            continue
        if value is not ABSENT:
            return None  # a new value for a key that is there: tomlkit keeps its comment
        try:
            tomllib.loads(lines[i])
        except tomllib.TOMLDecodeError:
            return None  # a value over several lines
        ending = lines[i][len(lines[i].rstrip("\r\n")):]
        if not ending and i > 0:  # the file's last line, without a newline: take the
            del lines[i]            # newline before it too
            lines[i - 1] = lines[i - 1].rstrip("\r\n")
        else:
            del lines[i]
        return "".join(lines)
    if value is ABSENT:
        return text
    last = max((i for i in range(start, end) if lines[i].strip()), default=start)
    siblings = [_indent(lines[i])
                for i in range(start + 1, end) if lines[i].strip()
                and not lines[i].lstrip().startswith("#")]
    # Without siblings, the key goes one step in from an indented header (containerd's style).
    head = _indent(lines[start])
    indent = siblings[0] if siblings else (head + "  " if head else "")
    if lines[last].endswith("\n"):
        lines.insert(last + 1, indent + rendered + nl)
    else:
        lines.insert(last + 1, nl + indent + rendered)
    return "".join(lines)


_HEADER = re.compile(r"^[ \t]*\[([^\[\]]+)\][ \t]*(#.*)?$")


def _header_keys(line: str) -> tuple[str, ...] | None:
    m = _HEADER.match(line.rstrip("\r\n"))
    if not m:
        return None
    try:
        d: Any = tomllib.loads(f"[{m.group(1)}]")
    except tomllib.TOMLDecodeError:
        return None
    keys = []
    while isinstance(d, dict) and len(d) == 1:
        k = next(iter(d))
        keys.append(k)
        d = d[k]
    return tuple(keys)


def drop_table(text: str, keys: tuple[str, ...]) -> str:
    """Remove the table `keys` and its sub-tables (headers and their lines) as text, with the
    blank lines before it; tomlkit when the table is not laid out as headers."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    dropping = False
    found = False
    # Comment and blank lines after the dropped table's last line belong to what follows (a
    # note someone wrote above the next table, or at the end): they stay.
    held: list[str] = []
    for line in lines:
        hk = _header_keys(line) if line.lstrip().startswith("[") else None
        if hk is not None:
            was = dropping
            dropping = hk[: len(keys)] == keys
            if dropping:
                found = True
                held = []
                while out and not out[-1].strip():
                    out.pop()
                if out and not out[-1].endswith("\n"):
                    out[-1] += "\n"
            elif was:
                out += held
                held = []
        if not dropping:
            out.append(line)
        elif hk is None and (not line.strip() or line.lstrip().startswith("#")):
            held.append(line)
        else:
            held = []
    if any(ln.strip() for ln in held):
        out += held
    if not found:
        return tk_set(text, keys, ABSENT)
    return "".join(out)


def _parses(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def loads_or(text: str, fallback: dict[str, Any]) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return fallback
