"""CUDA forward compatibility (nvdocker2.direct.compat.compat_folder): the image's compat folder
is used only when it holds exactly one libcuda, a regular file newer than the host driver by
major version, found inside the image's root. Real files and symlinks in tmp_path."""

from __future__ import annotations

import os

import pytest

from nvdocker2.direct.compat import compat_folder

HOST = "535.104.05"


def image(tmp_path, *versions, folder="usr/local/cuda/compat"):
    rootfs = tmp_path / "rootfs"
    compat = rootfs / folder
    compat.mkdir(parents=True)
    for version in versions:
        (compat / f"libcuda.so.{version}").write_bytes(b"\x7fELF")
    os.symlink(f"libcuda.so.{versions[0]}" if versions else "missing", compat / "libcuda.so.1")
    return rootfs


def test_a_newer_major_in_the_image_is_its_compat_folder(tmp_path):
    assert compat_folder(str(image(tmp_path, "550.54.15")), HOST) == "/usr/local/cuda/compat"


@pytest.mark.parametrize("host", ["550.40.07", "560.1", None, "", "r550"])
def test_no_folder_when_the_host_is_as_new_or_its_version_unknown(tmp_path, host):
    assert compat_folder(str(image(tmp_path, "550.54.15")), host) is None


def test_no_folder_for_two_libcudas_none_or_no_compat_folder(tmp_path):
    assert compat_folder(str(image(tmp_path / "a", "550.54.15", "555.42.02")), HOST) is None
    assert compat_folder(str(image(tmp_path / "b")), HOST) is None
    (tmp_path / "c" / "rootfs").mkdir(parents=True)
    assert compat_folder(str(tmp_path / "c" / "rootfs"), HOST) is None


def test_a_libcuda_that_is_a_link_does_not_count(tmp_path):
    rootfs = image(tmp_path)
    compat = rootfs / "usr/local/cuda/compat"
    (tmp_path / "elsewhere.so").write_bytes(b"\x7fELF")
    os.symlink(tmp_path / "elsewhere.so", compat / "libcuda.so.550.54.15")
    assert compat_folder(str(rootfs), HOST) is None


def test_links_are_resolved_inside_the_image_and_an_escape_is_refused(tmp_path):
    inside = image(tmp_path / "in", "550.54.15", folder="opt/cuda-12.4/compat")
    (inside / "usr/local").mkdir(parents=True)
    os.symlink("/opt/cuda-12.4", inside / "usr/local/cuda")
    assert compat_folder(str(inside), HOST) == "/opt/cuda-12.4/compat"

    host_side = image(tmp_path / "host", "550.54.15", folder="compat")  # outside the image
    escaping = tmp_path / "out" / "rootfs"
    (escaping / "usr/local/cuda").mkdir(parents=True)
    os.symlink(os.path.relpath(host_side / "compat", escaping / "usr/local/cuda"),
               escaping / "usr/local/cuda/compat")
    assert compat_folder(str(escaping), HOST) is None
