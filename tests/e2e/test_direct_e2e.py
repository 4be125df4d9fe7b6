"""Direct mode end to end (reference §7): a private dockerd with runc and this package's runtime in
`mode = "direct"`, pointed at the TEST FIXTURE fake driver tree (tests/fixtures/fake_driver.py:
real character device nodes made with mknod, tiny ELF libraries, a real ld.so.cache, a fake
nvidia-smi script). No nvidia-container-cli exists anywhere on this daemon's PATH.

One daemon serves the module, started with NVIDIA_CONTAINER_RUNTIME_CONFIG pointing at the
test config.toml and two runtimes: `nvidia` (the packaged sh launcher) and `nvidia-console`
(the pip console script).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver
from privatedockerd import PrivateDockerd

from nvdocker2.runtime.launcher import write_launchers

CONSOLE_BIN = Path(sys.executable).parent
CUDA = f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}"
NVML = f"{LIB64_DIR}/libnvidia-ml.so.{DRIVER_VERSION}"


class DirectSetup:
    def __init__(self, root: Path):
        self.root = root
        self.driver = build_fake_driver(root / "driver")
        self.bin = root / "bin"
        self.bin.mkdir()
        write_launchers(str(self.bin))
        self.config = root / "config.toml"
        self.config.write_text(
            f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{self.driver.root}"\n'
            '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n'
        )


@pytest.fixture(scope="module")
def direct(tmp_path_factory, e2e_prerequisites):
    setup = DirectSetup(tmp_path_factory.mktemp("direct"))
    config = {"runtimes": {
        "nvidia": {"path": str(setup.bin / "nvidia-container-runtime")},
        "nvidia-console": {"path": str(CONSOLE_BIN / "nvidia-container-runtime")},
    }}
    env = dict(os.environ)
    env["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = str(setup.config)
    daemon = PrivateDockerd(config=json.dumps(config).encode(), env=env)
    try:
        daemon.start()
        setup.daemon = daemon
        yield setup
    finally:
        daemon.cleanup()


@pytest.fixture
def d(direct):
    ids = direct.daemon.docker("ps", "-aq").stdout.split()
    if ids:
        direct.daemon.docker("rm", "-f", *ids)
    return direct


def run(d, *args, runtime="nvidia", check=True):
    return d.daemon.docker("run", "--rm", "--network=none", f"--runtime={runtime}", *args,
                           check=check, timeout=120)


def sh(d, env, script, runtime="nvidia", image=None):
    flags = [a for e in env for a in ("-e", e)]
    return run(d, *flags, image or d.daemon.image, "sh", "-c", script, runtime=runtime).stdout


PROBE = (
    "for n in nvidia0 nvidia1 nvidiactl nvidia-uvm; do"
    " if [ -c /dev/$n ]; then echo \"$n $(stat -c '%t:%T' /dev/$n)\"; else echo \"$n absent\"; fi;"
    " done;"
    f" for f in {CUDA} {NVML} /usr/bin/nvidia-smi; do"
    "  if [ -e $f ]; then echo \"$f present\"; else echo \"$f absent\"; fi; done;"
    f" echo x 2>/dev/null > {NVML} && echo nvml-writable || echo nvml-read-only;"
)


@pytest.mark.parametrize("runtime", ["nvidia", "nvidia-console"])
def test_gpu_by_index_gets_only_that_node_and_read_only_driver_files(d, runtime):
    out = sh(d, ["NVIDIA_VISIBLE_DEVICES=1"], PROBE + f" readlink {LIB64_DIR}/libcuda.so.1;"
             f" grep -c ' {CUDA} ro,' /proc/self/mountinfo", runtime=runtime)
    assert out.splitlines() == [
        "nvidia0 absent",
        "nvidia1 c3:1",
        "nvidiactl c3:ff",
        "nvidia-uvm 1fd:0",
        f"{CUDA} present",
        f"{NVML} present",
        "/usr/bin/nvidia-smi present",
        "nvml-read-only",
        f"libcuda.so.{DRIVER_VERSION}",
        "1",
    ]


def test_gpu_by_uuid(d):
    uuid = d.driver.gpus[0].uuid
    out = sh(d, [f"NVIDIA_VISIBLE_DEVICES={uuid}"], PROBE)
    assert out.splitlines()[:2] == ["nvidia0 c3:0", "nvidia1 absent"]


def test_utility_capability_gives_nvidia_smi_but_not_libcuda(d):
    out = sh(d, ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"],
             PROBE + " nvidia-smi")
    lines = out.splitlines()
    assert lines[:2] == ["nvidia0 c3:0", "nvidia1 c3:1"]
    assert lines[4:8] == [f"{CUDA} absent", f"{NVML} present", "/usr/bin/nvidia-smi present",
                          "nvml-read-only"]
    assert lines[8:] == [f"GPU {i}: {g.model} (UUID: {g.uuid})"
                         for i, g in enumerate(d.driver.gpus)]


def test_the_containers_ld_cache_knows_the_driver_libraries(d):
    out = sh(d, ["NVIDIA_VISIBLE_DEVICES=0"],
             "tr '\\0' '\\n' < /etc/ld.so.cache | grep -E 'lib(cuda|nvidia-ml)[.]so[.]1$'")
    # ldconfig stores a name as the tail of its path string, so the paths are what shows.
    assert sorted(out.splitlines()) == [
        f"{LIB64_DIR}/libcuda.so.1", f"{LIB64_DIR}/libnvidia-ml.so.1"]


def test_a_container_without_gpu_request_is_left_alone(d):
    out = sh(d, [], PROBE)
    assert out.splitlines()[:4] == ["nvidia0 absent", "nvidia1 absent", "nvidiactl absent",
                                    "nvidia-uvm absent"]


def test_unknown_uuid_fails_docker_run_with_the_message(d):
    proc = run(d, "-e", "NVIDIA_VISIBLE_DEVICES=GPU-deadbeef", d.daemon.image, "true",
               check=False)
    assert proc.returncode != 0
    assert "NVIDIA_VISIBLE_DEVICES: unknown GPU UUID 'GPU-deadbeef'" in proc.stderr
    assert d.daemon.docker("ps", "-aq").stdout == ""


def test_an_image_symlink_pointing_out_of_the_rootfs_is_refused(d, tmp_path):
    target = tmp_path / "host-dir"
    target.mkdir()
    up = "../" * 12
    d.daemon.docker("run", "--name", "mkevil", "--network=none", d.daemon.image, "sh", "-c",
                    f"mkdir -p /usr/lib && ln -s {up}{str(target).lstrip('/')} {LIB64_DIR}")
    d.daemon.docker("commit", "mkevil", "nvd2-evil:latest")
    try:
        proc = run(d, "-e", "NVIDIA_VISIBLE_DEVICES=0", "nvd2-evil:latest", "true", check=False)
        assert proc.returncode != 0
        assert (f"{LIB64_DIR} in the container image is a symlink to '{up}"
                in proc.stderr)
        assert "which leads outside the container's root; refusing it" in proc.stderr
        assert os.listdir(target) == []
    finally:
        d.daemon.docker("rm", "-f", "mkevil", check=False)
        d.daemon.docker("rmi", "nvd2-evil:latest", check=False)
