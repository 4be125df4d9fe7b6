"""daemon.json as bytes ⇄ a document that remembers how the file was written.

The parser is our own (iterative, so a hostile file cannot cause a RecursionError) because the
installer must keep what `json.loads` throws away: where every value sits in the text (so
values the edit does not touch are written back exactly as they were), the indentation, the
newline style, duplicate keys, the literal text of each number, and a plain reason with line
and column for every syntax error. Strings are decoded by the standard library's scanner.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field, replace
from json import JSONDecodeError
from json.decoder import scanstring
from json.encoder import encode_basestring, encode_basestring_ascii
from pathlib import Path
from typing import Any

from nvdocker2.errors import BadInput, EnvironmentProblem

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 1000
BOM = b"\xef\xbb\xbf"

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonFloat(float):
    """A JSON number with a fraction or exponent: compares as a float, writes back its literal.

    `1.0e400` stays `1.0e400` (the float is inf) and `0.10` stays `0.10`.
    """

    text: str

    def __new__(cls, text: str) -> "JsonFloat":
        self = super().__new__(cls, text)
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text

    def __deepcopy__(self, memo: dict) -> "JsonFloat":
        return self

    def __copy__(self) -> "JsonFloat":
        return self

    def __reduce__(self) -> tuple:
        return (JsonFloat, (self.text,))


class DocumentError(BadInput):
    """daemon.json cannot be read as a JSON object; `line`/`column` are 1-based when known."""

    def __init__(
        self,
        source: str,
        reason: str,
        hint: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = f"{source} line {line}, column {column}: " if line is not None else f"{source}: "
        super().__init__(where + reason, hint or f"fix {source} by hand; nothing was changed")
        self.source = source
        self.reason = reason
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Style:
    """How a file is written. `indent` None means everything on one line."""

    indent: str | None = "    "
    newline: str = "\n"
    key_sep: str = ": "
    item_sep: str = ", "
    prefix: str = ""
    suffix: str = "\n"
    ensure_ascii: bool = False

    @property
    def final_newline(self) -> bool:
        return self.suffix.endswith("\n")

    def describe(self) -> str:
        if self.indent is None:
            ind = "one line"
        elif self.indent == "\t":
            ind = "tab indent"
        else:
            ind = f"{len(self.indent)}-space indent" if self.indent.strip(" ") == "" else "indent"
        nl = "CRLF" if self.newline == "\r\n" else "LF"
        fin = "final newline" if self.final_newline else "no final newline"
        return f"{ind}, {nl}, {fin}"


DEFAULT_STYLE = Style()


@dataclass(frozen=True, eq=False)
class _Node:
    """Where a parsed value sits in the text; `children` is a dict (object) or list (array)."""

    start: int
    end: int
    value: Any
    children: Any = None
    # Objects only: key -> (start, end) of the key string as written (its last occurrence);
    # `dups` the keys that occur more than once.
    keys: Any = None
    dups: frozenset = frozenset()


@dataclass(frozen=True, eq=False)
class Document:
    """A parsed daemon.json. `data` is the top-level object: treat it as read-only (the edit
    functions copy); `raw` the bytes read (b"" when the file did not exist)."""

    data: dict
    style: Style = DEFAULT_STYLE
    raw: bytes = b""
    source: str = "<bytes>"
    existed: bool = True
    had_bom: bool = False
    duplicates: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # os.fstat of the file as it was read (load() only): its identity, mode and owner, so
    # the writer can tell whether another program changed it meanwhile (SPEC §8).
    stat: os.stat_result | None = field(default=None, repr=False)
    _text: str = field(default="", repr=False)
    _root: _Node | None = field(default=None, repr=False)

    def serialize(self, data: dict | None = None) -> bytes:
        """The bytes for `data` (default: this document's own data) in this file's style.

        Values equal to what the file held are copied from the original text, so everything the
        edit did not touch keeps its exact layout, escapes and number literals.
        """
        if data is None:
            data = self.data
        style = self.style
        body = _Writer(style, self._text).emit(data, self._root, 0)
        return (style.prefix + body + style.suffix).encode("utf-8")

    @property
    def changed_by_loading(self) -> bool:
        """True when writing the unchanged data would still change the bytes (BOM, empty file)."""
        return self.serialize() != self.raw


def same(a: Any, b: Any) -> bool:
    """Deep equality that also requires equal types and key order (1 ≠ 1.0 ≠ true).

    Iterative: values may be nested 1000 deep.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x.keys()) != list(y.keys()):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, JsonFloat):
            if x.text != y.text:
                return False
        elif x != y:
            return False
    return True


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _describe(text: str, pos: int) -> str:
    if pos >= len(text):
        return "end of file"
    return repr(text[pos])


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.n = len(text)
        self.source = source
        self.duplicates: list[str] = []

    def fail(self, pos: int, reason: str, hint: str | None = None) -> DocumentError:
        line, col = _line_col(self.text, pos)
        return DocumentError(self.source, reason, hint, line, col)

    def ws(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def unexpected(self, pos: int, expected: str) -> DocumentError:
        """Name the most likely mistake at `pos` in words a person recognises."""
        t = self.text
        if pos >= self.n:
            return self.fail(
                pos,
                f"unexpected end of file, expected {expected} (the file is truncated)",
                f"complete or restore {self.source}; it ends in the middle of the JSON",
            )
        c = t[pos]
        if t.startswith("//", pos) or t.startswith("/*", pos) or c == "#":
            return self.fail(
                pos,
                "comments are not allowed in JSON",
                "remove the comment; dockerd refuses files with comments",
            )
        for word in ("NaN", "Infinity", "-Infinity"):
            if t.startswith(word, pos):
                return self.fail(
                    pos,
                    f"{word} is not a valid JSON value",
                    "use a number or a string; dockerd refuses NaN and Infinity",
                )
        if c == "'":
            return self.fail(
                pos,
                "strings must use double quotes, found a single quote",
                "replace the single quotes with double quotes",
            )
        if c == "\ufeff":
            return self.fail(pos, "byte order mark (U+FEFF) inside the file", "remove it")
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*").match(t, pos)
        if m and expected.startswith("a property name"):
            return self.fail(
                pos,
                f"property name {m.group(0)} is not in double quotes",
                f'write it as "{m.group(0)}"',
            )
        if m:
            return self.fail(
                pos,
                f"unexpected word {m.group(0)!r}, expected {expected}",
                'JSON values are objects, arrays, "strings", numbers, true, false or null',
            )
        return self.fail(pos, f"unexpected {_describe(t, pos)}, expected {expected}")

    @staticmethod
    def path(stack: list[list[Any]]) -> str:
        """The dotted path of the value being parsed in the innermost frame."""
        parts = [str(f[4]) if f[0] else str(len(f[2])) for f in stack]
        return ".".join(parts)

    def key(self, pos: int) -> tuple[str, tuple[int, int], int]:
        """Parse `"key" :` at pos; returns (key, key_pos, position after the colon and space)."""
        t = self.text
        if pos >= self.n or t[pos] != '"':
            raise self.unexpected(pos, "a property name in double quotes")
        key, end = self.string(pos)
        p = self.ws(end)
        if p >= self.n or t[p] != ":":
            raise self.unexpected(p, "':' after the property name")
        return key, (pos, end), self.ws(p + 1)

    def string(self, pos: int) -> tuple[str, int]:
        try:
            return scanstring(self.text, pos + 1, True)
        except JSONDecodeError as e:
            msg = e.msg
            if msg.startswith("Unterminated string"):
                if "\n" in self.text[pos + 1 :]:
                    raise self.fail(
                        pos,
                        "string is not closed on its line",
                        "add the missing double quote (a newline inside a string must be \\n)",
                    ) from None
                raise self.fail(
                    pos,
                    "unterminated string (the file is truncated)",
                    f"complete or restore {self.source}",
                ) from None
            if msg.startswith("Invalid control character"):
                raise self.fail(
                    e.pos,
                    "control character inside a string",
                    "write a newline as \\n and a tab as \\t inside strings",
                ) from None
            if msg.startswith("Invalid \\escape") or msg.startswith("Invalid \\u"):
                raise self.fail(
                    e.pos,
                    "invalid escape sequence in a string",
                    "a backslash in a string must be written \\\\",
                ) from None
            raise self.fail(e.pos, msg) from None

    def parse(self) -> tuple[Any, _Node]:
        t = self.text
        n = self.n
        pos = self.ws(0)
        # Each frame: [is_object, start, container, children, key, key_pos]
        stack: list[list[Any]] = []
        while True:
            c = t[pos] if pos < n else ""
            if c == "{" or c == "[":
                if len(stack) >= MAX_DEPTH:
                    raise self.fail(
                        pos,
                        f"nesting deeper than {MAX_DEPTH} levels",
                        "this is not a daemon.json; restore it from a backup",
                    )
                is_obj = c == "{"
                closer = "}" if is_obj else "]"
                start = pos
                pos = self.ws(pos + 1)
                if pos < n and t[pos] == closer:
                    pos += 1
                    value: Any = {} if is_obj else []
                    node = _Node(start, pos, value, {} if is_obj else [], {} if is_obj else None)
                else:
                    # [is_obj, start, container, child nodes, key, key span, key spans, dups]
                    frame = [is_obj, start, {} if is_obj else [], {} if is_obj else [], None,
                             (0, 0), {}, set()]
                    stack.append(frame)
                    if is_obj:
                        if pos < n and t[pos] == "]":
                            raise self.fail(pos, "']' closes an object opened with '{'")
                        frame[4], frame[5], pos = self.key(pos)
                    continue
            elif c == '"':
                value, end = self.string(pos)
                node = _Node(pos, end, value)
                pos = end
            elif c == "-" or c.isdigit():
                m = _NUMBER.match(t, pos)
                if m is None or (m.end() < n and (t[m.end()].isalnum() or t[m.end()] == ".")):
                    if t.startswith("-Infinity", pos):
                        raise self.unexpected(pos, "a value")
                    bad = m.end() if m else pos
                    raise self.fail(bad if m else pos, "malformed number")
                lit = m.group(0)
                value = JsonFloat(lit) if (m.group(1) or m.group(2)) else int(lit)
                node = _Node(pos, m.end(), value)
                pos = m.end()
            elif t.startswith("true", pos):
                value, node = True, _Node(pos, pos + 4, True)
                pos += 4
            elif t.startswith("false", pos):
                value, node = False, _Node(pos, pos + 5, False)
                pos += 5
            elif t.startswith("null", pos):
                value, node = None, _Node(pos, pos + 4, None)
                pos += 4
            else:
                if stack and c and c in "}]":
                    raise self.fail(pos, f"unexpected {c!r}, expected a value")
                raise self.unexpected(pos, "a value")

            # A value is complete: attach it, closing containers as far as they end here.
            while True:
                if not stack:
                    end = self.ws(pos)
                    if end < n:
                        if t[end] == "\x00" and t[end:].strip("\x00 \t\r\n") == "":
                            raise self.fail(
                                end,
                                "NUL bytes after the end of the JSON",
                                f"remove them (the file was probably cut off or padded); "
                                f"{self.source} was not changed",
                            )
                        raise self.fail(
                            end,
                            f"unexpected {_describe(t, end)} after the end of the top-level value",
                            "remove everything after the final closing brace",
                        )
                    return value, node
                frame = stack[-1]
                is_obj = frame[0]
                closer = "}" if is_obj else "]"
                if is_obj:
                    k = frame[4]
                    if k in frame[2]:
                        self.duplicates.append(self.path(stack))
                        del frame[2][k]
                        del frame[3][k]
                        del frame[6][k]
                        frame[7].add(k)
                    frame[2][k] = value
                    frame[3][k] = node
                    frame[6][k] = frame[5]
                else:
                    frame[2].append(value)
                    frame[3].append(node)
                pos = self.ws(pos)
                c = t[pos] if pos < n else ""
                if c == ",":
                    comma = pos
                    pos = self.ws(pos + 1)
                    if pos < n and t[pos] in "}]":
                        raise self.fail(
                            comma,
                            "trailing comma",
                            "remove the comma before the closing "
                            + ("brace" if t[pos] == "}" else "bracket"),
                        )
                    if is_obj:
                        frame[4], frame[5], pos = self.key(pos)
                    break
                if c == closer:
                    pos += 1
                    stack.pop()
                    value = frame[2]
                    node = _Node(frame[1], pos, value, frame[3], frame[6] if is_obj else None,
                                 frozenset(frame[7]))
                    continue
                if c and c in "}]":
                    raise self.fail(
                        pos, f"{c!r} does not match the {'{' if is_obj else '['} it closes"
                    )
                if c == '"' or (c and (c.isalnum() or c in "{[-")):
                    raise self.fail(
                        pos,
                        f"missing comma between {'properties' if is_obj else 'array elements'}",
                        "add a comma after the previous value",
                    )
                raise self.unexpected(pos, f"',' or {closer!r}")


def _detect_style(text: str, root: _Node, data: Any) -> Style:
    prefix = text[: root.start]
    suffix = text[root.end :]
    newline = "\r\n" if "\r\n" in text else "\n"
    key_sep = ": "
    item_sep = ", "
    indent: str | None = "    "
    children = root.children if isinstance(root.children, dict) else {}
    if children:
        # ws "key" ws : ws — the first member as written (its key may repeat later).
        m = re.compile(r'([ \t\r\n]*)"(?:[^"\\]|\\.)*"([ \t]*:[ \t]*)').match(text, root.start + 1)
        if m:
            lead, sep = m.group(1), m.group(2)
            key_sep = sep if sep in (": ", ":", " : ", " :") else ": "
            if "\n" in lead:
                indent = lead.rsplit("\n", 1)[1]
            else:
                indent = None
        if indent is None:
            m2 = re.search(r",([ \t]*)\"", text[root.start : root.end])
            item_sep = "," + (m2.group(1) if m2 else " ")
            if item_sep not in (",", ", "):
                item_sep = ", "
    raw_non_ascii = any(ord(ch) > 127 for ch in text)
    has_escape = re.search(
        r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})", text
    )
    ensure_ascii = bool(has_escape) and not raw_non_ascii
    return Style(
        indent=indent,
        newline=newline,
        key_sep=key_sep,
        item_sep=item_sep,
        prefix=prefix if prefix.strip() == "" else "",
        suffix=suffix,
        ensure_ascii=ensure_ascii,
    )


