"""GPUDirect Storage, MOFED, gdrcopy and NVSwitch (the feature-gated devices) in direct mode,
`cdi generate` and the legacy hook, on the TEST FIXTURE fake driver tree
(tests/fixtures/fake_driver.py: real nodes made with mknod, `add_fabric`)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ..cli_run import cli
from fixtures.fake_driver import (
    GDRDRV_MAJOR,
    NVIDIA_FS_MAJOR,
    add_fabric,
    build_fake_driver,
    make_bundle,
)
from ..hook_process import HookProcess

from nvdocker2.direct import direct_edit, discover
from nvdocker2.direct.cdi import cdi_spec, gated_spec
from nvdocker2.hook.request import container_request
from nvdocker2.toolkit_config import ToolkitConfig

SCHEMA = json.loads((Path(__file__).parents[2] / "fixtures/cdi_schema.json").read_text())
RUNTIME = "/usr/bin/nvidia-container-runtime"
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
GDS = ["/dev/nvidia-fs0", "/dev/nvidia-fs1"]
MOFED = ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]
NVSWITCH = ["/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitch1"]


@pytest.fixture
def driver(driver):
    """The fake driver tree (tests/unit/conftest.py) with the fabric's devices."""
    add_fabric(driver)
    return driver


def request_for(env):
    return container_request(["NVIDIA_VISIBLE_DEVICES=0", *env], False, [], ToolkitConfig())


def edit(driver, tmp_path, env):
    path, _rootfs, spec = make_bundle(tmp_path)
    request = request_for(env)
    new = direct_edit(spec, str(path), request.devices, ("utility",),
                      driver_root=str(driver.root), runtime_path=RUNTIME, gated=request.gated)
    return [d["path"] for d in new["linux"]["devices"]], new


@pytest.mark.parametrize("env, extra", [
    (["NVIDIA_GDS=enabled"], GDS),
    (["NVIDIA_MOFED=enabled"], MOFED),
    (["NVIDIA_GDRCOPY=enabled"], ["/dev/gdrdrv"]),
    (["NVIDIA_NVSWITCH=enabled"], NVSWITCH),
    (["NVIDIA_GDRCOPY=enabled", "NVIDIA_GDS=enabled"], [*GDS, "/dev/gdrdrv"]),
])
def test_each_gate_adds_exactly_its_nodes(driver, tmp_path, env, extra):
    paths, new = edit(driver, tmp_path, env)
    assert paths == ["/dev/nvidia0", *extra, *CONTROL]
    rules = {(r.get("major"), r.get("minor")) for r in new["linux"]["resources"]["devices"]
             if r.get("allow")}
    by_path = {d["path"]: (d["major"], d["minor"]) for d in new["linux"]["devices"]}
    assert {by_path[p] for p in extra} <= rules


def test_gds_nodes_keep_their_device_numbers(driver, tmp_path):
    _, new = edit(driver, tmp_path, ["NVIDIA_GDS=enabled", "NVIDIA_GDRCOPY=enabled"])
    numbers = {d["path"]: (d["major"], d["minor"]) for d in new["linux"]["devices"]}
    assert numbers["/dev/nvidia-fs1"] == (NVIDIA_FS_MAJOR, 1)
    assert numbers["/dev/gdrdrv"] == (GDRDRV_MAJOR, 0)


@pytest.mark.parametrize("value", ["enabled;x", "Enabled", "true", "1", " enabled", "enabled ",
                                   "enabled,all", ""])
def test_any_value_but_enabled_leaves_the_gate_off(driver, tmp_path, value):
    env = [f"NVIDIA_{g}={value}" for g in ("GDS", "MOFED", "GDRCOPY", "NVSWITCH")]
    assert request_for(env).gated == ()
    paths, _ = edit(driver, tmp_path, env)
    assert paths == ["/dev/nvidia0", *CONTROL]


