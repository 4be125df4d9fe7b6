"""Reader of glibc's /etc/ld.so.cache ("glibc-ld.so.cache1.1"), stdlib only.

Direct mode finds the driver's libraries the way the dynamic loader of the driver root
would, without running a binary: the cache maps each library name (usually the soname) to a
path. Both layouts glibc writes are read: the new format alone (glibc >= 2.32 default) and
the old "ld.so-1.7.0" table followed by the new one (the "compat" layout of older glibc).
"""

from __future__ import annotations

import os
import struct

from nvdocker2.toolkit_schema import Record

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00
FLAG_X8664_LIB64 = 0x0300
FLAG_X8664_LIBX32 = 0x0800
FLAG_POWERPC_LIB64 = 0x0500
FLAG_AARCH64_LIB64 = 0x0A00

_NATIVE_FLAGS = {
    "x86_64": FLAG_X8664_LIB64,
    "amd64": FLAG_X8664_LIB64,
    "aarch64": FLAG_AARCH64_LIB64,
    "arm64": FLAG_AARCH64_LIB64,
    "ppc64le": FLAG_POWERPC_LIB64,
}

_NEW_HEADER = struct.Struct("<20sII")  # magic+version, nlibs, len_strings (then flags, ext...)
_NEW_HEADER_SIZE = 48
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_HEADER_SIZE = 16  # char magic[11]; (pad); unsigned int nlibs
_OLD_ENTRY_SIZE = 12  # int flags; unsigned key, value


class CacheEntry(Record):
    """One line of `ldconfig -p`: `name` (as looked up), `path` (inside the cached root)."""

    name: str
    path: str
    flags: int

    @property
    def is_elf(self) -> bool:
        """An ELF library the glibc loader would use (libc6, or plain ELF on i386)."""
        return self.flags & FLAG_TYPE_MASK in (FLAG_ELF, FLAG_ELF_LIBC6)

    @property
    def arch_flags(self) -> int:
        return self.flags & FLAG_REQUIRED_MASK


class LdCacheError(ValueError):
    """The file is not a glibc ld.so.cache this reader understands."""


def native_arch_flags(machine: str | None = None) -> int | None:
    """The `FLAG_REQUIRED_MASK` bits of native 64-bit libraries on this machine, or None."""
    return _NATIVE_FLAGS.get((machine or os.uname().machine).lower())


def parse_ld_cache(data: bytes) -> list[CacheEntry]:
    """Entries of an ld.so.cache, in file order; raises `LdCacheError` on a malformed file."""
    start = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER_SIZE:
            raise LdCacheError("truncated old-format header")
        (old_n,) = struct.unpack_from("<I", data, 12)
        start = _OLD_HEADER_SIZE + old_n * _OLD_ENTRY_SIZE
        start = (start + 7) & ~7  # the new table follows, aligned like struct cache_file_new
        if data[start : start + len(NEW_MAGIC)] != NEW_MAGIC:
            raise LdCacheError("old-format cache without the new-format table")
    elif not data.startswith(NEW_MAGIC):
        raise LdCacheError("not a glibc ld.so.cache (bad magic)")
    if len(data) < start + _NEW_HEADER_SIZE:
        raise LdCacheError("truncated header")
    _magic, nlibs, _len_strings = _NEW_HEADER.unpack_from(data, start)
    table = start + _NEW_HEADER_SIZE
    if table + nlibs * _NEW_ENTRY.size > len(data):
        raise LdCacheError(f"header says {nlibs} entries, the file is too short")
    entries = []
    for i in range(nlibs):
        flags, key, value, _osv, _hwcap = _NEW_ENTRY.unpack_from(data, table + i * _NEW_ENTRY.size)
        entries.append(CacheEntry(_string(data, start + key), _string(data, start + value), flags))
    return entries


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LdCacheError(f"string offset {offset} outside the file")
    return data[offset:end].decode("utf-8", "surrogateescape")