class _Writer:
    def __init__(self, style: Style, text: str) -> None:
        self.style = style
        self.text = text

    def scalar(self, v: Any) -> str:
        if v is True:
            return "true"
        if v is False:
            return "false"
        if v is None:
            return "null"
        if isinstance(v, str):
            s = encode_basestring_ascii(v) if self.style.ensure_ascii else encode_basestring(v)
            return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group(0)), s)
        if isinstance(v, JsonFloat):
            return v.text
        if isinstance(v, int):
            return int.__repr__(v)
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise ValueError("NaN and Infinity cannot be written as JSON")
            return float.__repr__(v)
        raise TypeError(f"cannot write {type(v).__name__} as JSON")

    def splice(self, v: dict, nd: _Node | None, d: int) -> list[tuple] | None:
        """Work items that rewrite a changed object by editing its original text: members kept
        keep their key, separator and surrounding whitespace exactly as written; removed ones
        go with the separator before them; new ones are appended in the object's own layout.
        The earlier occurrences of a duplicate key stay as written (they sit in the text between
        the members kept; dockerd, like any Go program, reads the last one, which is the one
        edited). None when the object cannot be spliced: new, reordered keys, or a removed key
        that occurs more than once (all its occurrences must go, or an earlier one would take
        effect)."""
        if nd is None or not isinstance(nd.children, dict) or not nd.keys:
            return None
        t = self.text
        orig = list(nd.children)
        kept = [k for k in orig if k in v]
        if nd.dups and any(k not in v for k in nd.dups):
            return None
        added = [k for k in v if k not in nd.children]
        if not kept or list(v) != kept + added:
            return None
        kids, keys = nd.children, nd.keys
        one_line = "\n" not in t[nd.start : nd.end]

        def sep_before(k: str) -> str:
            i = orig.index(k)
            return t[kids[orig[i - 1]].end : keys[k][0]]

        first, last = orig[0], orig[-1]
        parts: list[tuple] = [("s", t[nd.start : keys[first][0]])]
        for i, k in enumerate(kept):
            if i:
                parts.append(("s", sep_before(k)))
            parts.append(("s", t[keys[k][0] : kids[k].start]))
            parts.append(("v", v[k], kids[k], d + 1))
        if added:
            lk = kept[-1]
            key_sep = t[keys[lk][1] : kids[lk].start]
            if "\n" in key_sep:
                key_sep = self.style.key_sep
            if len(orig) >= 2:
                sep = sep_before(last)
            elif one_line or self.style.indent is None:
                sep = self.style.item_sep
            else:
                sep = "," + self.style.newline + self.style.indent * (d + 1)
            fresh = _Writer(replace(self.style, indent=None), "") if one_line else self
            for k in added:
                parts.append(("s", sep + fresh.scalar(k) + key_sep))
                if fresh is self:
                    parts.append(("v", v[k], None, d + 1))
                else:
                    parts.append(("s", fresh.emit(v[k], None, 0)))
        parts.append(("s", t[kids[last].end : nd.end]))
        return parts

    def emit(self, value: Any, node: _Node | None, depth: int) -> str:
        """Write `value` at nesting `depth`; reuse the original text when nothing changed.

        Iterative, so even a 1000-deep value cannot exhaust the interpreter's stack.
        """
        out: list[str] = []
        style = self.style
        nl = style.newline
        # Work items: ("v", value, node, depth) to write a value, or ("s", text) to emit text.
        work: list[tuple] = [("v", value, node, depth)]
        while work:
            item = work.pop()
            if item[0] == "s":
                out.append(item[1])
                continue
            _, v, nd, d = item
            if nd is not None and same(v, nd.value):
                out.append(self.text[nd.start : nd.end])
                continue
            if isinstance(v, dict):
                if not v:
                    out.append("{}")
                    continue
                spliced = self.splice(v, nd, d)
                if spliced is not None:
                    work.extend(reversed(spliced))
                    continue
                kids = nd.children if (nd is not None and isinstance(nd.children, dict)) else {}
                parts: list[tuple] = []
                if style.indent is None:
                    parts.append(("s", "{"))
                    for i, (k, cv) in enumerate(v.items()):
                        if i:
                            parts.append(("s", style.item_sep))
                        parts.append(("s", self.scalar(k) + style.key_sep))
                        parts.append(("v", cv, kids.get(k), d + 1))
                    parts.append(("s", "}"))
                else:
                    inner = nl + style.indent * (d + 1)
                    parts.append(("s", "{"))
                    for i, (k, cv) in enumerate(v.items()):
                        parts.append(
                            ("s", ("," if i else "") + inner + self.scalar(k) + style.key_sep)
                        )
                        parts.append(("v", cv, kids.get(k), d + 1))
                    parts.append(("s", nl + style.indent * d + "}"))
                work.extend(reversed(parts))
            elif isinstance(v, list):
                if not v:
                    out.append("[]")
                    continue
                kids_l = nd.children if (nd is not None and isinstance(nd.children, list)) else []
                parts = []
                if style.indent is None:
                    parts.append(("s", "["))
                    for i, cv in enumerate(v):
                        if i:
                            parts.append(("s", style.item_sep))
                        parts.append(("v", cv, kids_l[i] if i < len(kids_l) else None, d + 1))
                    parts.append(("s", "]"))
                else:
                    inner = nl + style.indent * (d + 1)
                    parts.append(("s", "["))
                    for i, cv in enumerate(v):
                        parts.append(("s", ("," if i else "") + inner))
                        parts.append(("v", cv, kids_l[i] if i < len(kids_l) else None, d + 1))
                    parts.append(("s", nl + style.indent * d + "]"))
                work.extend(reversed(parts))
            else:
                out.append(self.scalar(v))
        return "".join(out)


