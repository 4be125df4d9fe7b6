"""Which device nodes each feature gate brings (nvdocker2.direct.gated.gated_nodes), on a
private driver root with real character devices made with mknod: exactly these paths, in this
order, each once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nvdocker2.direct.gated import gated_nodes

NODES = ["nvidia-fs0", "nvidia-fs1", "nvidia-fs10", "infiniband/uverbs1", "infiniband/uverbs0",
         "infiniband/rdma_cm", "gdrdrv", "nvidia-nvswitch0", "nvidia-nvswitchctl"]


def root_with(tmp_path: Path, *names: str) -> str:
    for minor, name in enumerate(names):
        path = tmp_path / "dev" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, stat.S_IFCHR | 0o660, os.makedev(240, minor))
        os.chmod(path, 0o660)
    return str(tmp_path)


def paths(root: str, *gates: str) -> list[str]:
    return [n.path for n in gated_nodes(root, gates)]


@pytest.mark.parametrize("gate, want", [
    ("gds", ["/dev/nvidia-fs0", "/dev/nvidia-fs1", "/dev/nvidia-fs10"]),
    ("mofed", ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1",
               "/dev/infiniband/rdma_cm"]),
    ("gdrcopy", ["/dev/gdrdrv"]),
    ("nvswitch", ["/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0"]),
])
def test_each_gate_brings_its_nodes_in_pattern_order(tmp_path, gate, want):
    assert paths(root_with(tmp_path, *NODES), gate) == want


def test_gates_in_the_order_asked_each_node_once(tmp_path):
    root = root_with(tmp_path, *NODES)
    assert paths(root, "gdrcopy", "gds", "gdrcopy") == [
        "/dev/gdrdrv", "/dev/nvidia-fs0", "/dev/nvidia-fs1", "/dev/nvidia-fs10"]
    assert paths(root) == []


def test_a_node_keeps_its_numbers_and_host_path(tmp_path):
    root = root_with(tmp_path, "gdrdrv")
    node, = gated_nodes(root, ["gdrcopy"])
    assert (node.path, node.host_path, node.major, node.minor, node.file_mode) == (
        "/dev/gdrdrv", f"{tmp_path}/dev/gdrdrv", 240, 0, 0o660)


def test_what_is_missing_or_no_character_device_or_another_case_is_left_out(tmp_path):
    root = root_with(tmp_path, "NVIDIA-FS0", "nvidia-fsx")
    (tmp_path / "dev" / "nvidia-fs1").write_text("")
    (tmp_path / "dev" / "nvidia-fs2").mkdir()
    assert paths(root, "gds", "gdrcopy", "nvswitch") == ["/dev/nvidia-fsx"]
    assert paths(root, "mofed") == []  # no /dev/infiniband at all
