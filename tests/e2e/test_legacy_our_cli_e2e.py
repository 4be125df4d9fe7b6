"""Legacy mode end to end with OUR nvidia-container-cli (nvdocker2.nvc, through the packages'
sh launcher) where test_gpu_containers.py has the test fixture cli: a private dockerd with
runc, the runtime and the hook of this package, config.toml's `[nvidia-container-cli]` naming
our launcher as `path` and the fake driver tree (tests/fixtures/fake_driver.py) as `root`.

What is asserted is what the container sees (tests/e2e/gpu_inside.py): exactly the device
nodes asked for, the driver files mounted read-only, the libraries in its own ld cache, and,
on cgroup v1, the nodes allowed in its device cgroup.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures.fake_driver import build_fake_driver
from gpu_inside import REPORT, assert_sees_exactly, parse
from privatedockerd import PrivateDockerd

from nvdocker2.runtime.launcher import write_cli_launcher, write_launchers


class Setup:
    def __init__(self, root: Path):
        self.driver = build_fake_driver(root / "driver")
        self.bin = root / "bin"
        self.bin.mkdir()
        write_launchers(str(self.bin))
        libexec = root / "libexec"
        libexec.mkdir()
        self.cli = write_cli_launcher(str(libexec))
        self.config = root / "config.toml"
        self.config.write_text(
            f'[nvidia-container-cli]\npath = "{self.cli}"\nroot = "{self.driver.root}"\n')


@pytest.fixture(scope="module")
def legacy(tmp_path_factory, e2e_prerequisites):
    setup = Setup(tmp_path_factory.mktemp("legacy-our-cli"))
    config = {"runtimes": {"nvidia": {"path": str(setup.bin / "nvidia-container-runtime")}}}
    env = dict(os.environ)
    env["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = str(setup.config)
    with PrivateDockerd(config=json.dumps(config).encode(), env=env,
                        path_prepend=[setup.bin]) as setup.daemon:
        yield setup


def inside(setup, *args, script=REPORT):
    proc = setup.daemon.docker("run", "--rm", "--network=none", *args, setup.daemon.image,
                               "sh", "-c", script, timeout=120)
    return proc.stdout


@pytest.mark.parametrize("request_flags", [
    ("--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1",
     "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"),
    ("--gpus", '"device=1"'),
    ("--gpus", '"device=1"', "--runtime=nvidia"),
], ids=["runtime", "gpus", "gpus-and-runtime"])
def test_our_cli_gives_the_container_exactly_the_asked_gpu(legacy, request_flags):
    seen = parse(inside(legacy, *request_flags))
    assert_sees_exactly(seen, legacy.driver.root, [1])


def test_our_cli_with_all_gpus(legacy):
    seen = parse(inside(legacy, "--gpus", "all"))
    assert_sees_exactly(seen, legacy.driver.root, [0, 1])


def test_our_cli_allows_the_nodes_in_the_containers_device_cgroup(legacy):
    """cgroup v1: the container's devices.list holds the asked GPU and not the other."""
    if not os.path.exists("/sys/fs/cgroup/devices/devices.list"):
        pytest.skip("no cgroup v1 device controller here (our cli refuses on cgroup v2)")
    listed = inside(legacy, "--gpus", '"device=1"',
                    script="cat /sys/fs/cgroup/devices/devices.list").splitlines()
    rdev = os.stat(legacy.driver.path("/dev/nvidia1")).st_rdev
    assert f"c {os.major(rdev)}:{os.minor(rdev)} rwm" in listed
    other = os.stat(legacy.driver.path("/dev/nvidia0")).st_rdev
    assert f"c {os.major(other)}:{os.minor(other)} rwm" not in listed


def test_no_gpu_request_leaves_the_container_without_nvidia_files(legacy):
    seen = parse(inside(legacy, "--runtime=nvidia"))
    assert (seen.nodes, seen.mounts, seen.ld_cache) == ({}, {}, [])
