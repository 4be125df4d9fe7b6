"""Hostile images against the CDI spec's createContainer hook, end to end on rootful Podman.

The spec is `nvdocker2 cdi generate`'s (direct mode's discovery and hook) for the TEST FIXTURE
fake driver tree (tests/fixtures/fake_driver.py), its hook this checkout's runtime launcher.
Podman (privatepodman.py: private storage, config and /etc/cdi) runs each image with runc as
an operator would: `--user 1000` and a volume. Each image is built here by `podman import` of
a busybox-static rootfs plus the image's trap: a symlink that steers the operator's volume onto
a file the host's ldconfig writes or reads, or a crafted ldconfig aux cache.

What a user would see is asserted: the operator's files keep their bytes, the start succeeds
or fails with one line, and the container's /etc/ld.so.cache (read through the container)
lists libcuda.so.1 and libnvidia-ml.so.1 at paths that hold the driver's files.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver, elf_shared_object
from privatepodman import PrivatePodman, runtime_launcher

from nvdocker2.cdi_validate import READERS, validate
from nvdocker2.direct import discover
from nvdocker2.direct.cdi import cdi_spec
from nvdocker2.direct.ldcache import parse_ld_cache

GPU = "nvidia.com/gpu=all"
DEBIAN_GPU = "debian.test/gpu=all"
USER = "1000"


@pytest.fixture(scope="module")
def pod(tmp_path_factory, podman_prerequisites):
    root = tmp_path_factory.mktemp("podman")
    runtime = runtime_launcher(root)
    podman = PrivatePodman()  # its own short root in /tmp: under pytest's a run takes 20 s
    podman.start()
    try:
        layouts = (("nvidia", "standard", None), ("debian", "debian", "debian.test/gpu"))
        for name, layout, kind in layouts:
            driver = build_fake_driver(root / f"driver-{name}", layout=layout)
            spec = cdi_spec(discover(str(driver.root)), runtime_path=runtime,
                            ldconfig="/sbin/ldconfig")
            if kind:
                spec["kind"] = kind
            text = json.dumps(spec, indent=2)
            report = validate(f"/etc/cdi/{name}.json", text.encode(), list(READERS.values()))
            assert report.ok, [str(v.error) for v in report.verdicts if not v.ok]
            podman.write_cdi_spec(f"{name}.json", text)
        yield podman
    finally:
        podman.cleanup()


def run(pod, image: str, *cmd: str, device: str = GPU, volumes=(), user: str | None = USER):
    argv = ["run", "--rm", "--network=none", "--device", device]
    if user:
        argv += ["--user", user]
    for v in volumes:
        argv += ["-v", v]
    return pod.podman(*argv, image, *cmd, check=False)


def ld_cache(pod, image: str, *, device: str = GPU, volumes=()) -> dict[str, str]:
    """name -> path of the container's /etc/ld.so.cache, as `ldconfig -p` would list it."""
    proc = run(pod, image, "od", "-An", "-v", "-tx1", "/etc/ld.so.cache", device=device,
               volumes=volumes)
    assert proc.returncode == 0, proc.stderr
    data = bytes.fromhex("".join(proc.stdout.split()))
    return {e.name: e.path for e in parse_ld_cache(data)}


def host_file(path: Path, data: bytes, mode: int) -> Path:
    path.write_bytes(data)
    os.chown(path, 0, 0)
    path.chmod(mode)
    return path


def assert_driver_libraries_load(pod, image, *, device=GPU, volumes=(), real_dir=LIB64_DIR):
    cache = ld_cache(pod, image, device=device, volumes=volumes)
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        assert soname in cache, sorted(cache)
        base = soname.rsplit(".", 1)[0]
        proc = run(pod, image, "readlink", "-f", cache[soname], device=device, volumes=volumes)
        assert proc.stdout.strip() == f"{real_dir}/{base}.{DRIVER_VERSION}", proc.stderr


# --- the libraries load -----------------------------------------------------------------------


def test_libcuda_and_nvml_are_in_the_ld_cache_of_a_user_1000_container_with_a_volume(
    pod, tmp_path
):
    image = pod.import_image("localhost/nvd2-plain:1")
    data = tmp_path / "data"
    data.mkdir()
    assert_driver_libraries_load(pod, image, volumes=[f"{data}:/data"])


def test_the_debian_nvidia_current_layout_loads_too(pod, tmp_path):
    image = pod.import_image("localhost/nvd2-plain:1")
    data = tmp_path / "data"
    data.mkdir()
    assert_driver_libraries_load(pod, image, device=DEBIAN_GPU, volumes=[f"{data}:/data"],
                                 real_dir=f"{LIB64_DIR}/nvidia/current")


# --- case 1: writes through a mounted host file ------------------------------------------------


