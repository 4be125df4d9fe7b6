"""What a Podman container given GPUs by `nvdocker2 cdi generate`'s spec must see, asserted the
same way wherever that Podman runs: on this machine (Podman 4.3, Debian 12: the e2e tests) and
in the Debian 13 and sid trees of the platform matrix (Podman 5, tests/platforms).

Each check takes what a container printed (`CompletedProcess`); where the container runs and
as whom is the caller's. The spec comes from the TEST FIXTURE fake driver tree (two GPUs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR

LIBCUDA = f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}"
CONTROL = ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"]
WHICH = ["index", "uuid", "all"]

# The container's GPU device nodes, one name a word.
NODES = "cd /dev && ls -d nvidia*"
# The mount of libcuda, its first bytes, an attempt to append to it, and how many lines of the
# container's ld cache name libcuda.so.1 (the createContainer hook ran ldconfig).
DRIVER_FILES = (f"grep ' {LIBCUDA} ' /proc/mounts; head -c 4 {LIBCUDA} | od -An -c; "
                f"(echo x >> {LIBCUDA} && echo WROTE); grep -c libcuda.so.1 /etc/ld.so.cache; "
                "true")
# What the links-out image's container lists in its library directory.
LIST_LIBRARIES = f"ls {LIB64_DIR}/"
OPERATOR_BYTES = b"operator's bytes\n"


def requested(driver, which: str) -> tuple[str, list[str]]:
    """The `--device` value for `which` (index, uuid, all) and the GPU nodes it must give."""
    return {
        "index": ("nvidia.com/gpu=0", ["nvidia0"]),
        "uuid": (f"nvidia.com/gpu={driver.gpus[1].uuid}", ["nvidia1"]),
        "all": ("nvidia.com/gpu=all", ["nvidia0", "nvidia1"]),
    }[which]


def assert_exactly_these_gpus(proc: subprocess.CompletedProcess, gpus: list[str]) -> None:
    """NODES printed the GPU nodes asked for and the control nodes, nothing else."""
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(gpus + CONTROL)


def assert_driver_files_read_only(proc: subprocess.CompletedProcess, refusal: str) -> None:
    """DRIVER_FILES printed a read-only mount of the real library, whose append was refused
    with `refusal` (root: the read-only mount; a rootless user: root's file is nobody's), and
    libcuda.so.1 in the ld cache."""
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[3].split(",")[0] == "ro", proc.stdout
    assert lines[1].split() == ["177", "E", "L", "F"], proc.stdout
    assert "WROTE" not in proc.stdout
    assert refusal in proc.stderr, proc.stderr
    assert lines[-1] == "1", proc.stdout


def links_out_image(host_dir: str, host_file: str) -> list[tuple[str, object]]:
    """The extra entries of an image whose library directory and /etc/ld.so.cache are
    absolute links to a host directory and a host file."""
    return [(LIB64_DIR, ("symlink", host_dir)), ("/etc/ld.so.cache", ("symlink", host_file))]


def make_host_targets(base: Path) -> tuple[Path, Path]:
    """An empty host directory and a host file with OPERATOR_BYTES under `base`, readable by
    all (a rootless user's image may point at them)."""
    host_dir, host_file = base / "host-lib", base / "host-cache"
    host_dir.mkdir(parents=True)
    host_file.write_bytes(OPERATOR_BYTES)
    for p in (host_dir, host_file):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return host_dir, host_file


def assert_links_out_changed_nothing(proc: subprocess.CompletedProcess, host_dir: Path,
                                     host_file: Path) -> None:
    """The links the hook makes and the cache ldconfig writes landed in the container: the
    host directory is empty, the host file has its bytes, and the container's library
    directory (LIST_LIBRARIES) holds the driver file and its soname link."""
    assert sorted(os.listdir(host_dir)) == []
    assert host_file.read_bytes() == OPERATOR_BYTES
    assert proc.returncode == 0, proc.stderr
    assert {"libcuda.so.1", f"libcuda.so.{DRIVER_VERSION}"} <= set(proc.stdout.split())
