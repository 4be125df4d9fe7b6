"""MIG devices and IMEX channels in direct mode, `cdi generate` and the legacy hook, on the
TEST FIXTURE fake driver tree (tests/fixtures/fake_driver.py: real caps and channel nodes made
with mknod, /proc MIG capability files, mig-minors) and its stand-in libnvidia-ml compiled
with gcc (the hardware boundary: it reports NVIDIA's MIG indices and UUIDs)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import jsonschema
import pytest
from fixtures.fake_driver import (
    CAPS_MAJOR,
    IMEX_MAJOR,
    add_imex,
    add_mig,
    build_fake_driver,
    build_fake_nvml,
    default_migs,
    mig_minor,
)
from ..hook_process import HookProcess

from nvdocker2.direct import DirectError, direct_edit, discover
from nvdocker2.direct.cdi import IMEX_KIND, cdi_spec, imex_spec
from nvdocker2.direct.discover import discover_mig
from nvdocker2.hook.request import RequestError, container_request
from nvdocker2.toolkit_config import ToolkitConfig

SCHEMA = json.loads((Path(__file__).parents[2] / "fixtures/cdi_schema.json").read_text())
RUNTIME = "/usr/bin/nvidia-container-runtime"
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
# default_migs(): NVML numbers gpu0/gi2/ci0 as 0:0, gi2/ci1 as 0:1, gi1/ci0 as 0:2
MIG_A, MIG_B, MIG_C = (m.uuid for m in default_migs())


def cap(gi, ci=None):
    return f"/dev/nvidia-caps/nvidia-cap{mig_minor(0, gi, ci)}"


@pytest.fixture
def driver(driver, tmp_path):
    """The fake driver tree (tests/unit/conftest.py) with MIG devices and IMEX channels."""
    add_mig(driver, default_migs())
    add_imex(driver, [0, 5])
    build_fake_nvml(driver, tmp_path)
    return driver


def edit(driver, bundle, devices, caps=("utility",), **kw):
    path, _rootfs, spec = bundle
    return direct_edit(spec, str(path), devices, caps, driver_root=str(driver.root),
                       runtime_path=RUNTIME, **kw)


def dev_paths(spec):
    return [d["path"] for d in spec["linux"]["devices"]]


def test_discovery_lists_instances_from_proc_with_their_caps_nodes(driver):
    layout = discover_mig(discover(str(driver.root)))
    assert [(d.gpu.minor, d.gi, d.ci) for d in layout.devices] == [(0, 1, 0), (0, 2, 0), (0, 2, 1)]
    assert [[n.path for n in d.nodes] for d in layout.devices] == [
        [cap(1), cap(1, 0)], [cap(2), cap(2, 0)], [cap(2), cap(2, 1)]]
    node = layout.devices[0].nodes[1]
    assert (node.major, node.minor) == (CAPS_MAJOR, mig_minor(0, 1, 0))
    assert layout.config.path == "/dev/nvidia-caps/nvidia-cap1"
    assert layout.monitor.path == "/dev/nvidia-caps/nvidia-cap2"


@pytest.mark.parametrize("ident, gi, ci", [
    ("0:0", 2, 0), ("0:1", 2, 1), ("0:2", 1, 0),  # NVML's index, not the (gi, ci) order
    (MIG_A, 1, 0), (MIG_C.lower(), 2, 1)])
def test_a_mig_device_gets_its_parent_and_its_instances_caps_and_nothing_else(
        driver, bundle, ident, gi, ci):
    new = edit(driver, bundle, [ident])
    assert dev_paths(new) == ["/dev/nvidia0", cap(gi), cap(gi, ci), *CONTROL]
    rules = new["linux"]["resources"]["devices"][1:]
    assert {(r["major"], r["minor"]) for r in rules if r["major"] == CAPS_MAJOR} == {
        (CAPS_MAJOR, mig_minor(0, gi)), (CAPS_MAJOR, mig_minor(0, gi, ci))}


def test_two_mig_devices_of_one_gpu_share_its_node_and_gi(driver, bundle):
    new = edit(driver, bundle, ["0:0", MIG_C, "1"])
    assert dev_paths(new) == ["/dev/nvidia1", "/dev/nvidia0", cap(2), cap(2, 0), cap(2, 1),
                              *CONTROL]


def test_all_gives_every_gpu_and_every_mig_device_without_config_or_monitor(driver, bundle):
    new = edit(driver, bundle, "all")
    assert dev_paths(new) == ["/dev/nvidia0", "/dev/nvidia1", cap(1), cap(1, 0), cap(2),
                              cap(2, 0), cap(2, 1), *CONTROL]


def test_mig_config_and_monitor_caps_only_when_asked(driver, bundle):
    new = edit(driver, bundle, ["0:0"], mig_config=("0",))
    assert "/dev/nvidia-caps/nvidia-cap1" in dev_paths(new)
    assert "/dev/nvidia-caps/nvidia-cap2" not in dev_paths(new)
    new = edit(driver, bundle, "none", mig_monitor="all")
    assert dev_paths(new) == ["/dev/nvidia-caps/nvidia-cap2", "/dev/nvidia0", "/dev/nvidia1",
                              *CONTROL]


def test_mig_config_is_for_privileged_containers_only():
    env = ["NVIDIA_VISIBLE_DEVICES=0:0", "NVIDIA_MIG_CONFIG_DEVICES=all"]
    with pytest.raises(RequestError, match="only allowed in privileged containers"):
        container_request(env, False, [], ToolkitConfig())
    assert container_request(env, True, [], ToolkitConfig()).mig_config == "all"


@pytest.mark.parametrize("ident, message", [
    ("0:7", "NVIDIA_VISIBLE_DEVICES: unknown MIG device '0:7'"),
    ("1:0", "NVIDIA_VISIBLE_DEVICES: unknown MIG device '1:0'"),
    ("MIG-aaaaaaaa-0000-1111-2222-00000000000f",
     "NVIDIA_VISIBLE_DEVICES: unknown MIG device 'MIG-aaaaaaaa-0000-1111-2222-00000000000f'"),
])
def test_a_mig_device_that_does_not_exist_is_refused_and_the_spec_kept(
        driver, bundle, ident, message):
    before = copy.deepcopy(bundle[2])
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["0", ident])
    assert err.value.message == message
    assert "0:0 (" + MIG_B + ")" in err.value.hint
    assert bundle[2] == before


def test_a_missing_caps_node_is_named(driver, bundle):
    os.unlink(driver.path(cap(2, 1)))
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["0:1"])
    assert err.value.message.startswith("NVIDIA_VISIBLE_DEVICES: MIG device '0:1'"
                                        " (gpu0/gi2/ci1): MIG capability gpu0/gi2/ci1/access: ")
    assert "does not exist" in err.value.message


@pytest.mark.parametrize("value", ["MIG-../../etc", "0:1/..", "--mig-config=all", "0:-1",
                                   "MIG-\u0663", "0:1 2"])
def test_mig_ids_with_path_or_argv_characters_are_refused_before_anything(value):
    with pytest.raises(RequestError) as err:
        container_request([f"NVIDIA_VISIBLE_DEVICES={value}"], True, [], ToolkitConfig())
    assert "\n" not in err.value.message and "invalid device id" in err.value.message


def test_nvml_that_another_user_could_replace_is_not_loaded(driver, bundle):
    lib = driver.path(driver.libraries["libnvidia-ml.so.1"])
    lib.chmod(0o757)
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["0:0"])
    assert err.value.message.startswith(f"cannot load {lib} to name MIG devices: not loading")
    assert "writable" in err.value.message


def test_no_mig_request_never_loads_nvml(driver, bundle):
    lib = driver.path(driver.libraries["libnvidia-ml.so.1"])
    lib.chmod(0o757)  # would be refused if it were loaded
    assert dev_paths(edit(driver, bundle, ["1"])) == ["/dev/nvidia1", *CONTROL]


def test_imex_channels_by_number_and_all_only_nodes_that_exist(driver, bundle):
    new = edit(driver, bundle, ["0"], imex=("5",))
    assert dev_paths(new) == ["/dev/nvidia0", "/dev/nvidia-caps-imex-channels/channel5",
                              *CONTROL]
    imex = new["linux"]["devices"][1]
    assert (imex["major"], imex["minor"]) == (IMEX_MAJOR, 5)
    new = edit(driver, bundle, ["0"], imex="all")
    assert [p for p in dev_paths(new) if "imex" in p] == [
        "/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel5"]


def test_an_imex_channel_that_does_not_exist_is_refused(driver, bundle):
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["0"], imex=("0", "3"))
    assert err.value.message.startswith("NVIDIA_IMEX_CHANNELS: no IMEX channel 3 (")
    assert err.value.hint == "this host's IMEX channels: 0, 5"


@pytest.mark.parametrize("value", ["../0", "channel0", "-1", "0,--x", "1048576", "\u0663", "0 1"])
def test_imex_ids_with_path_or_argv_characters_are_refused(value):
    env = ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={value}"]
    with pytest.raises(RequestError) as err:
        container_request(env, True, [], ToolkitConfig())
    assert err.value.message.startswith("NVIDIA_IMEX_CHANNELS: invalid IMEX channel")


def test_imex_request_parses_numbers_and_all():
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=5, 0,5"]
    assert container_request(env, True, [], ToolkitConfig()).imex_channels == ("5", "0")
    env[1] = "NVIDIA_IMEX_CHANNELS=all"
    assert container_request(env, True, [], ToolkitConfig()).imex_channels == "all"


def test_cdi_spec_names_mig_devices_as_nvidia_does_and_validates(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    jsonschema.validate(spec, SCHEMA)
    by_name = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]]
               for d in spec["devices"]}
    assert list(by_name) == ["0", "GPU-00000000-1111-2222-3333-444444440000", "1",
                             "GPU-00000001-1111-2222-3333-444444440001", "0:0", MIG_B, "0:1",
                             MIG_C, "0:2", MIG_A, "all"]
    assert by_name["0:1"] == by_name[MIG_C] == ["/dev/nvidia0", cap(2), cap(2, 1)]
    assert by_name["0:2"] == ["/dev/nvidia0", cap(1), cap(1, 0)]
    assert by_name["all"] == ["/dev/nvidia0", "/dev/nvidia1", cap(2), cap(2, 0), cap(2, 1),
                              cap(1), cap(1, 0)]
    common = [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    assert common == CONTROL


def test_imex_cdi_spec_validates(driver):
    spec = imex_spec(discover(str(driver.root)))
    jsonschema.validate(spec, SCHEMA)
    assert spec["kind"] == IMEX_KIND
    assert [(d["name"], [n["path"] for n in d["containerEdits"]["deviceNodes"]])
            for d in spec["devices"]] == [
        ("0", ["/dev/nvidia-caps-imex-channels/channel0"]),
        ("5", ["/dev/nvidia-caps-imex-channels/channel5"]),
        ("all", ["/dev/nvidia-caps-imex-channels/channel0",
                 "/dev/nvidia-caps-imex-channels/channel5"])]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["major"] == IMEX_MAJOR


def test_the_legacy_hook_passes_mig_and_imex_flags(tmp_path):
    hook = HookProcess(tmp_path)
    proc, argv = hook.prestart(hook.spec([
        "NVIDIA_VISIBLE_DEVICES=0:1,MIG-aaaa-01", "NVIDIA_MIG_CONFIG_DEVICES=0",
        "NVIDIA_MIG_MONITOR_DEVICES=all", "NVIDIA_IMEX_CHANNELS=3,0",
        "NVIDIA_DRIVER_CAPABILITIES=utility"]))
    assert proc.returncode == 0, proc.stderr
    assert argv[argv.index("configure") + 2:-2] == [
        "--device=0:1,MIG-aaaa-01", "--mig-config=0", "--mig-monitor=all", "--imex-channel=3,0",
        "--utility"]


def test_the_legacy_hook_refuses_a_hostile_imex_id_in_one_line(tmp_path):
    hook = HookProcess(tmp_path)
    proc, argv = hook.prestart(hook.spec(["NVIDIA_VISIBLE_DEVICES=0",
                                          "NVIDIA_IMEX_CHANNELS=0,--root=/tmp"]))
    assert proc.returncode != 0 and argv is None
    assert proc.stderr.count("\n") == 1 and "NVIDIA_IMEX_CHANNELS: invalid IMEX channel" in \
        proc.stderr


def _nvdocker2(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "nvdocker2", *args], capture_output=True,
                          text=True, timeout=60)


def test_cdi_generate_writes_both_classes_and_they_validate(driver, tmp_path):
    gpu, imex = tmp_path / "gpu.json", tmp_path / "imex.json"
    r = _nvdocker2("cdi", "generate", "--driver-root", str(driver.root), "--output", str(gpu))
    assert r.returncode == 0, r.stderr
    r = _nvdocker2("cdi", "generate", "--driver-root", str(driver.root), "--output", str(imex),
                   "--class", "imex-channel")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote {imex}: 2 IMEX channel(s), driver root {driver.root}\n"
    for path in (gpu, imex):
        jsonschema.validate(json.loads(path.read_text()), SCHEMA)
    names = [d["name"] for d in json.loads(gpu.read_text())["devices"]]
    assert {"0:0", "0:1", "0:2", MIG_A, MIG_B, MIG_C} <= set(names)
    assert json.loads(imex.read_text())["kind"] == "nvidia.com/imex-channel"


def test_cdi_generate_imex_without_channels_fails_in_one_line(tmp_path):
    fake = build_fake_driver(tmp_path / "plain")
    out = tmp_path / "imex.yaml"
    r = _nvdocker2("cdi", "generate", "--driver-root", str(fake.root), "--output", str(out),
                   "--class", "imex-channel")
    assert r.returncode != 0 and not out.exists()
    assert r.stderr.startswith("error: no IMEX channels under ")
