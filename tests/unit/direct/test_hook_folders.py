"""The hook's links into folders the image does not have (`/etc/vulkan/icd.d` of CSV mode's
`sym` lines, `/usr/bin/nvidia-smi` on WSL2): the folder is made, 0755, as NVIDIA's
create-symlinks hook makes it, never through one of the image's symlinks and never on a
volume."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess

import pytest
from fixtures.fake_driver import make_bundle

from nvdocker2.direct.hook import main

ICD = "/usr/share/nvidia/nvidia_icd.json"
LINK = "/etc/vulkan/icd.d/nvidia_icd.json"


def _state(bundle):
    return io.StringIO(json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating",
                                   "pid": 1, "bundle": str(bundle)}))


def _hook(bundle, *links):
    argv = ["update-ldcache", "--ldconfig", "/sbin/ldconfig"]
    for link in links:
        argv += ["--link", link]
    return main(argv, _state(bundle))


def test_a_link_into_a_folder_the_image_lacks_gets_the_folder(tmp_path, capsys):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    assert not (rootfs / "etc/vulkan").exists()
    old = os.umask(0o077)
    try:
        assert _hook(bundle, f"{LINK}::{ICD}", "/usr/bin/nvidia-smi::/opt/store/nvidia-smi") == 0
    finally:
        os.umask(old)
    assert capsys.readouterr().err == ""
    assert os.readlink(rootfs / LINK.lstrip("/")) == ICD
    assert os.readlink(rootfs / "usr/bin/nvidia-smi") == "/opt/store/nvidia-smi"
    for folder in ("etc/vulkan", "etc/vulkan/icd.d", "usr", "usr/bin"):
        st = os.lstat(rootfs / folder)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755, folder


def test_a_missing_folder_behind_an_image_symlink_out_of_the_root_is_refused(tmp_path, capsys):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("../../../outside", rootfs / "etc/vulkan")
    assert _hook(bundle, f"{LINK}::{ICD}") == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: /etc/vulkan in the container image is a symlink to "
                   "'../../../outside', which leads outside the container's root; refusing it",
                   "hint: fix or remove that symlink in the image"]
    assert os.listdir(outside) == []


def test_a_folder_in_the_image_pointing_inside_it_is_followed(tmp_path, capsys):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    (rootfs / "usr/share/vulkan").mkdir(parents=True)
    os.symlink("../usr/share", rootfs / "etc/vulkan-share")
    assert _hook(bundle, f"/etc/vulkan-share/vulkan/icd.d/nvidia_icd.json::{ICD}") == 0
    assert os.readlink(rootfs / "usr/share/vulkan/icd.d/nvidia_icd.json") == ICD
    assert os.readlink(rootfs / "etc/vulkan-share") == "../usr/share"  # the image's, kept


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                    reason="mounts a volume: root only")
def test_a_missing_folder_on_a_volume_is_refused_and_the_volume_gets_nothing_more(tmp_path,
                                                                                capsys):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    volume = tmp_path / "volume"
    volume.mkdir()
    (rootfs / "etc/vulkan").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(volume), str(rootfs / "etc/vulkan")], check=True)
    try:
        assert _hook(bundle, f"{LINK}::{ICD}") == 1
    finally:
        subprocess.run(["umount", "-l", str(rootfs / "etc/vulkan")], check=False)
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: /etc/vulkan in the container is on another mount than the container "
                   "image (a volume?); refusing to make links or run ldconfig there",
                   "hint: keep the image's library directories in the image, and mount volumes "
                   "elsewhere"]
    assert os.listdir(volume) == []  # nothing made on the volume
