"""The journal's codec: strict JSON, read by the standard library's parser, numbers kept to the
letter.

Why not daemon.json's parser: daemon.json is a file people write, so its parser
(engines/docker/daemonjson) keeps what they wrote (indentation, newlines, a BOM, duplicate keys
dockerd accepts) and names the line and column of a mistake. The journal is written by
nvdocker2 alone, for every engine, into root's state directory: whatever is not exactly what
`dumps` writes (a BOM, a duplicate key, NaN, a top level other than an object, bytes that are
not UTF-8) means the file is damaged, and `loads` refuses it (ValueError) rather than guess.
What both share is `JsonFloat`: a number with a fraction or an exponent keeps its literal
(`0.10`, `1.0e400`), so what uninstall puts back into daemon.json is the text it replaced.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 900  # the standard library's parser recurses: deeper is refused when written


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

    def __deepcopy__(self, memo: dict[int, Any]) -> "JsonFloat":
        return self

    def __copy__(self) -> "JsonFloat":
        return self

    def __reduce__(self) -> tuple[type[JsonFloat], tuple[str]]:
        return (JsonFloat, (self.text,))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a duplicate key")
    return out


def loads(data: bytes) -> dict[str, Any]:
    """The object `data` holds; ValueError when it is not strict JSON as `dumps` writes it."""
    try:
        value = json.loads(data.decode("utf-8"), parse_float=JsonFloat,
                           parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("the top level is not an object")
    return value


def dumps(value: dict[str, Any]) -> bytes:
    """`value` as JSON indented by two spaces, ending in a newline; a JsonFloat as its literal.
    ValueError (NaN, infinity, deeper than MAX_DEPTH) or TypeError (not JSON) before any byte
    is returned."""
    out: list[str] = []
    # Work items: a value to write at a depth, or text to write as it is.
    stack: list[tuple[Any, int] | str] = [(value, 0)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        v, depth = item
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, (dict, list)) and v:
            inner, outer = "\n" + "  " * (depth + 1), "\n" + "  " * depth
            opening, closing = ("{", "}") if isinstance(v, dict) else ("[", "]")
            members = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            todo: list[tuple[Any, int] | str] = [opening]
            for i, (k, member) in enumerate(members):
                if isinstance(v, dict) and not isinstance(k, str):
                    raise TypeError(f"a key of type {type(k).__name__}")
                key = json.dumps(k) + ": " if isinstance(v, dict) else ""
                todo += [("," if i else "") + inner + key, (member, depth + 1)]
            todo.append(outer + closing)
            stack.extend(reversed(todo))
        elif isinstance(v, (dict, list)):
            out.append("{}" if isinstance(v, dict) else "[]")
        elif isinstance(v, JsonFloat):
            out.append(v.text)
        elif isinstance(v, (str, int, float)) or v is None:  # bool is an int
            out.append(json.dumps(v, allow_nan=False))
        else:
            raise TypeError(f"cannot write {type(v).__name__} as JSON")
    return ("".join(out) + "\n").encode()
