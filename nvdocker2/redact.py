"""Credentials in URLs (`scheme://user:password@host`) are masked in everything nvdocker2 prints:
diffs and the before/after text of --json at their source, and every other line (results,
warnings, errors, status, doctor) by `mask_standard_streams`, which the CLI installs first. The
file and its backups keep them.

The mask is Docker's own (`docker info` shows a proxy as `http://xxxxx:xxxxx@host`).
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

MASK = "xxxxx:xxxxx"
# scheme "://" userinfo "@": userinfo stops at the first character a URL's authority cannot
# hold before "@" ("/", whitespace, a JSON string's quote or backslash).
_USERINFO = re.compile(r'(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s"\\]+@')


def mask_credentials(text: str) -> str:
    """`text` with the user and password of every `scheme://user:password@` replaced."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def masked_text(data: bytes | None) -> str | None:
    """A file's bytes as text for display (None stays None: no file), credentials masked."""
    return None if data is None else mask_credentials(data.decode("utf-8", "replace"))


class MaskingStream:
    """A text stream that masks what is written and passes everything else to `stream`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(mask_credentials(s))
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def mask_standard_streams() -> None:
    """Route sys.stdout and sys.stderr through `MaskingStream` (once per process)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, MaskingStream):
            setattr(sys, name, MaskingStream(stream))
