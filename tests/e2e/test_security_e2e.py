"""Hostile images against the container start path, end to end on a private dockerd.

Direct mode (reference §7) runs the host's `ldconfig -r ROOTFS` from a createContainer hook, inside
the container's mount namespace before pivot_root, where the container's /proc is already
mounted and its pid 1 (runc init) still has the host's root. An image must not be able to
lead that ldconfig out of the rootfs through /proc magic links (`/proc/1/root`).
The driver tree is the TEST FIXTURE fake driver of tests/fixtures/fake_driver.py.
"""

from __future__ import annotations

import os

from test_direct_e2e import direct  # noqa: F401 - the direct-mode daemon fixture


def _image_with(d, name: str, script: str) -> str:
    d.daemon.docker("run", "--name", f"mk-{name}", "--network=none", d.daemon.image,
                    "sh", "-c", script)
    d.daemon.docker("commit", f"mk-{name}", f"nvd2-{name}:latest")
    d.daemon.docker("rm", "-f", f"mk-{name}")
    return f"nvd2-{name}:latest"


def test_ldconfig_cannot_write_on_the_host_through_proc_1_root(direct, tmp_path):  # noqa: F811
    """The image points ldconfig's aux cache directory at /proc/1/root/<host dir>: without a
    fix, the host's ldconfig (chrooted into the rootfs, /proc mounted) follows the magic
    link to the host and writes `aux-cache` there as root."""
    target = tmp_path / "host-dir"
    target.mkdir()
    image = _image_with(
        direct, "procroot",
        f"mkdir -p /var/cache /proc && rm -rf /var/cache/ldconfig"
        f" && ln -s /proc/1/root{target} /var/cache/ldconfig",
    )
    try:
        proc = direct.daemon.docker(
            "run", "--rm", "--network=none", "--runtime=nvidia", "-e",
            "NVIDIA_VISIBLE_DEVICES=0", image, "sh", "-c", "ls /usr/lib/x86_64-linux-gnu",
            check=False, timeout=120)
        assert os.listdir(target) == [], "ldconfig wrote on the host through /proc/1/root"
        assert proc.returncode == 0, proc.stderr
        assert "libcuda.so.1" in proc.stdout
    finally:
        direct.daemon.docker("rmi", image, check=False)


def test_a_directory_where_a_driver_file_goes_is_one_clear_error(direct):  # noqa: F811
    """The image has a directory at /usr/bin/nvidia-smi: a file cannot be bind-mounted there;
    create says so in one line naming the path, and no container is left behind."""
    image = _image_with(direct, "smidir", "mkdir -p /usr/bin/nvidia-smi/x")
    try:
        proc = direct.daemon.docker(
            "run", "--rm", "--network=none", "--runtime=nvidia", "-e",
            "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_DRIVER_CAPABILITIES=utility", image,
            "true", check=False, timeout=120)
        assert proc.returncode != 0
        assert ("/usr/bin/nvidia-smi in the container image is a directory; cannot mount"
                " the driver file there") in proc.stderr, proc.stderr
        assert direct.daemon.docker("ps", "-aq").stdout == ""
    finally:
        direct.daemon.docker("rmi", image, check=False)
