"""CDI mode's hook against hostile images (reference §9: its hooks run this package's binaries,
never the image's). The spec `install --mode cdi` writes carries one createContainer hook:
this package's runtime in its `direct-hook` role. Here that hook, with exactly the argv the
generated spec gives it, meets the hostile images of direct mode's security tests (a TEST
FIXTURE rootfs with a real procfs, root only). End to end through dockerd: test_cdi_e2e.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver, make_bundle
from .test_security_hook import _state, needs_root, proc_rootfs  # noqa: F401

from nvdocker2.direct import discover
from nvdocker2.direct.cdi import cdi_spec
from nvdocker2.direct.hook import main

RUNTIME = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def hook_argv(tmp_path):
    """(the argv after `direct-hook` of the hook in the spec of a fake 2-GPU driver tree,
    that tree's root)."""
    driver = build_fake_driver(tmp_path / "driver")
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    (hook,) = spec["containerEdits"]["hooks"]
    assert hook["path"] == RUNTIME and hook["args"][:2] == [Path(RUNTIME).name, "direct-hook"]
    assert hook["env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    return hook["args"][2:], driver.root


def mount_cuda(driver_root: Path, libdir: Path) -> None:
    """What runc's bind mount of the spec puts there (ldconfig drops dangling soname links)."""
    libdir.mkdir(parents=True, exist_ok=True)
    src = driver_root / LIB64_DIR.lstrip("/") / f"libcuda.so.{DRIVER_VERSION}"
    (libdir / src.name).write_bytes(src.read_bytes())


def test_the_spec_hook_links_sonames_and_refreshes_the_ld_cache(hook_argv, tmp_path, capsys):
    bundle, rootfs, _ = make_bundle(tmp_path)
    libdir = rootfs / LIB64_DIR.lstrip("/")
    mount_cuda(hook_argv[1], libdir)
    assert main(hook_argv[0], _state(bundle)) == 0, capsys.readouterr().err
    assert os.readlink(libdir / "libcuda.so.1") == f"libcuda.so.{DRIVER_VERSION}"
    assert (rootfs / "etc/ld.so.cache").is_file()


def test_an_image_lib_dir_symlinked_out_of_the_rootfs_is_refused(hook_argv, tmp_path, capsys):
    bundle, rootfs, _ = make_bundle(tmp_path)
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    (rootfs / "usr/lib").mkdir(parents=True, exist_ok=True)
    os.symlink("../" * 12 + str(host_dir).lstrip("/"), rootfs / LIB64_DIR.lstrip("/"))
    assert main(hook_argv[0], _state(bundle)) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1] == "hint: fix or remove that symlink in the image"
    assert err[0].startswith(f"error: {LIB64_DIR} in the container image is "
                                               "a symlink to '../../")
    assert err[0].endswith("which leads outside the container's root; refusing it")
    assert os.listdir(host_dir) == []


def test_an_absolute_image_symlink_stays_inside_the_rootfs(hook_argv, tmp_path, capsys):
    bundle, rootfs, _ = make_bundle(tmp_path)
    host_dir = tmp_path / "host-abs"
    host_dir.mkdir()
    mount_cuda(hook_argv[1], rootfs / str(host_dir).lstrip("/"))
    os.symlink(str(host_dir), rootfs / LIB64_DIR.lstrip("/"))
    assert main(hook_argv[0], _state(bundle)) == 0, capsys.readouterr().err
    assert os.listdir(host_dir) == []
    assert "libcuda.so.1" in os.listdir(rootfs / str(host_dir).lstrip("/"))


@needs_root
def test_ldconfig_does_not_follow_proc_pid_root_out_of_the_rootfs(
    hook_argv, proc_rootfs, tmp_path, capsys  # noqa: F811 - proc_rootfs: the imported fixture
):
    bundle, rootfs = proc_rootfs
    target = tmp_path / "host-dir"
    target.mkdir()
    (rootfs / LIB64_DIR.lstrip("/")).mkdir(parents=True)
    (rootfs / "var/cache").mkdir(parents=True)
    os.symlink(f"/proc/{os.getpid()}/root{target}", rootfs / "var/cache/ldconfig")
    (rootfs / "etc/ld.so.conf").write_text(f"/proc/{os.getpid()}/root{target}\n")
    assert main(hook_argv[0], _state(bundle)) == 0, capsys.readouterr().err
    assert os.listdir(target) == []
    assert os.path.ismount(rootfs / "proc")
