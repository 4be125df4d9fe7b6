"""Set `[nvidia-container-runtime] mode` in config.toml, keeping every other byte.

`nvdocker2 install --mode direct|legacy` changes one setting in a file operators also edit
by hand (comments, order, other tables), so the file is edited as text: the `mode` line of
the table is replaced, or added right under the table header, or the table is appended.
The result is parsed again and must equal the old document with only that key changed;
anything this line editor cannot handle safely (a dotted `nvidia-container-runtime.mode`
key, an inline table) is refused instead of guessed.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

from nvdocker2.direct.errors import DirectError
from nvdocker2.toolkit_config import MODES

TABLE = "nvidia-container-runtime"

_HEADER = re.compile(
    r'^\s*\[\s*(?:"nvidia-container-runtime"|nvidia-container-runtime)\s*\]\s*(#.*)?$'
)
_ANY_HEADER = re.compile(r"^\s*\[")
_MODE = re.compile(r"^(\s*)mode(\s*)=(\s*)(\"[^\"]*\"|'[^']*')(.*)$")


def parse(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DirectError(f"{where}: not valid TOML: {err}", f"fix {where} by hand first") from err


def set_mode(text: str, mode: str, where: str = "config.toml") -> str:
    """`text` with `[nvidia-container-runtime] mode = "MODE"`; raises `DirectError`."""
    if mode not in MODES:
        raise DirectError(f"unknown mode {mode!r}", "use --mode direct or --mode legacy")
    old = parse(text, where)
    table = old.get(TABLE, {})
    if not isinstance(table, dict):
        raise DirectError(f"{where}: {TABLE} is not a table")
    if table.get("mode") == mode:
        return text
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    new_line = f'mode = "{mode}"{newline}'
    header = next((i for i, ln in enumerate(lines) if _HEADER.match(ln.rstrip("\r\n"))), None)
    if header is None:
        sep = "" if not text or text.endswith(("\n", "\r\n")) else newline
        blank = newline if text.strip() else ""
        result = f"{text}{sep}{blank}[{TABLE}]{newline}{new_line}"
    else:
        end = next(
            (i for i in range(header + 1, len(lines)) if _ANY_HEADER.match(lines[i])), len(lines)
        )
        for i in range(header + 1, end):
            m = _MODE.match(lines[i].rstrip("\r\n"))
            if m:
                eol = lines[i][len(lines[i].rstrip("\r\n")):] or newline
                lines[i] = f'{m.group(1)}mode{m.group(2)}={m.group(3)}"{mode}"{m.group(5)}{eol}'
                break
        else:
            if not lines[header].endswith(("\n", "\r")):
                lines[header] += newline
            lines.insert(header + 1, new_line)
        result = "".join(lines)
    expected = dict(old)
    expected[TABLE] = {**table, "mode": mode}
    try:
        same = tomllib.loads(result) == expected
    except tomllib.TOMLDecodeError:
        same = False
    if not same:
        raise DirectError(
            f"{where}: cannot set {TABLE}.mode without rewriting other lines",
            f'set mode = "{mode}" in the [{TABLE}] table by hand',
        )
    return result
