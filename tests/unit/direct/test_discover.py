"""Discovery on the fake driver tree (test fixture): GPUs, device nodes, libraries."""

from __future__ import annotations

import os
import struct
import subprocess

import pytest
from fixtures.fake_driver import (
    DRIVER_VERSION,
    LIB32_DIR,
    LIB64_DIR,
    FakeGpu,
    build_fake_driver,
)

from nvdocker2.direct import DirectError, discover
from nvdocker2.direct.discover import parse_information
from nvdocker2.direct.ldcache import LdCacheError, parse_ld_cache


def test_gpus_are_indexed_in_pci_bus_order_not_by_minor(tmp_path):
    gpus = [
        FakeGpu("0000:81:00.0", 0, "GPU-bbbbbbbb-0000-0000-0000-000000000000"),
        FakeGpu("0000:0a:00.0", 3, "GPU-aaaaaaaa-0000-0000-0000-000000000000"),
    ]
    build_fake_driver(tmp_path, gpus)
    found = discover(str(tmp_path)).gpus
    assert [(g.index, g.minor, g.uuid, g.bus_id) for g in found] == [
        (0, 3, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "0000:0a:00.0"),
        (1, 0, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "0000:81:00.0"),
    ]
    assert found[0].node_path == "/dev/nvidia3"


def test_information_values_keep_their_colons():
    fields = parse_information(
        "GPU UUID: \t GPU-1\nBus Location: \t 0000:3b:00.0\nDevice Minor: 7\n")
    assert fields == {"GPU UUID": "GPU-1", "Bus Location": "0000:3b:00.0", "Device Minor": "7"}


def test_device_numbers_come_from_stat_of_the_nodes(tmp_path):
    build_fake_driver(tmp_path)
    d = discover(str(tmp_path))
    got = {n.path: (n.major, n.minor, n.host_path) for n in d.nodes}
    assert got == {
        "/dev/nvidia0": (195, 0, str(tmp_path / "dev/nvidia0")),
        "/dev/nvidia1": (195, 1, str(tmp_path / "dev/nvidia1")),
        "/dev/nvidiactl": (195, 255, str(tmp_path / "dev/nvidiactl")),
        "/dev/nvidia-modeset": (195, 254, str(tmp_path / "dev/nvidia-modeset")),
        "/dev/nvidia-uvm": (509, 0, str(tmp_path / "dev/nvidia-uvm")),
        "/dev/nvidia-uvm-tools": (509, 1, str(tmp_path / "dev/nvidia-uvm-tools")),
    }
    assert d.problems == ()
    assert d.driver_version == DRIVER_VERSION


def test_a_node_that_is_not_a_char_device_is_reported(tmp_path):
    build_fake_driver(tmp_path)
    (tmp_path / "dev/nvidia1").unlink()
    (tmp_path / "dev/nvidia1").write_text("not a device")
    (tmp_path / "dev/nvidia-uvm-tools").unlink()
    d = discover(str(tmp_path))
    assert d.node("/dev/nvidia1") is None
    assert d.problem("/dev/nvidia1") == f"{tmp_path}/dev/nvidia1 is not a character device"
    assert d.problem("/dev/nvidia-uvm-tools") == f"{tmp_path}/dev/nvidia-uvm-tools does not exist"


def test_no_driver_is_one_clear_error(tmp_path):
    with pytest.raises(DirectError) as err:
        discover(str(tmp_path))
    assert err.value.message == (
        f"no NVIDIA driver found: {tmp_path}/proc/driver/nvidia/gpus does not exist"
    )
    assert "driver-root" in err.value.hint


