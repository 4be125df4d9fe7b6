"""The store's sha256 (a backup's checksum, the journal's file name) is hashlib's digest,
whichever implementation the interpreter offers."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from nvdocker2.store.digest import sha256_hex

SAMPLES = [b"", b"{}\n", "daemon.json ✓".encode(), bytes(range(256)) * 300]


@pytest.mark.parametrize("data", SAMPLES)
def test_sha256_hex_is_hashlibs_digest(data):
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_without_the_built_in_module_hashlibs_is_used():
    """An interpreter built without `_sha2`/`_sha256` (None in sys.modules makes their import
    fail) gives the same digests through hashlib."""
    code = ("import sys\nsys.modules['_sha2'] = sys.modules['_sha256'] = None\n"
            "from nvdocker2.store.digest import sha256_hex\n"
            "print(sha256_hex(sys.stdin.buffer.read()), 'hashlib' in sys.modules)\n")
    data = SAMPLES[-1]
    r = subprocess.run([sys.executable, "-I", "-c", code], input=data, capture_output=True,
                       timeout=60, check=True)
    assert r.stdout.decode().split() == [hashlib.sha256(data).hexdigest(), "True"]