def dumps(data: Any, style: Style = DEFAULT_STYLE) -> str:
    """`data` written fresh in `style` (no original text reused): prefix, value and suffix."""
    return style.prefix + _Writer(style, "").emit(data, None, 0) + style.suffix


def inline(value: Any) -> str:
    """`value` on one line, as daemon.json would hold it (for messages); repr() for what
    JSON cannot hold."""
    try:
        return dumps(value, Style(indent=None, suffix=""))
    except (TypeError, ValueError):
        return repr(value)


def parse(data: bytes, source: str = "<bytes>") -> Document:
    """Parse daemon.json bytes. Empty or whitespace-only input is `{}` in the default style.

    Raises DocumentError (exit 2) with line and column for anything dockerd would refuse to
    read, and for a top level that is not an object.
    """
    raw = data
    had_bom = data.startswith(BOM)
    if had_bom:
        data = data[len(BOM) :]
    if len(raw) > MAX_BYTES:
        raise DocumentError(
            source,
            f"file is {len(raw)} bytes, over the {MAX_BYTES // (1024 * 1024)} MiB limit",
            "this is not a daemon.json; restore it from a backup",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        off = e.start + (len(BOM) if had_bom else 0)
        line = raw.count(b"\n", 0, off) + 1
        col = off - (raw.rfind(b"\n", 0, off) + 1) + 1
        hint = "save the file as UTF-8"
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            hint = (
                "the file looks UTF-16 encoded; save it as UTF-8 (dockerd 20.10 reads UTF-8 only)"
            )
        raise DocumentError(
            source, f"invalid UTF-8 at byte offset {off}", hint, line, col
        ) from None
    warnings: list[str] = []
    if had_bom:
        warnings.append(f"{source}: UTF-8 byte order mark dropped (dockerd 20.10 refuses it)")
    if text.strip(" \t\r\n") == "":
        if text:
            warnings.append(f"{source}: file holds only whitespace; treated as {{}}")
        elif raw or had_bom:
            warnings.append(f"{source}: file is empty; treated as {{}}")
        style = DEFAULT_STYLE
        if "\r\n" in text:
            style = Style(newline="\r\n", suffix="\r\n")
        return Document(
            data={},
            style=style,
            raw=raw,
            source=source,
            existed=True,
            had_bom=had_bom,
            warnings=tuple(warnings),
            _text="",
            _root=None,
        )
    p = _Parser(text, source)
    value, root = p.parse()
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number"
        )
        line, col = _line_col(text, root.start)
        raise DocumentError(
            source,
            f"the top level is {kind}, but daemon.json must be a JSON object",
            "the file must start with { and end with }",
            line,
            col,
        )
    dups: list[str] = []
    for k in p.duplicates:
        if k not in dups:
            dups.append(k)
    if dups:
        names = ", ".join(f'"{k}"' for k in dups)
        warnings.append(
            f"{source}: duplicate key(s) {names}: dockerd reads the last one, nvdocker2 "
            "edits the last one and keeps the earlier ones as written"
        )
    style = _detect_style(text, root, value)
    return Document(
        data=value,
        style=style,
        raw=raw,
        source=source,
        existed=True,
        had_bom=had_bom,
        duplicates=tuple(dups),
        warnings=tuple(warnings),
        _text=text,
        _root=root,
    )


