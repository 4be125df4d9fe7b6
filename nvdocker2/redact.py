"""Credentials in URLs (`scheme://user:password@host`) are masked in everything nvdocker2 prints
about a file: diffs and the before/after text of --json. The file itself keeps them.

The mask is Docker's own (`docker info` shows a proxy as `http://xxxxx:xxxxx@host`).
"""

from __future__ import annotations

import re

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