def test_no_gate_no_fabric_node_and_not_in_all(driver, tmp_path):
    paths, _ = edit(driver, tmp_path, [])
    assert paths == ["/dev/nvidia0", *CONTROL]
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    listed = {n["path"] for d in [*spec["devices"], spec] for n in
              d["containerEdits"].get("deviceNodes", ())}
    assert listed == {"/dev/nvidia0", "/dev/nvidia1", *CONTROL}


def test_a_gate_with_no_nodes_there_adds_nothing(tmp_path):
    fake = build_fake_driver(tmp_path / "driver")
    add_fabric(fake, gds=0, uverbs=0, rdma_cm=False, gdrcopy=False, nvswitch=0)
    env = [f"NVIDIA_{g}=enabled" for g in ("GDS", "MOFED", "GDRCOPY", "NVSWITCH")]
    paths, _ = edit(fake, tmp_path, env)
    assert paths == ["/dev/nvidia0", *CONTROL]


def test_a_regular_file_named_like_a_node_is_left_out(driver, tmp_path):
    (driver.root / "dev/nvidia-fs7").write_text("not a device\n")
    paths, _ = edit(driver, tmp_path, ["NVIDIA_GDS=enabled"])
    assert paths == ["/dev/nvidia0", *GDS, *CONTROL]


@pytest.mark.parametrize("gate, nodes", [("gds", GDS), ("mofed", MOFED),
                                         ("gdrcopy", ["/dev/gdrdrv"]), ("nvswitch", NVSWITCH)])
def test_gated_cdi_spec_is_one_device_all_of_its_own_kind(driver, gate, nodes):
    spec = gated_spec(discover(str(driver.root)), gate)
    jsonschema.validate(spec, SCHEMA)
    assert spec["kind"] == f"nvidia.com/{gate}"
    assert [(d["name"], [n["path"] for n in d["containerEdits"]["deviceNodes"]])
            for d in spec["devices"]] == [("all", nodes)]
    assert "containerEdits" not in spec


def test_cdi_generate_class_gds_writes_its_default_name_and_validates(driver, tmp_path):
    out = tmp_path / "nvidia-gds.json"
    code, stdout, stderr = cli("cdi", "generate", "--driver-root", str(driver.root),
                               "--output", str(out), "--class", "gds")
    assert code == 0, stderr
    assert stdout == f"wrote {out}: nvidia.com/gds=all, 2 device node(s), driver root " \
                     f"{driver.root}\n"
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert [n["hostPath"] for n in doc["devices"][0]["containerEdits"]["deviceNodes"]] == [
        f"{driver.root}{p}" for p in GDS]


def test_cdi_generate_gated_class_without_nodes_fails_in_one_line(tmp_path):
    fake = build_fake_driver(tmp_path / "plain")
    out = tmp_path / "mofed.yaml"
    code, stdout, stderr = cli("cdi", "generate", "--driver-root", str(fake.root), "--output",
                               str(out), "--class", "mofed")
    assert code == 3 and not out.exists() and stdout == ""
    lines = stderr.splitlines()
    assert lines[0] == (f"error: no mofed device nodes: none of {fake.root}/dev/infiniband/"
                        f"uverbs*, {fake.root}/dev/infiniband/rdma_cm")
    assert lines[1].startswith("hint: ") and len(lines) == 2


def test_the_legacy_hook_passes_no_flag_for_gates(tmp_path):
    hook = HookProcess(tmp_path)
    proc, argv = hook.prestart(hook.spec(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled",
                                          "NVIDIA_MOFED=enabled",
                                          "NVIDIA_DRIVER_CAPABILITIES=utility"]))
    assert proc.returncode == 0, proc.stderr
    assert argv[argv.index("configure") + 2:-2] == ["--device=0", "--utility"]


def test_every_gate_the_request_knows_has_nodes_to_give():
    from nvdocker2.direct.gated import GATES
    from nvdocker2.hook.request import GATE_ENVS

    assert [gate for gate, _ in GATE_ENVS] == list(GATES)
