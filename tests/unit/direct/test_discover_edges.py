"""Discovery at its edges, on the fake driver tree (test fixture): GPU information files that are
incomplete or unreadable, GPUs whose folder names do not follow their bus order, the library
directories searched without an ld.so.cache, the 32-bit twins, a library two capabilities
bring, a WSL2 guest, and nodes that cannot be read."""

from __future__ import annotations

import os
import shutil

import pytest
from fixtures.fake_driver import (
    DRIVER_VERSION,
    LIB32_DIR,
    LIB64_DIR,
    WSL_STORE,
    build_fake_driver,
    build_fake_wsl,
    elf_shared_object,
)

from nvdocker2.direct import DirectError, discover

GPUS_DIR = "proc/driver/nvidia/gpus"


def information(tmp_path, entry, text):
    d = tmp_path / GPUS_DIR / entry
    d.mkdir(parents=True, exist_ok=True)
    (d / "information").write_bytes(text)


def test_gpus_follow_the_bus_location_not_their_folder_names(tmp_path):
    build_fake_driver(tmp_path, [])
    information(tmp_path, "a", b"GPU UUID: GPU-2\nBus Location: 0000:0B:00.0\nDevice Minor: 0\n")
    information(tmp_path, "b", b"GPU UUID: GPU-1\nBus Location: 0000:0a:00.0\nDevice Minor: 1\n"
                              b"Model: Tesla \xff\n")
    gpus = discover(str(tmp_path)).gpus
    assert [(g.index, g.uuid, g.bus_id, g.minor, g.model) for g in gpus] == [
        (0, "GPU-1", "0000:0a:00.0", 1, "Tesla \ufffd"),
        (1, "GPU-2", "0000:0b:00.0", 0, ""),
    ]


def test_a_gpu_without_bus_location_is_ordered_by_its_folder_name(tmp_path):
    build_fake_driver(tmp_path, [])
    information(tmp_path, "0000:0C:00.0", b"GPU UUID: GPU-3\nDevice Minor: 2\n")
    assert [g.bus_id for g in discover(str(tmp_path)).gpus] == ["0000:0c:00.0"]


@pytest.mark.parametrize("text", [b"GPU UUID: GPU-1\n", b"Device Minor: 0\n",
                                  b"GPU UUID: GPU-1\nDevice Minor: zero\n"])
def test_gpu_information_without_a_minor_and_uuid_is_refused(tmp_path, text):
    build_fake_driver(tmp_path, [])
    information(tmp_path, "x", text)
    with pytest.raises(DirectError) as raised:
        discover(str(tmp_path))
    assert raised.value.message == (
        f"{tmp_path / GPUS_DIR / 'x' / 'information'} has no valid 'Device Minor' and"
        " 'GPU UUID' lines")
    assert raised.value.hint == "check that the NVIDIA kernel module matches the driver"


def test_unreadable_gpu_information_is_refused(tmp_path):
    build_fake_driver(tmp_path, [])
    (tmp_path / GPUS_DIR / "x" / "information").mkdir(parents=True)
    with pytest.raises(DirectError) as raised:
        discover(str(tmp_path))
    assert raised.value.message == (
        f"cannot read {tmp_path / GPUS_DIR / 'x' / 'information'}: Is a directory")


def test_a_node_that_cannot_be_stated_is_a_problem_not_a_node(tmp_path):
    build_fake_driver(tmp_path)
    os.unlink(tmp_path / "dev/nvidia-uvm-tools")
    os.symlink("nvidia-uvm-tools", tmp_path / "dev/nvidia-uvm-tools")  # a loop: ELOOP
    found = discover(str(tmp_path))
    assert found.node("/dev/nvidia-uvm-tools") is None
    assert found.node("/dev/nvidia-uvm").minor == 0
    where = tmp_path / "dev/nvidia-uvm-tools"
    assert found.problem("/dev/nvidia-uvm-tools") == (
        f"cannot stat {where}: Too many levels of symbolic links")
    assert [p for p, _ in found.problems] == ["/dev/nvidia-uvm-tools"]


LIB64_DIRS = ["/usr/lib64", "/lib64", "/usr/lib", "/lib"]
LIB32_DIRS = ["/usr/lib32", "/lib/i386-linux-gnu", "/lib32"]


@pytest.mark.parametrize("libdir", LIB64_DIRS + LIB32_DIRS)
def test_without_a_cache_every_library_directory_is_searched(tmp_path, libdir):
    build_fake_driver(tmp_path, ld_cache=False, compat32=False)
    real = f"libcuda.so.{DRIVER_VERSION}"
    target = tmp_path / libdir.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    os.replace(tmp_path / LIB64_DIR.lstrip("/") / real, target / real)
    os.unlink(tmp_path / LIB64_DIR.lstrip("/") / "libcuda.so.1")
    os.symlink(real, target / "libcuda.so.1")
    found = discover(str(tmp_path))
    assert found.library_source == "library directories"
    cuda = [f for f in found.files if f.path.endswith("/" + real)]
    assert [(f.path, f.compat32, f.links) for f in cuda] == [
        (f"{libdir}/{real}", libdir in LIB32_DIRS, ("libcuda.so.1",))]