def test_libraries_come_from_the_driver_roots_ld_cache(tmp_path):
    build_fake_driver(tmp_path)
    d = discover(str(tmp_path))
    assert d.library_source == str(tmp_path / "etc/ld.so.cache")
    libs = {(f.path, f.links, f.capability, f.compat32) for f in d.files if f.kind == "lib"}
    v = DRIVER_VERSION
    assert libs == {
        (f"{LIB64_DIR}/libcuda.so.{v}", ("libcuda.so.1",), "compute", False),
        (f"{LIB64_DIR}/libnvidia-ptxjitcompiler.so.{v}", ("libnvidia-ptxjitcompiler.so.1",),
         "compute", False),
        (f"{LIB64_DIR}/libnvidia-nvvm.so.{v}", ("libnvidia-nvvm.so.4",), "compute", False),
        (f"{LIB64_DIR}/libnvidia-ml.so.{v}", ("libnvidia-ml.so.1",), "utility", False),
        (f"{LIB64_DIR}/libnvcuvid.so.{v}", ("libnvcuvid.so.1",), "video", False),
        (f"{LIB64_DIR}/libGLX_nvidia.so.{v}", ("libGLX_nvidia.so.0",), "graphics", False),
        (f"{LIB32_DIR}/libcuda.so.{v}", ("libcuda.so.1",), "compute", True),
    }
    cuda = next(f for f in d.files if f.path == f"{LIB64_DIR}/libcuda.so.{v}")
    assert cuda.host_path == f"{tmp_path}{LIB64_DIR}/libcuda.so.{v}"
    smi = next(f for f in d.files if f.kind == "bin")
    assert (smi.path, smi.host_path, smi.capability) == (
        "/usr/bin/nvidia-smi", f"{tmp_path}/usr/bin/nvidia-smi", "utility")


def test_the_cache_is_what_counts_not_the_directory(tmp_path):
    build_fake_driver(tmp_path)
    # A library added after ldconfig ran is not in the cache, so the loader would not see it.
    (tmp_path / LIB64_DIR.lstrip("/") / f"libnvidia-cfg.so.{DRIVER_VERSION}").write_bytes(b"x")
    files = discover(str(tmp_path)).files
    assert not any("libnvidia-cfg" in f.path for f in files)


def test_without_ld_cache_the_library_directories_are_searched(tmp_path):
    build_fake_driver(tmp_path, ld_cache=False)
    d = discover(str(tmp_path))
    assert d.library_source == "library directories"
    cuda = [f for f in d.files if os.path.basename(f.path).startswith("libcuda.so.")]
    assert {(f.path, f.links, f.compat32) for f in cuda} == {
        (f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}", ("libcuda.so.1",), False),
        (f"{LIB32_DIR}/libcuda.so.{DRIVER_VERSION}", ("libcuda.so.1",), True),
    }


def test_libraries_of_another_driver_version_are_skipped(tmp_path):
    build_fake_driver(tmp_path)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    )
    d = discover(str(tmp_path))
    assert d.driver_version == "550.54.14"
    assert [f for f in d.files if f.kind == "lib"] == []


def test_ld_cache_reader_agrees_with_ldconfig_on_the_host():
    with open("/etc/ld.so.cache", "rb") as f:
        entries = parse_ld_cache(f.read())
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    expected = []
    for line in out.splitlines()[1:]:
        if "=>" in line:
            name = line.strip().split(" (", 1)[0]
            expected.append((name, line.rsplit("=> ", 1)[1]))
    assert len(expected) > 10
    assert [(e.name, e.path) for e in entries] == expected


def _new_format(entries: list[tuple[int, str, str]]) -> bytes:
    """A glibc-ld.so.cache1.1 table; string offsets count from its own header."""
    strings = b""
    table = b""
    str_start = 48 + 24 * len(entries)
    for flags, key, value in entries:
        k = str_start + len(strings)
        strings += key.encode() + b"\0"
        v = str_start + len(strings)
        strings += value.encode() + b"\0"
        table += struct.pack("<iIIIQ", flags, k, v, 0, 0)
    head = struct.pack("<20sIIB3xI12x", b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0)
    return head + table + strings