def empty(source: str = "<new>") -> Document:
    """The document for a file that does not exist: `{}`, 4 spaces, final newline."""
    return Document(data={}, style=DEFAULT_STYLE, raw=b"", source=source, existed=False)


def load(path: str | os.PathLike) -> Document:
    """Read and parse `path`. A missing file is `{}` (`existed` False).

    Refuses (exit 2) a directory, a dangling symlink, something that is not a regular file,
    a file over 16 MiB; a file it may not read is an environment problem (exit 3).
    """
    p = Path(path)
    src = str(p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            target = os.readlink(p)
            raise DocumentError(
                src,
                f"is a symlink to {target}, which does not exist",
                f"create {target} (e.g. containing {{}}) or remove the dangling link",
            ) from None
        return empty(src)
    except NotADirectoryError:
        raise DocumentError(src, "a component of the path is not a directory") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DocumentError(src, "is a symlink loop", f"point {src} at a real file") from None
        if isinstance(e, PermissionError):
            raise EnvironmentProblem(
                f"{src}: permission denied ({e.strerror})", "run as root (sudo nvdocker2 ...)"
            ) from None
        raise EnvironmentProblem(f"{src}: cannot read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise DocumentError(
            src, "is a directory, not a file", f"remove the directory {src} or pass --config FILE"
        )
    if not stat.S_ISREG(st.st_mode):
        raise DocumentError(src, "is not a regular file", f"replace {src} with a regular file")
    if st.st_size > MAX_BYTES:
        raise DocumentError(
            src,
            f"file is {st.st_size} bytes, over the {MAX_BYTES // (1024 * 1024)} MiB limit",
            "this is not a daemon.json; restore it from a backup",
        )
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(MAX_BYTES + 1)
    except PermissionError as e:
        raise EnvironmentProblem(
            f"{src}: permission denied ({e.strerror})", "run as root (sudo nvdocker2 ...)"
        ) from None
    except IsADirectoryError:
        raise DocumentError(src, "is a directory, not a file") from None
    except OSError as e:
        raise EnvironmentProblem(f"{src}: cannot read: {e.strerror}") from None
    return replace(parse(data, src), stat=st)
