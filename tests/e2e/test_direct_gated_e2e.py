"""GPUDirect Storage, MOFED and gdrcopy through Docker in direct mode, end to end: a private
dockerd with this package's runtime in `mode = "direct"` on the TEST FIXTURE fake driver tree
(tests/fixtures/fake_driver.py, with `add_fabric`'s real nodes made by mknod). What a user
sees is what is compared: the character devices inside the container."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import GDRDRV_MAJOR, INFINIBAND_MAJOR, NVIDIA_FS_MAJOR, add_fabric
from privatedockerd import PrivateDockerd
from test_direct_e2e import DirectSetup

LIST = "find /dev -type c | sort | while read n; do echo \"$n $(stat -c '%t:%T' $n)\"; done"


@pytest.fixture(scope="module")
def gated(tmp_path_factory, e2e_prerequisites):
    setup = DirectSetup(tmp_path_factory.mktemp("gated"))
    add_fabric(setup.driver)
    config = {"runtimes": {"nvidia": {"path": str(setup.bin / "nvidia-container-runtime")}}}
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(setup.config))
    daemon = PrivateDockerd(config=json.dumps(config).encode(), env=env)
    try:
        daemon.start()
        setup.daemon = daemon
        yield setup
    finally:
        daemon.cleanup()


def nodes(d, *env):
    flags = [a for e in ("NVIDIA_VISIBLE_DEVICES=0", *env) for a in ("-e", e)]
    out = d.daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", *flags,
                          d.daemon.image, "sh", "-c", LIST, timeout=120).stdout
    return set(out.splitlines())


def hexed(path, major, minor):
    return f"{path} {major:x}:{minor:x}"


def test_each_gate_adds_exactly_its_nodes_inside_the_container(gated):
    base = nodes(gated)
    assert hexed("/dev/nvidia0", 195, 0) in base
    assert not [n for n in base if "nvidia-fs" in n or "infiniband" in n or "gdrdrv" in n]
    assert nodes(gated, "NVIDIA_GDS=enabled") - base == {
        hexed("/dev/nvidia-fs0", NVIDIA_FS_MAJOR, 0), hexed("/dev/nvidia-fs1", NVIDIA_FS_MAJOR, 1)}
    assert nodes(gated, "NVIDIA_MOFED=enabled") - base == {
        hexed("/dev/infiniband/uverbs0", INFINIBAND_MAJOR, 192),
        hexed("/dev/infiniband/uverbs1", INFINIBAND_MAJOR, 193),
        hexed("/dev/infiniband/rdma_cm", 10, 58)}  # not umad0 nor issm0
    assert nodes(gated, "NVIDIA_GDRCOPY=enabled") - base == {
        hexed("/dev/gdrdrv", GDRDRV_MAJOR, 0)}
    assert base <= nodes(gated, "NVIDIA_GDS=enabled")


def test_a_hostile_or_other_value_leaves_the_gate_off_as_nvidia_does(gated):
    base = nodes(gated)
    assert nodes(gated, "NVIDIA_GDS=enabled;x", "NVIDIA_MOFED=Enabled",
                 "NVIDIA_GDRCOPY=enabled --device=/dev/sda") == base
