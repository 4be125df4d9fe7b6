"""Whether a document conforms to the packaged schema, answered without jsonschema.

Importing jsonschema costs more than the rest of `nvdocker2 install`; a daemon.json almost
always conforms, and then jsonschema would report nothing. `conforms()` answers True or False
only where its answer is jsonschema's (validate.py's Draft 7 with dockerd's "integer"), for the
keywords the schema uses; any other keyword or value makes it answer None, and validate.py
asks jsonschema, which also words the errors of a document that does not conform.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

# Keywords that say nothing about validity (annotations and where definitions live).
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "definitions",
                          "default", "examples", "x-since", "x-removed-in"})


class _Unsure(Exception):
    """The schema or the document holds something this module does not decide."""


def conforms(schema: Any, instance: Any) -> Optional[bool]:
    """jsonschema's verdict on `instance` against `schema` (True: no error), or None where
    this module cannot be sure of it."""
    try:
        return _valid(schema, instance, schema)
    except (_Unsure, RecursionError):
        return None


def _valid(schema: Any, v: Any, root: Mapping[str, Any]) -> bool:
    if schema is True or schema is False:
        return schema
    if not isinstance(schema, dict):
        raise _Unsure
    if "$ref" in schema:  # Draft 7: a $ref's siblings are ignored; ours has none
        if set(schema) - _ANNOTATIONS != {"$ref"}:
            raise _Unsure
        return _valid(_resolve(schema["$ref"], root), v, root)
    for keyword, want in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        check = _KEYWORDS.get(keyword)
        if check is None:
            raise _Unsure
        if not check(want, v, schema, root):
            return False
    return True


def _resolve(ref: Any, root: Mapping[str, Any]) -> Any:
    prefix = "#/definitions/"
    if not isinstance(ref, str) or not ref.startswith(prefix):
        raise _Unsure
    name = ref[len(prefix):]
    defs = root.get("definitions")
    if "/" in name or "~" in name or "%" in name or not isinstance(defs, dict) \
            or name not in defs:
        raise _Unsure
    return defs[name]


def _is_number(v: Any) -> bool:
    """jsonschema's "number": any number but a bool; only Python's own are decided here."""
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, (str, list, dict)) or v is None:
        return False
    raise _Unsure


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # dockerd's integer (validate.py): a number written without fraction or exponent
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": _is_number,
}


def _type(want: Any, v: Any, schema: Any, root: Any) -> bool:
    names = want if isinstance(want, list) else [want]
    for name in names:
        if not isinstance(name, str) or name not in _TYPES:
            raise _Unsure
    return any(_TYPES[name](v) for name in names)


def _properties(want: Any, v: Any, schema: Any, root: Any) -> bool:
    if not isinstance(want, dict):
        raise _Unsure
    if not isinstance(v, dict):
        return True
    return all(_valid(sub, v[k], root) for k, sub in want.items() if k in v)


def _additional(want: Any, v: Any, schema: Any, root: Any) -> bool:
    if "patternProperties" in schema or not isinstance(schema.get("properties", {}), dict):
        raise _Unsure
    if not isinstance(v, dict):
        return True
    named = schema.get("properties", {})
    return all(_valid(want, x, root) for k, x in v.items() if k not in named)


def _required(want: Any, v: Any, schema: Any, root: Any) -> bool:
    if not isinstance(want, list) or not all(isinstance(k, str) for k in want):
        raise _Unsure
    return not isinstance(v, dict) or all(k in v for k in want)


def _items(want: Any, v: Any, schema: Any, root: Any) -> bool:
    if isinstance(want, list):  # the tuple form, with additionalItems: not in our schema
        raise _Unsure
    return not isinstance(v, list) or all(_valid(want, x, root) for x in v)


def _bound(fails: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def check(want: Any, v: Any, schema: Any, root: Any) -> bool:
        if isinstance(want, bool) or not isinstance(want, (int, float)):
            raise _Unsure
        return not _is_number(v) or not fails(v, want)
    return check


def _min_length(want: Any, v: Any, schema: Any, root: Any) -> bool:
    if isinstance(want, bool) or not isinstance(want, int):
        raise _Unsure
    return not isinstance(v, str) or len(v) >= want


def _enum(want: Any, v: Any, schema: Any, root: Any) -> bool:
    # Only enums of strings: jsonschema's equality (1 is not true) is then plain `in`.
    if not isinstance(want, list) or not all(isinstance(x, str) for x in want):
        raise _Unsure
    return isinstance(v, str) and v in want


def _not(want: Any, v: Any, schema: Any, root: Any) -> bool:
    return not _valid(want, v, root)


def _subschemas(want: Any) -> list[Any]:
    if not isinstance(want, list) or not want:
        raise _Unsure
    return want


def _any_of(want: Any, v: Any, schema: Any, root: Any) -> bool:
    return any([_valid(sub, v, root) for sub in _subschemas(want)])


def _one_of(want: Any, v: Any, schema: Any, root: Any) -> bool:
    return [_valid(sub, v, root) for sub in _subschemas(want)].count(True) == 1


_KEYWORDS: dict[str, Callable[[Any, Any, Any, Any], bool]] = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "required": _required,
    "items": _items,
    "minimum": _bound(lambda v, m: v < m),  # jsonschema's own tests, so NaN passes as there
    "maximum": _bound(lambda v, m: v > m),
    "minLength": _min_length,
    "enum": _enum,
    "not": _not,
    "anyOf": _any_of,
    "oneOf": _one_of,
}