def test_compat32_brings_the_32bit_twins_only_when_asked(tmp_path):
    build_fake_driver(tmp_path)
    found = discover(str(tmp_path))
    plain = found.files_for({"compute"})
    both = found.files_for({"compute", "compat32"})
    assert plain and all(f.capability == "compute" and not f.compat32 for f in plain)
    assert {f.path for f in both} - {f.path for f in plain} == {
        f.path for f in found.files if f.capability == "compute" and f.compat32}
    assert any(f.path.startswith(LIB32_DIR) for f in both)
    assert found.files_for(set()) == ()


def test_discover_reads_the_host_root_by_default_not_the_working_directory(tmp_path,
                                                                           monkeypatch):
    build_fake_driver(tmp_path)
    monkeypatch.chdir(tmp_path)
    try:
        found = discover()
    except DirectError as err:
        assert str(tmp_path) not in err.message
    else:
        assert found.driver_root == "/"


def _only_libcuda_in(tmp_path, libdir):
    """The fake driver without an ld.so.cache whose libcuda lives in `libdir` alone."""
    build_fake_driver(tmp_path, ld_cache=False, compat32=False)
    lib64 = tmp_path / LIB64_DIR.lstrip("/")
    target = tmp_path / libdir.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    real = f"libcuda.so.{DRIVER_VERSION}"
    os.replace(lib64 / real, target / real)
    os.symlink(real, target / "libcuda.so.1")
    shutil.rmtree(lib64)
    return real


def test_a_missing_first_library_directory_is_skipped(tmp_path):
    real = _only_libcuda_in(tmp_path, "/lib64")
    cuda = [f.path for f in discover(str(tmp_path)).files if "libcuda" in f.path]
    assert cuda == [f"/lib64/{real}"]


def test_a_name_that_only_begins_like_the_library_is_not_it(tmp_path):
    real = _only_libcuda_in(tmp_path, "/usr/lib64")
    first = tmp_path / "usr/lib/x86_64-linux-gnu"
    first.mkdir()
    (first / "libcuda.sox").write_bytes(b"not libcuda")
    (tmp_path / "usr/lib64/libcuda.so").symlink_to("libcuda.so.1")
    cuda = [(f.path, f.links) for f in discover(str(tmp_path)).files if "libcuda" in f.path]
    assert cuda == [(f"/usr/lib64/{real}", ("libcuda.so.1",))]


def test_one_file_per_library_the_first_the_loader_finds(tmp_path):
    real = _only_libcuda_in(tmp_path, "/usr/lib64")
    (tmp_path / "lib64").mkdir()
    shutil.copy(tmp_path / "usr/lib64" / real, tmp_path / "lib64" / real)
    (tmp_path / "lib64/libcuda.so").symlink_to(real)  # a name not seen before, another file
    cuda = [f.path for f in discover(str(tmp_path)).files if "libcuda" in f.path]
    assert cuda == [f"/usr/lib64/{real}"]


def test_links_that_climb_above_the_driver_root_are_clamped_not_refused(tmp_path):
    build_fake_driver(tmp_path)
    lib64 = tmp_path / LIB64_DIR.lstrip("/")
    real = f"libcuda.so.{DRIVER_VERSION}"
    (lib64 / "libcuda.so.1").unlink()
    (lib64 / "libcuda.so.1").symlink_to(f"../../../../../..{LIB64_DIR}/{real}")
    smi = tmp_path / "usr/bin/nvidia-smi"
    (tmp_path / "opt/nv").mkdir(parents=True)
    os.replace(smi, tmp_path / "opt/nv/nvidia-smi")
    smi.symlink_to("../../../../../opt/nv/nvidia-smi")
    found = discover(str(tmp_path))
    cuda = [f for f in found.files if f.path == f"{LIB64_DIR}/{real}" and not f.compat32]
    assert [f.links for f in cuda] == [("libcuda.so.1",)]
    binary = [(f.path, f.host_path) for f in found.files if f.kind == "bin"]
    assert binary == [("/usr/bin/nvidia-smi", str(tmp_path / "opt/nv/nvidia-smi"))]


def test_a_library_two_capabilities_bring_is_given_once(tmp_path):
    """libnvidia-gpucomp is compute's and graphics': a container asking for both gets one
    mount of it, and each capability alone gets it too."""
    build_fake_driver(tmp_path, ld_cache=False, compat32=False)
    lib64 = tmp_path / LIB64_DIR.lstrip("/")
    real = f"libnvidia-gpucomp.so.{DRIVER_VERSION}"
    (lib64 / real).write_bytes(elf_shared_object(real))
    found = discover(str(tmp_path))
    gpucomp = f"{LIB64_DIR}/{real}"
    assert sorted(f.capability for f in found.files if f.path == gpucomp) == [
        "compute", "graphics"]
    both = [f.path for f in found.files_for({"compute", "graphics"})]
    assert both.count(gpucomp) == 1
    assert len(both) == len(set(both))
    for alone in ("compute", "graphics"):
        assert [f.path for f in found.files_for({alone})].count(gpucomp) == 1


