"""JSON for the per-container hot path, without importing the json package.

json's decoder and encoder compile regular expressions when imported, and `re` was the
largest import left in the runtime's `create` and in the hook (about 5 ms of CPU each, every
container start). This module drives the C accelerator `_json` that json itself uses, with
json.loads' settings and json.dumps(ensure_ascii=False, separators=(",", ":")); where `_json`
is missing or does not take these arguments (another Python), it falls back to json itself.
Errors are ValueError (json.JSONDecodeError is one) or RecursionError, as with json.
"""

from __future__ import annotations

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _DecoderSettings:
    """What `_json.make_scanner` reads from a json.JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


def _no_default(obj):
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _accelerators():
    try:
        import _json

        scanner = _json.make_scanner(_DecoderSettings)
        encoder = _json.make_encoder(
            {}, _no_default, _json.encode_basestring, None, ":", ",", False, False, True)
        return scanner, encoder
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - other Pythons
        return None, None


_scan, _encode = _accelerators()


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WHITESPACE:
        i += 1
    return i


def loads(data: bytes | str):
    """json.loads for UTF-8 bytes or text."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = _skip(text, 0)
    try:
        obj, end = _scan(text, start)
    except (StopIteration, SystemError):
        # Invalid JSON. _json builds its error from json.decoder, which is not imported
        # here (SystemError then); json itself gives the exact message.
        return _json_loads(text)
    end = _skip(text, end)
    if end != len(text):
        return _json_loads(text)
    return obj


def _json_loads(text: str):
    import json

    return json.loads(text)


def dumps(obj) -> str:
    """json.dumps(obj, ensure_ascii=False, separators=(",", ":"))."""
    if _encode is None:  # pragma: no cover
        import json

        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return "".join(_encode(obj, 0))
