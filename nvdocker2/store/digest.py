"""SHA-256 hex digests for the store (a backup's checksum, the journal's file name), from
CPython's own implementation where the interpreter has it: `hashlib` loads OpenSSL's libcrypto
first, which costs every install a few milliseconds for two short digests. The digest is the
same either way; an interpreter built without the built-in module uses hashlib's."""

from __future__ import annotations

import importlib
from typing import Any


def _implementation() -> Any:
    """CPython's built-in sha256 (`_sha2` from 3.12, `_sha256` before), else hashlib's."""
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


_sha256 = _implementation()


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data`, as 64 lowercase hex digits."""
    return str(_sha256(data).hexdigest())