def test_ld_cache_reader_reads_the_old_compat_layout():
    new = _new_format([(0x0303, "libcuda.so.1", "/usr/lib64/libcuda.so.1")])
    old = b"ld.so-1.7.0\0" + struct.pack("<I", 1) + struct.pack("<iII", 3, 0, 0)
    pad = bytes((-len(old)) % 8)
    entries = parse_ld_cache(old + pad + new)
    assert [(e.name, e.path, e.flags) for e in entries] == [
        ("libcuda.so.1", "/usr/lib64/libcuda.so.1", 0x0303)
    ]


@pytest.mark.parametrize(
    "data", [b"", b"garbage", b"glibc-ld.so.cache1.1" + b"\xff" * 40, b"ld.so-1.7.0\0\0\0\0\0"]
)
def test_ld_cache_reader_refuses_a_broken_file(data):
    with pytest.raises(LdCacheError):
        parse_ld_cache(data)


def _cache_of(tmp_path, entries: list[tuple[int, str, str]]) -> None:
    """The fake driver's ld.so.cache, as ldconfig would write it with these entries."""
    (tmp_path / "etc/ld.so.cache").write_bytes(_new_format(entries))


def _libs(found) -> set[tuple[str, bool]]:
    return {(f.path, f.compat32) for f in found.files if f.kind == "lib"}


def test_only_the_loaders_own_cache_entries_are_the_drivers(tmp_path):
    """On x86_64: an x86-64 glibc entry is native, an i386 one (no arch bits) 32-bit; a libc5
    entry and an x32 one are libraries the driver's loader would never use."""
    build_fake_driver(tmp_path, ld_cache=False)
    v = DRIVER_VERSION
    _cache_of(tmp_path, [
        (0x0302, "libnvidia-ml.so.1", f"{LIB64_DIR}/libnvidia-ml.so.1"),  # libc5, x86-64
        (0x0803, "libnvcuvid.so.1", f"{LIB64_DIR}/libnvcuvid.so.1"),  # x32
        (0x0303, "libcuda.so.1", f"{LIB64_DIR}/libcuda.so.1"),
        (0x0003, "libcuda.so.1", f"{LIB32_DIR}/libcuda.so.1"),
    ])
    found = discover(str(tmp_path))
    assert found.library_source == str(tmp_path / "etc/ld.so.cache")
    assert _libs(found) == {(f"{LIB64_DIR}/libcuda.so.{v}", False),
                            (f"{LIB32_DIR}/libcuda.so.{v}", True)}


@pytest.mark.parametrize("machine, native, chosen", [
    # An aarch64 host's cache: its own entries, never the x86-64 or 32-bit (armhf) ones.
    ("aarch64", 0x0A03, {(f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}", False)}),
    # A machine the reader has no flags for: every glibc entry is taken as its own.
    ("riscv64", 0x0403, {(f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}", False),
                         (f"{LIB64_DIR}/libnvcuvid.so.{DRIVER_VERSION}", False),
                         (f"{LIB64_DIR}/libnvidia-ml.so.{DRIVER_VERSION}", False)}),
])
def test_the_cache_entries_taken_depend_on_the_hosts_machine(tmp_path, monkeypatch, machine,
                                                             native, chosen):
    build_fake_driver(tmp_path, ld_cache=False)
    _cache_of(tmp_path, [
        (native, "libcuda.so.1", f"{LIB64_DIR}/libcuda.so.1"),
        (0x0303, "libnvcuvid.so.1", f"{LIB64_DIR}/libnvcuvid.so.1"),
        (0x0003, "libnvidia-ml.so.1", f"{LIB64_DIR}/libnvidia-ml.so.1"),
        (0x0002, "libGLX_nvidia.so.0", f"{LIB64_DIR}/libGLX_nvidia.so.0"),  # libc5
    ])
    host = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(
        (host.sysname, host.nodename, host.release, host.version, machine)))
    assert _libs(discover(str(tmp_path))) == chosen
