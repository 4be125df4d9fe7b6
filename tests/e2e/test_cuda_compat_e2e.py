"""CUDA forward compatibility end to end, through Docker in direct mode and Podman in CDI mode.

An image may ship NVIDIA's cuda-compat package: /usr/local/cuda/compat/libcuda.so.X.Y (here a
real ELF whose SONAME is libcuda.so.1, the TEST FIXTURE's `elf_shared_object`) and its
libcuda.so.1 link. Where X is above the driver's major version, the container's
/etc/ld.so.cache must list the compat libcuda.so.1 first and the driver's after it; an equal or
older one changes nothing. Docker decides at `create` (the session's private dockerd, this
checkout's runtime in `mode = "direct"` on the TEST FIXTURE fake driver tree); Podman runs the
spec's createContainer hook (`nvdocker2 cdi generate --cuda-compat`, a private rootful Podman).

Four images, each `import`ed from the same busybox-static rootfs with an empty /usr/local/cuda:
the base, and the base with a compat folder whose libcuda is newer, equal or older than the
driver's. What a user sees is compared: the cache read out of the container (parsed here with
`parse_ld_cache`), the character devices and their numbers, the mounts, and every file of the
container's root, against the base image's container given the same GPU.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver, elf_shared_object
from privatedockerd import busybox_rootfs_tar
from privatepodman import PrivatePodman, image_tar, runtime_launcher
from test_direct_e2e import DirectSetup

from nvdocker2.direct.ldcache import parse_ld_cache
from nvdocker2.runtime import launcher

REPO = Path(__file__).resolve().parents[2]
COMPAT = "/usr/local/cuda/compat"
COMPAT_LIBCUDA = f"{COMPAT}/libcuda.so.1"
DRIVER_LIBCUDA = f"{LIB64_DIR}/libcuda.so.1"
NEWER, EQUAL, OLDER = "550.54.15", "535.54.03", "530.30.02"  # the driver is 535.104.05
IMAGES = {"base": None, "newer": NEWER, "equal": EQUAL, "older": OLDER}

# Sections of what a container prints, each after a `--- NAME` line: its character devices
# with major:minor in hex, its mounts but the root's (mount point and options), every path of
# its root file system (type, name, a link's target), and its ld cache in base64.
PROBE = (
    "echo '--- devices'; find /dev -type c | sort"
    " | while read n; do echo \"$n $(stat -c '%t:%T' $n)\"; done;"
    " echo '--- mounts'; awk '$2 != \"/\" {print $2, $4}' /proc/mounts | sort;"
    " echo '--- files'; find / -xdev | sort | xargs stat -c '%F %N';"
    " echo '--- cache'; if [ -e /etc/ld.so.cache ]; then base64 /etc/ld.so.cache; fi"
)


def compat_folder(version: str) -> list[tuple[str, object]]:
    """The cuda-compat package's files: its libcuda, version `version`, and the soname link."""
    return [
        (COMPAT, ("dir",)),
        (f"{COMPAT}/libcuda.so.{version}", ("file", elf_shared_object("libcuda.so.1"), 0o755)),
        (f"{COMPAT}/libcuda.so.1", ("symlink", f"libcuda.so.{version}")),
    ]


def image_entries(version: str | None) -> list[tuple[str, object]]:
    """What an image adds to the busybox-static rootfs: /usr/local/cuda, and with `version` a
    compat folder in it."""
    base: list[tuple[str, object]] = [("/usr/local", ("dir",)), ("/usr/local/cuda", ("dir",))]
    return base + (compat_folder(version) if version else [])


def compat_files(version: str) -> set[str]:
    """The lines PROBE's `files` section prints for the compat folder of `version`."""
    return {f"directory {COMPAT}", f"regular file {COMPAT}/libcuda.so.{version}",
            f"symbolic link '{COMPAT}/libcuda.so.1' -> 'libcuda.so.{version}'"}


class Seen:
    """What PROBE printed in one container, by section."""

    def __init__(self, stdout: str):
        sections: dict[str, list[str]] = {}
        lines: list[str] = []
        for line in stdout.splitlines():
            if line.startswith("--- "):
                lines = sections.setdefault(line[4:], [])
            else:
                lines.append(line)
        assert set(sections) == {"devices", "mounts", "files", "cache"}, stdout[-2000:]
        self.devices = sections["devices"]
        self.mounts = sections["mounts"]
        self.files = set(sections["files"])
        data = base64.b64decode("".join(sections["cache"]))
        self.cache = [(e.name, e.path) for e in parse_ld_cache(data)] if data else []

    def libcuda(self) -> list[str]:
        """The paths of the cache's libcuda.so.1 entries, in the cache's order."""
        return [path for name, path in self.cache if name == "libcuda.so.1"]


