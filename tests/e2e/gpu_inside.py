"""What a GPU container sees inside, read by a busybox shell in it: the NVIDIA device nodes
(type, major:minor), the mounts at /dev/nvidia* and under /usr, and the image's ld cache.

The e2e tests of our nvidia-container-cli (legacy mode under a private dockerd, LXC's mount
hook) run REPORT in the container and hold what `parse` makes of its output to `expected`,
built from the fake driver tree (tests/fixtures/fake_driver.py) the cli was pointed at.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from dataclasses import dataclass

from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR

REPORT = (
    "for f in /dev/nvidia*; do [ -e \"$f\" ] && echo \"node $f $(stat -c '%F %t:%T' \"$f\")\";"
    " done; "
    "while read -r _ _ _ _ point opts _; do case $point in"
    " /dev/nvidia*|/usr/*) echo \"mount $point $opts\" ;; esac; done < /proc/self/mountinfo; "
    "echo cache; if [ -e /etc/ld.so.cache ]; then base64 /etc/ld.so.cache; fi"
)

V = DRIVER_VERSION
# The control nodes every GPU request brings (direct mode's plan), and the files of
# compute and utility.
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
COMPUTE_UTILITY_FILES = (
    f"{LIB64_DIR}/libnvidia-ml.so.{V}", f"{LIB64_DIR}/libcuda.so.{V}",
    f"{LIB64_DIR}/libnvidia-ptxjitcompiler.so.{V}", f"{LIB64_DIR}/libnvidia-nvvm.so.{V}",
    "/usr/bin/nvidia-smi",
)
CACHE_ENTRIES = (
    f"libcuda.so.1 (libc6,x86-64) => {LIB64_DIR}/libcuda.so.1",
    f"libnvidia-ml.so.1 (libc6,x86-64) => {LIB64_DIR}/libnvidia-ml.so.1",
)


@dataclass(frozen=True)
class Inside:
    nodes: dict[str, str]  # /dev/nvidiaX -> "character special file MAJOR:MINOR" (decimal)
    mounts: dict[str, str]  # mount point -> its per-mount options (rw/ro, nosuid, ...)
    ld_cache: list[str]  # `ldconfig -p` of the container's /etc/ld.so.cache (none: [])


def parse(stdout: str) -> Inside:
    head, sep, cache = stdout.partition("cache\n")
    assert sep, stdout
    nodes, mounts = {}, {}
    for line in head.splitlines():
        kind, path, rest = line.split(" ", 2)
        if kind == "node":
            what, _, numbers = rest.rpartition(" ")
            major, minor = (int(n, 16) for n in numbers.split(":"))
            nodes[path] = f"{what} {major}:{minor}"
        elif kind == "mount":
            mounts[path] = rest
    if not cache.strip():
        return Inside(nodes, mounts, [])
    with tempfile.NamedTemporaryFile(suffix=".cache") as f:
        f.write(base64.b64decode(cache))
        f.flush()
        listed = subprocess.run(["ldconfig", "-p", "-C", f.name], capture_output=True,
                                text=True, check=True).stdout
    entries = [line.strip() for line in listed.splitlines()[1:]]
    return Inside(nodes, mounts, entries)


def expected_nodes(driver_root, gpu_minors) -> dict[str, str]:
    """The nodes the container must have, exactly: the GPUs asked for and the control nodes,
    each with the major:minor of the fake driver's node."""
    names = [f"nvidia{m}" for m in gpu_minors] + list(CONTROL_NODES)
    found = {}
    for name in names:
        rdev = os.stat(os.path.join(driver_root, "dev", name)).st_rdev
        found[f"/dev/{name}"] = f"character special file {os.major(rdev)}:{os.minor(rdev)}"
    return found


def assert_sees_exactly(inside: Inside, driver_root, gpu_minors, files=COMPUTE_UTILITY_FILES):
    """The asked nodes and no other NVIDIA node, each driver file mounted read-only, the
    nodes writable, and the libraries in the container's own ld cache."""
    assert inside.nodes == expected_nodes(driver_root, gpu_minors)
    nvidia = {p: o for p, o in inside.mounts.items()
              if p.startswith("/dev/nvidia") or "nvidia" in p or "libcuda" in p}
    assert sorted(nvidia) == sorted([*expected_nodes(driver_root, gpu_minors), *files])
    for point, options in nvidia.items():
        flags = options.split(",")
        assert "nosuid" in flags, (point, options)
        assert flags[0] == ("rw" if point.startswith("/dev/") else "ro"), (point, options)
    for entry in CACHE_ENTRIES:
        assert entry in inside.ld_cache, inside.ld_cache
