"""daemon.json's parser: an iterative one (a hostile file cannot cause a RecursionError)
that records where every value sits in the text, duplicate keys and the literal text of each
number, and says what is wrong with line and column (`DocumentError`). Strings are decoded by
the standard library's scanner. `document` turns what it finds into a Document and a Style.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from json import JSONDecodeError, decoder
from typing import Any, Callable

from nvdocker2.errors import BadInput
from nvdocker2.store.codec import JsonFloat  # numbers keep their literal; shared with the journal

# (text, index after the opening quote, strict) -> (the string, index after its closing quote)
scanstring: Callable[[str, int, bool], tuple[str, int]] = (
    decoder.scanstring)  # type: ignore[attr-defined]  # typeshed's json.decoder leaves it out
MAX_DEPTH = 1000
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


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


@dataclass(frozen=True, eq=False)
class Node:
    """Where a parsed value sits in the text; `children` is a dict (object) or list (array)."""

    start: int
    end: int
    value: Any
    children: Any = None
    # Objects only: key -> (start, end) of the key string as written (its last occurrence);
    # `dups` the keys that occur more than once.
    keys: Any = None
    dups: frozenset[str] = frozenset()


def line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _describe(text: str, pos: int) -> str:
    if pos >= len(text):
        return "end of file"
    return repr(text[pos])


class Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.n = len(text)
        self.source = source
        self.duplicates: list[str] = []

    def fail(self, pos: int, reason: str, hint: str | None = None) -> DocumentError:
        line, col = line_col(self.text, pos)
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

    def parse(self) -> tuple[Any, Node]:
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
                    node = Node(start, pos, value, {} if is_obj else [], {} if is_obj else None)
                else:
                    # [is_obj, start, container, child nodes, key, key span, key spans, dups]
                    frame: list[Any] = [is_obj, start, {} if is_obj else [],
                                        {} if is_obj else [], None, (0, 0), {}, set()]
                    stack.append(frame)
                    if is_obj:
                        if pos < n and t[pos] == "]":
                            raise self.fail(pos, "']' closes an object opened with '{'")
                        frame[4], frame[5], pos = self.key(pos)
                    continue
            elif c == '"':
                value, end = self.string(pos)
                node = Node(pos, end, value)
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
                node = Node(pos, m.end(), value)
                pos = m.end()
            elif t.startswith("true", pos):
                value, node = True, Node(pos, pos + 4, True)
                pos += 4
            elif t.startswith("false", pos):
                value, node = False, Node(pos, pos + 5, False)
                pos += 5
            elif t.startswith("null", pos):
                value, node = None, Node(pos, pos + 4, None)
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
                    node = Node(frame[1], pos, value, frame[3], frame[6] if is_obj else None,
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
