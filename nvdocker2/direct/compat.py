"""CUDA forward compatibility: the image's own newer libcuda before the host driver's.

A CUDA image may ship `/usr/local/cuda/compat/libcuda.so.VERSION` (NVIDIA's cuda-compat
package) to run a newer CUDA on an older driver. NVIDIA's rule (nvidia-cdi-hook
enable-cuda-compat, the default `cuda-compat-mode = "ldconfig"`): where the folder holds exactly
one `libcuda.so.*.*` whose major version is greater than the host driver's, that folder comes
first in the ld cache update, so the loader picks its libraries over the driver's; an equal or
older one, or none, changes nothing. Direct mode decides at `create`, reading the image's files
inside its root (symlinks resolved there, never out of it). Imported only for images that have
/usr/local/cuda. Stdlib only.
"""

from __future__ import annotations

import os
import stat

from nvdocker2.direct.rootfs import UnsafePath, resolve_in_root

COMPAT_DIR = "/usr/local/cuda/compat"


def compat_folder(rootfs: str, host_version: str | None) -> str | None:
    """The image's compat folder (an in-root path, links resolved) when its libcuda is newer
    than the host driver `host_version` by major version; None otherwise."""
    host_major = _major(host_version or "")
    if host_major is None:
        return None
    try:
        folder = resolve_in_root(rootfs, COMPAT_DIR, follow_final=True, refuse_escape=True)
    except UnsafePath:
        return None
    where = os.path.join(rootfs, folder.lstrip("/"))
    try:
        names = os.listdir(where)
    except OSError:
        return None
    libs = []
    for name in names:
        version = name[len("libcuda.so."):] if name.startswith("libcuda.so.") else ""
        if "." not in version:
            continue  # libcuda.so.1, the soname link
        try:
            st = os.lstat(os.path.join(where, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            libs.append(version)
    if len(libs) != 1:
        return None  # none, or ambiguous: NVIDIA leaves the cache as it is
    compat_major = _major(libs[0])
    if compat_major is None or compat_major <= host_major:
        return None
    return folder


def _major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None
