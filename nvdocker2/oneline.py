"""An error is exactly one line (docs/reference.md §8): control characters are escaped.

Text from files, argv or the environment ends up in error and hint lines; a newline, carriage
return or escape sequence in it would split the error in two or rewrite the terminal. Every
place that prints an `error:`/`hint:`/`warning:` line passes the text through `one_line`.
Standard library only, and no import at all: the runtime shim and the hook use it on every
container start.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0 controls, DEL, C1 controls (U+0085 is a line break to some readers) and the Unicode line
# and paragraph separators, which str.splitlines() also breaks on. Made at the first error, not
# at import: the runtime imports this module on every container start and rarely needs it.
_CONTROLS = (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
_table: dict[int, str] = {}


def one_line(text: object) -> str:
    """`text` (any object, as str()) with every control character written as an escape."""
    if not _table:
        _table.update((code, _escape(code)) for code in _CONTROLS)
    return str(text).translate(_table)
