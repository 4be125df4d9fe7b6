"""daemon.json as bytes ⇄ a document that remembers how the file was written.

The parser (`parser.py`) is our own because the installer must keep what `json.loads` throws
away: where every value sits in the text (so values the edit does not touch are written back
exactly as they were), the indentation, the newline style, duplicate keys, the literal text of
each number, and a plain reason with line and column for every syntax error. This module
detects the style, writes documents back, and loads and parses files.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring, encode_basestring_ascii
from pathlib import Path
from typing import Any

from nvdocker2.engines.docker.daemonjson.parser import (
    DocumentError,
    line_col,
    Node,
    Parser,
)
from nvdocker2.errors import EnvironmentProblem
from nvdocker2.store.codec import JsonFloat

# A piece of the writer's work: ("v", value, node, depth) writes a value, ("s", text) text.
_Work = tuple[Any, ...]
MAX_BYTES = 16 * 1024 * 1024
BOM = b"\xef\xbb\xbf"

_SURROGATE = re.compile("[\ud800-\udfff]")


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
class Document:
    """A parsed daemon.json. `data` is the top-level object: treat it as read-only (the edit
    functions copy); `raw` the bytes read (b"" when the file did not exist)."""

    data: dict[str, Any]
    style: Style = DEFAULT_STYLE
    raw: bytes = b""
    source: str = "<bytes>"
    existed: bool = True
    had_bom: bool = False
    duplicates: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # os.fstat of the file as it was read (load() only): its identity, mode and owner, so
    # the writer can tell whether another program changed it meanwhile (docs/reference.md §8).
    stat: os.stat_result | None = field(default=None, repr=False)
    _text: str = field(default="", repr=False)
    _root: Node | None = field(default=None, repr=False)

    def serialize(self, data: dict[str, Any] | None = None) -> bytes:
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


def _detect_style(text: str, root: Node, data: Any) -> Style:
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

    def splice(self, v: dict[str, Any], nd: Node | None, d: int) -> list[_Work] | None:
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
        parts: list[_Work] = [("s", t[nd.start : keys[first][0]])]
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

    def emit(self, value: Any, node: Node | None, depth: int) -> str:
        """Write `value` at nesting `depth`; reuse the original text when nothing changed.

        Iterative, so even a 1000-deep value cannot exhaust the interpreter's stack.
        """
        out: list[str] = []
        style = self.style
        nl = style.newline
        # Work items: ("v", value, node, depth) to write a value, or ("s", text) to emit text.
        work: list[_Work] = [("v", value, node, depth)]
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
                parts: list[_Work] = []
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
    p = Parser(text, source)
    value, root = p.parse()
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number"
        )
        line, col = line_col(text, root.start)
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


def load(path: str | os.PathLike[str]) -> Document:
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
