"""CUDA forward compatibility in CDI mode: `cdi generate` passes the driver's version to the
hook (`--cuda-compat`), and the hook puts an image's newer compat libcuda first in the ld cache
it writes, as direct mode does at `create`; an older one, or none, changes nothing. Real ELF
files (the TEST FIXTURE's) and the host's ldconfig."""

from __future__ import annotations

import io
import json
import os
import shutil

import pytest
from fixtures.fake_driver import (
    DRIVER_VERSION,
    LIB64_DIR,
    build_fake_driver,
    elf_shared_object,
    make_bundle,
)

from nvdocker2.direct.cdi import cdi_spec
from nvdocker2.direct.discover import discover
from nvdocker2.direct.hook import main
from nvdocker2.direct.ldcache import parse_ld_cache

COMPAT = "/usr/local/cuda/compat"


def _state(bundle):
    return io.StringIO(json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating",
                                   "pid": 1, "bundle": str(bundle)}))


@pytest.fixture
def driver(tmp_path):
    return build_fake_driver(tmp_path / "driver")


def _hook_args(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path="/x/nvidia-container-runtime",
                    ldconfig="/sbin/ldconfig", capabilities=("compute", "utility"))
    (hook,) = spec["containerEdits"]["hooks"]
    return spec, hook["args"][2:]


def _image(tmp_path, driver, spec, compat_version=None):
    """A bundle whose rootfs holds the spec's driver files (copied, as the bind mounts would
    show them) and, with `compat_version`, the cuda-compat package's libcuda."""
    bundle, rootfs, _ = make_bundle(tmp_path)
    for m in spec["containerEdits"]["mounts"]:
        dest = rootfs / m["containerPath"].lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(m["hostPath"], dest)
    if compat_version:
        compat = rootfs / COMPAT.lstrip("/")
        compat.mkdir(parents=True)
        (compat / f"libcuda.so.{compat_version}").write_bytes(elf_shared_object("libcuda.so.1"))
        os.symlink(f"libcuda.so.{compat_version}", compat / "libcuda.so.1")
    return bundle, rootfs


def _libcuda_entries(rootfs):
    entries = parse_ld_cache((rootfs / "etc/ld.so.cache").read_bytes())
    return [e.path for e in entries if e.name == "libcuda.so.1"]


def test_the_spec_passes_the_drivers_version_to_the_hook(driver):
    _spec, args = _hook_args(driver)
    assert args[-2:] == ["--cuda-compat", DRIVER_VERSION]


def test_a_newer_compat_libcuda_comes_first_in_the_cache(tmp_path, driver, capsys):
    spec, args = _hook_args(driver)
    bundle, rootfs = _image(tmp_path, driver, spec, "550.54.15")
    assert main(args, _state(bundle)) == 0, capsys.readouterr().err
    assert _libcuda_entries(rootfs)[0] == f"{COMPAT}/libcuda.so.1"
    assert f"{LIB64_DIR}/libcuda.so.1" in _libcuda_entries(rootfs)


@pytest.mark.parametrize("compat_version", [None, "535.54.03", "530.30.02"])
def test_an_older_or_equal_compat_libcuda_or_none_changes_nothing(tmp_path, driver, capsys,
                                                                compat_version):
    spec, args = _hook_args(driver)
    bundle, rootfs = _image(tmp_path, driver, spec, compat_version)
    assert main(args, _state(bundle)) == 0, capsys.readouterr().err
    assert _libcuda_entries(rootfs) == [f"{LIB64_DIR}/libcuda.so.1"]


def test_without_the_flag_the_hook_leaves_compat_alone(tmp_path, driver, capsys):
    spec, args = _hook_args(driver)
    bundle, rootfs = _image(tmp_path, driver, spec, "550.54.15")
    assert main(args[:-2], _state(bundle)) == 0, capsys.readouterr().err
    assert _libcuda_entries(rootfs) == [f"{LIB64_DIR}/libcuda.so.1"]


@pytest.mark.parametrize("value", ["", "535;id", "../535", "535..1", "r535", "５３５"])
def test_a_bad_version_is_refused_in_one_line(tmp_path, capsys, value):
    bundle, _rootfs, _ = make_bundle(tmp_path)
    argv = ["update-ldcache", "--ldconfig", "/sbin/ldconfig", "--cuda-compat", value]
    assert main(argv, _state(bundle)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: direct-hook: bad --cuda-compat {value!r} (a driver version such as" \
                     " 535.104.05)"