class Engine:
    """One engine's four images and what their containers show, each container run once."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, bool], Seen] = {}

    def seen(self, image: str, gpu: bool = True) -> Seen:
        """What a container of `image` printed, given GPU 0 or no GPU."""
        if (image, gpu) not in self._seen:
            self._seen[(image, gpu)] = Seen(self.run(image, gpu))
        return self._seen[(image, gpu)]

    def run(self, image: str, gpu: bool) -> str:
        raise NotImplementedError


class DockerDirect(Engine):
    """The session's private dockerd with a runtime `nvidia` in direct mode."""

    def __init__(self, daemon, root: Path):
        super().__init__()
        self.daemon = daemon
        setup = DirectSetup(root)
        # The daemon's environment does not name the test config.toml: the launcher pins it.
        pinned = root / "pinned"
        pinned.mkdir()
        texts = launcher.render(sys.executable, launcher.package_paths(), str(setup.config))
        runtime = pinned / "nvidia-container-runtime"
        runtime.write_text(texts["nvidia-container-runtime"])
        runtime.chmod(0o755)
        self.tags = {image: f"nvd2-compat-{image}:1" for image in IMAGES}
        daemon.reset()
        try:
            daemon.config_file.write_text(
                json.dumps({"runtimes": {"nvidia": {"path": str(runtime)}}}))
            daemon.sighup()
            daemon.wait_info(lambda i: "nvidia" in i.get("Runtimes", {}))
            for image, version in IMAGES.items():
                tar = root / f"{image}.tar"
                tar.write_bytes(image_tar(busybox_rootfs_tar(), image_entries(version)))
                daemon.docker("import", str(tar), self.tags[image])
        except BaseException:
            self.close()
            raise

    def run(self, image: str, gpu: bool) -> str:
        flags = ["--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0"] if gpu else []
        return self.daemon.docker("run", "--rm", "--network=none", *flags, self.tags[image],
                                  "sh", "-c", PROBE, timeout=120).stdout

    def close(self) -> None:
        self.daemon.docker("rmi", *self.tags.values(), check=False)
        self.daemon.reset()


class PodmanCdi(Engine):
    """A private rootful Podman with `nvdocker2 cdi generate`'s spec in its /etc/cdi."""

    def __init__(self, root: Path):
        super().__init__()
        runtime = runtime_launcher(root)
        driver = build_fake_driver(root / "driver")
        spec = root / "nvidia.yaml"
        env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(root / "none.toml"))
        r = subprocess.run(
            [sys.executable, "-m", "nvdocker2", "cdi", "generate", "--output", str(spec),
             "--driver-root", str(driver.root), "--runtime-path", runtime],
            capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO))
        assert r.returncode == 0, r.stderr
        # Its own short root in /tmp: under pytest's basetemp each `podman run` takes 20 s here.
        self.pod = PrivatePodman()
        self.pod.start()
        try:
            self.pod.write_cdi_spec(spec.name, spec.read_text())
            self.tags = {image: self.pod.import_image(f"localhost/nvd2-compat-{image}:1",
                                                      image_entries(version))
                         for image, version in IMAGES.items()}
        except BaseException:
            self.pod.cleanup()
            raise

    def run(self, image: str, gpu: bool) -> str:
        flags = ["--device", "nvidia.com/gpu=0"] if gpu else []
        r = self.pod.podman("run", "--rm", "--network=none", *flags, self.tags[image],
                            "sh", "-c", PROBE, check=False)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def close(self) -> None:
        self.pod.cleanup()


@pytest.fixture(scope="module", params=["docker", "podman"])
def engine(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"compat-{request.param}")
    if request.param == "docker":
        made: Engine = DockerDirect(request.getfixturevalue("private_dockerd"), root)
    else:
        request.getfixturevalue("podman_prerequisites")
        made = PodmanCdi(root)
    try:
        yield made
    finally:
        made.close()


def test_the_images_differ_only_by_the_compat_folder(engine):
    base = engine.seen("base", gpu=False)
    assert "directory /usr/local/cuda" in base.files and "regular file /bin/busybox" in base.files
    for image in ("newer", "equal", "older"):
        assert engine.seen(image, gpu=False).files ^ base.files == compat_files(IMAGES[image])


def test_a_newer_compat_libcuda_comes_first_in_the_ld_cache_and_nothing_else_changes(engine):
    base, newer = engine.seen("base"), engine.seen("newer")
    assert base.libcuda() == [DRIVER_LIBCUDA]
    assert newer.libcuda() == [COMPAT_LIBCUDA, DRIVER_LIBCUDA]
    assert [e for e in newer.cache if e[1] != COMPAT_LIBCUDA] == base.cache
    assert_nothing_else_changes(engine, "newer")


@pytest.mark.parametrize("image", ["equal", "older"])
def test_an_equal_or_older_compat_libcuda_leaves_the_ld_cache_the_drivers(engine, image):
    assert engine.seen(image).libcuda() == [DRIVER_LIBCUDA]
    assert engine.seen(image).cache == engine.seen("base").cache
    assert_nothing_else_changes(engine, image)


def assert_nothing_else_changes(engine: Engine, image: str) -> None:
    """The container of `image` got the base image's devices, mounts and files with the GPU,
    its compat folder left as the image has it."""
    base, seen = engine.seen("base"), engine.seen(image)
    assert "/dev/nvidia0 c3:0" in base.devices and "/dev/nvidia1 c3:1" not in base.devices
    assert f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}" in " ".join(base.mounts)
    assert seen.devices == base.devices
    assert seen.mounts == base.mounts
    assert seen.files ^ base.files == compat_files(IMAGES[image])
