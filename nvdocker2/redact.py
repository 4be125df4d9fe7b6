"""Credentials in URLs (`scheme://user:password@host`) masked in everything nvdocker2 prints.

daemon.json may hold proxy URLs with a password (`"proxies": {"http-proxy":
"http://user:pass@proxy:3128"}`); diffs, messages and JSON output end up in terminals, CI logs
and Ansible output, so the password is shown as `***`. Files and backups keep the real bytes:
masking happens only on the way to a person.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

MASK = "***"

# scheme://user:password@ — the password runs up to the last "@" of the authority, so a
# password with an unencoded "@" is still masked whole. The user name stays (it tells which
# account); `ssh://user@host` has no password and is left alone.
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:\"'<>\\]*):"
    r"[^\s/?#\"'<>\\]*@(?=[^\s@])"
)


def mask(text: str) -> str:
    """`text` with the password of every URL replaced by ***."""
    if "://" not in text:
        return text
    return _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)


class MaskingStream:
    """A text stream that masks what is written and passes everything else to `stream`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(mask(s))
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