@pytest.mark.parametrize("target", ["/var/cache/ldconfig/aux-cache~", "/etc/ld.so.cache~"])
def test_a_volume_steered_onto_a_file_ldconfig_writes_keeps_its_bytes(pod, tmp_path, target):
    """The image links /data/app.conf to a file root's ldconfig writes; the operator mounts a
    root-owned 0644 file there for user 1000. A library whose DT_SONAME holds a newline would
    put a line of the image's choosing into that file. The aux cache is never written, so that
    container starts; the ld cache's own temp file as a mount point is refused (renaming it
    would move the operator's file onto the container's /etc/ld.so.cache)."""
    image = pod.import_image("localhost/nvd2-steer-write:1", [
        ("/var/cache/ldconfig", ("dir",)),
        ("/data", ("dir",)),
        ("/data/app.conf", ("symlink", target)),
        ("/usr/lib/libevil.so.1", elf_shared_object("libevil.so.1\nowned=yes\n")),
    ])
    original = b"setting = operator's value\n"
    app_conf = host_file(tmp_path / "app.conf", original, 0o644)
    volumes = [f"{app_conf}:/data/app.conf"]

    proc = run(pod, image, "true", volumes=volumes)
    assert app_conf.read_bytes() == original
    if target.startswith("/etc/"):
        assert proc.returncode != 0
        errors = [line for line in proc.stderr.splitlines() if "error: " in line]
        assert len(errors) == 1, proc.stderr
        assert ("error: /etc/ld.so.cache~ in the container is a mount point (a volume that the"
                " image's symlinks put there?); refusing to write the ld cache over it"
                ) in errors[0]
        return
    assert proc.returncode == 0, proc.stderr
    assert "libcuda.so.1" in ld_cache(pod, image, volumes=volumes)
    assert app_conf.read_bytes() == original


def test_a_library_directory_on_a_volume_is_refused_and_gets_no_links(pod, tmp_path):
    """The image's library directory is a symlink into /data, where the operator mounts a
    host directory read-write: the soname links would be made in the host directory, as root."""
    image = pod.import_image("localhost/nvd2-lib-on-volume:1", [
        ("/data", ("dir",)),
        (LIB64_DIR, ("symlink", "/data/lib")),
    ])
    host_dir = tmp_path / "host-lib"
    host_dir.mkdir()

    proc = run(pod, image, "true", volumes=[f"{host_dir}:/data/lib"])
    assert [p.name for p in host_dir.iterdir() if p.is_symlink()] == []
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "error: " in line]
    assert len(errors) == 1, proc.stderr
    assert (f"error: {LIB64_DIR} in the container resolves to /data/lib, which is on another"
            " mount than the container image (a volume?); refusing to make links or run"
            " ldconfig there") in errors[0]


# --- case 2: reads through a mounted host file -------------------------------------------------


def test_a_secret_steered_onto_ld_so_conf_is_not_read_by_ldconfig(pod, tmp_path):
    """The image links /data/secret to /etc/ld.so.conf and ships libraries in directories it
    guesses; the operator mounts a root-only 0600 file there read-only for user 1000. Which
    guesses show up in the world-readable ld.so.cache would tell what the secret lists."""
    guesses = [f"/guess{i}" for i in range(3)]
    extra = [("/data", ("dir",)), ("/data/secret", ("symlink", "/etc/ld.so.conf"))]
    for i, g in enumerate(guesses):
        extra += [(g, ("dir",)), (f"{g}/libguess{i}.so.1", elf_shared_object(f"libguess{i}.so.1"))]
    image = pod.import_image("localhost/nvd2-steer-read:1", extra)
    secret = host_file(tmp_path / "secret", b"/guess1\n", 0o600)
    volumes = [f"{secret}:/data/secret:ro"]

    assert run(pod, image, "cat", "/data/secret", volumes=volumes).returncode != 0
    cache = ld_cache(pod, image, volumes=volumes)
    assert "libcuda.so.1" in cache
    assert [p for p in cache.values() if p.startswith("/guess")] == []


# --- case 3: root parses the image's aux cache -------------------------------------------------


def crafted_aux_cache() -> bytes:
    """81 bytes: one entry whose soname offset points far outside the file; glibc's ldconfig
    copies that "string" when it loads its aux cache and dies with SIGSEGV."""
    header = b"glibc-ld.so.auxcache-2.0" + struct.pack("<II", 1, 1)
    entry = struct.pack("<QQQQiIII", 1, 2, 3, 4, 1, 0x7FFFFFF0, 0, 0)
    return header + entry + b"\0"


def test_an_image_aux_cache_is_never_parsed_by_root(pod, tmp_path):
    aux = crafted_aux_cache()
    assert len(aux) == 81
    image = pod.import_image("localhost/nvd2-aux-cache:1", [
        ("/var/cache/ldconfig", ("dir",)),
        ("/var/cache/ldconfig/aux-cache", aux),
    ])
    data = tmp_path / "data"
    data.mkdir()
    volumes = [f"{data}:/data"]
    proc = run(pod, image, "od", "-An", "-v", "-tx1", "/var/cache/ldconfig/aux-cache",
               volumes=volumes)
    assert proc.returncode == 0, proc.stderr
    assert bytes.fromhex("".join(proc.stdout.split())) == aux  # neither read nor rewritten
    assert "libcuda.so.1" in ld_cache(pod, image, volumes=volumes)