def test_a_wsl2_guest_is_discovered_by_its_dxg_node_not_proc(tmp_path):
    wsl = build_fake_wsl(tmp_path)
    found = discover(str(tmp_path))
    assert found.wsl is not None and found.wsl.driver_store == WSL_STORE
    assert found.driver_root == str(tmp_path) and found.gpus == ()
    assert [(n.path, n.host_path) for n in found.nodes] == [
        ("/dev/dxg", str(wsl.path("/dev/dxg")))]


def test_a_bin_directory_that_is_a_file_is_skipped(tmp_path):
    """A driver root whose /usr/local is a file: its bin folders are not there to search,
    and the binaries of the folders that are are still found."""
    build_fake_driver(tmp_path)
    (tmp_path / "usr/local").write_bytes(b"not a directory\n")
    binaries = [(f.path, f.capability) for f in discover(str(tmp_path)).files
                if f.kind == "bin"]
    assert binaries == [("/usr/bin/nvidia-smi", "utility")]


def test_a_bin_folder_that_is_an_absolute_symlink_leads_into_the_driver_root(tmp_path):
    """A driver root (a driver container's /run/nvidia/driver) whose /usr/local/bin is an
    absolute symlink: it leads into the driver root, never to the host's folder."""
    build_fake_driver(tmp_path)
    (tmp_path / "opt/nv/bin").mkdir(parents=True)
    debugdump = tmp_path / "opt/nv/bin/nvidia-debugdump"
    debugdump.write_text("#!/bin/sh\n# test fixture\n")
    debugdump.chmod(0o755)
    (tmp_path / "usr/local").mkdir()
    (tmp_path / "usr/local/bin").symlink_to("/opt/nv/bin")
    binaries = [(f.path, f.host_path) for f in discover(str(tmp_path)).files if f.kind == "bin"]
    assert binaries == [("/usr/bin/nvidia-smi", str(tmp_path / "usr/bin/nvidia-smi")),
                        ("/usr/local/bin/nvidia-debugdump", str(debugdump))]


@pytest.mark.parametrize("link", ["/opt/nv/lib", "../../../../opt/nv/lib"])
def test_a_library_folder_that_is_a_symlink_leads_into_the_driver_root(tmp_path, link):
    """Without an ld.so.cache, /lib64 an absolute symlink, or one that climbs above the
    driver root (clamped there): its libraries are the driver root's, found where the link
    leads inside it."""
    build_fake_driver(tmp_path, ld_cache=False, compat32=False)
    lib64 = tmp_path / LIB64_DIR.lstrip("/")
    real = f"libcuda.so.{DRIVER_VERSION}"
    (tmp_path / "opt/nv/lib").mkdir(parents=True)
    os.replace(lib64 / real, tmp_path / "opt/nv/lib" / real)
    os.unlink(lib64 / "libcuda.so.1")
    os.symlink(real, tmp_path / "opt/nv/lib/libcuda.so.1")
    (tmp_path / "lib64").symlink_to(link)
    cuda = [(f.path, f.host_path, f.links) for f in discover(str(tmp_path)).files
            if "libcuda" in f.path]
    assert cuda == [(f"/opt/nv/lib/{real}", str(tmp_path / "opt/nv/lib" / real),
                     ("libcuda.so.1",))]


def test_a_library_folder_under_a_file_is_skipped(tmp_path):
    build_fake_driver(tmp_path, ld_cache=False)
    (tmp_path / "lib").write_bytes(b"not a directory\n")  # /lib and /lib/i386-linux-gnu
    found = discover(str(tmp_path))
    assert {(f.path, f.compat32) for f in found.files if "libcuda" in f.path} == {
        (f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}", False),
        (f"{LIB32_DIR}/libcuda.so.{DRIVER_VERSION}", True)}


def test_a_looping_binary_link_is_passed_over_for_the_next_folder(tmp_path):
    build_fake_driver(tmp_path)
    smi = tmp_path / "usr/bin/nvidia-smi"
    (tmp_path / "usr/sbin").mkdir()
    os.replace(smi, tmp_path / "usr/sbin/nvidia-smi")
    smi.symlink_to("nvidia-smi")  # a loop
    binaries = [(f.path, f.host_path) for f in discover(str(tmp_path)).files if f.kind == "bin"]
    assert binaries == [("/usr/sbin/nvidia-smi", str(tmp_path / "usr/sbin/nvidia-smi"))]
