"""What direct mode's plan (nvdocker2.direct.spec) gives a container at its edges, on the
fake driver tree: the one-line refusals and their hints for ids that are no GPU, a GPU, MIG
device or IMEX channel the host lacks, a device node or library that is missing, MIG's config
and monitor capabilities a host does not have; empty ids passed over; "none" for IMEX."""

from __future__ import annotations

import os

import pytest
from fixtures.fake_driver import (
    LIB64_DIR,
    add_imex,
    add_mig,
    build_fake_driver,
    build_fake_nvml,
    default_migs,
    mig_minor,
)

from nvdocker2.direct import DirectError, discover
from nvdocker2.direct.spec import host_ldconfig, make_plan, select_gpus

MIG_A, MIG_B, MIG_C = (m.uuid for m in default_migs())
MIG_HINT = "nvidia-modprobe -f creates the /dev/nvidia-caps nodes"
NODE_HINT = "check the NVIDIA driver installation (nvidia-modprobe creates the device nodes)"


@pytest.fixture
def plain(tmp_path):
    """Two GPUs, no MIG, no IMEX."""
    return build_fake_driver(tmp_path / "plain")


@pytest.fixture
def mig(tmp_path):
    fake = build_fake_driver(tmp_path / "mig")
    add_mig(fake, default_migs())
    build_fake_nvml(fake, tmp_path)
    return fake


def refusal(driver, devices, caps=("utility",), **kw):
    with pytest.raises(DirectError) as raised:
        make_plan(discover(str(driver.root)), devices, caps, **kw)
    return raised.value.message, raised.value.hint


def gpu_hint(driver):
    d = discover(str(driver.root))
    return "this host's GPUs: " + ", ".join(f"{g.index} ({g.uuid})" for g in d.gpus)


def test_empty_ids_are_passed_over(plain):
    d = discover(str(plain.root))
    assert select_gpus(d, ["", " ", "none", "1", "1"]) == (d.gpus[1],)


@pytest.mark.parametrize("ident, message", [
    ("foo", "NVIDIA_VISIBLE_DEVICES: invalid device id 'foo'"),
    ("MIG-0000", "NVIDIA_VISIBLE_DEVICES: 'MIG-0000' names a MIG device, not a GPU"),
    ("GPU-ffff", "NVIDIA_VISIBLE_DEVICES: unknown GPU UUID 'GPU-ffff'"),
])
def test_an_id_that_is_no_gpu_of_this_host_is_refused_with_the_gpus_it_has(plain, ident, message):
    with pytest.raises(DirectError) as raised:
        select_gpus(discover(str(plain.root)), [ident])
    assert (raised.value.message, raised.value.hint) == (message, gpu_hint(plain))


def test_a_missing_gpu_node_is_named_with_its_hint(plain):
    os.unlink(plain.path("/dev/nvidia0"))
    message, hint = refusal(plain, ["0"])
    assert message.startswith("device /dev/nvidia0: ") and hint == NODE_HINT


def test_a_mig_device_needs_its_gpus_node(mig):
    os.unlink(mig.path("/dev/nvidia0"))
    message, hint = refusal(mig, ["0:0"])
    assert message.startswith("device /dev/nvidia0: ") and hint == NODE_HINT


def test_unknown_mig_devices_list_the_ones_there_are(mig, plain):
    message, hint = refusal(mig, ["0:7"])
    assert (message, hint) == (
        "NVIDIA_VISIBLE_DEVICES: unknown MIG device '0:7'",
        f"this host's MIG devices: 0:0 ({MIG_B}), 0:1 ({MIG_C}), 0:2 ({MIG_A})")
    assert refusal(plain, ["0:0"]) == (
        "NVIDIA_VISIBLE_DEVICES: unknown MIG device '0:0'", "this host's MIG devices: none")


def test_a_mig_device_without_its_caps_node_is_refused_with_the_hint(mig):
    cap = f"/dev/nvidia-caps/nvidia-cap{mig_minor(0, 2, 1)}"
    os.unlink(mig.path(cap))
    message, hint = refusal(mig, ["0:1"])
    assert message.startswith("NVIDIA_VISIBLE_DEVICES: MIG device '0:1' (gpu0/gi2/ci1): ")
    assert hint == MIG_HINT + "; check the NVIDIA driver installation"
    message, hint = refusal(mig, "all")
    assert message.startswith("MIG device gpu0/gi2/ci1: ") and hint == MIG_HINT


def test_mig_devices_are_named_through_libnvidia_ml_or_refused(mig):
    for f in os.listdir(mig.path(LIB64_DIR)):
        if f.startswith("libnvidia-ml.so"):
            os.unlink(mig.path(f"{LIB64_DIR}/{f}"))
    assert refusal(mig, ["0:0"]) == (
        f"libnvidia-ml.so not found under driver root {mig.root}: MIG devices are named"
        " through it",
        "install the NVIDIA driver's user-space libraries, or fix driver-root in config.toml")


@pytest.mark.parametrize("which, env", [("config", "NVIDIA_MIG_CONFIG_DEVICES"),
                                        ("monitor", "NVIDIA_MIG_MONITOR_DEVICES")])
def test_mig_admin_capabilities_a_host_lacks_are_refused(plain, which, env):
    assert refusal(plain, [], **{f"mig_{which}": "all"}) == (
        f"{env}: this host has no MIG {which} capability",
        "MIG needs a MIG-capable GPU and driver; nvidia-smi mig -lgi shows it")


def test_mig_admin_refusals_say_what_is_wrong_with_the_capabilities(mig):
    """Every caps node gone: each capability's problem, joined, in the refusal."""
    caps_dir = mig.path("/dev/nvidia-caps")
    for name in os.listdir(caps_dir):
        os.unlink(caps_dir / name)
    message, hint = refusal(mig, [], mig_config="all")
    assert message.startswith("NVIDIA_MIG_CONFIG_DEVICES: this host has no MIG config"
                              " capability (")
    assert message.count("; ") >= 1 and message.endswith(")")


def test_mig_config_needs_the_gpus_nodes(mig):
    os.unlink(mig.path("/dev/nvidia1"))
    message, hint = refusal(mig, [], mig_config="1")
    assert message.startswith("device /dev/nvidia1: ") and hint == NODE_HINT


def test_imex_none_gives_no_channel_and_a_missing_one_lists_none(plain, tmp_path):
    d = discover(str(plain.root))
    plan = make_plan(d, ["0"], ["utility"], imex="none")
    assert not [n for n in plan.nodes if "imex" in n.path]
    message, hint = refusal(plain, ["0"], imex=["0"])
    assert message.startswith("NVIDIA_IMEX_CHANNELS: no IMEX channel 0 (")
    assert hint == "this host's IMEX channels: none"
    add_imex(plain, [2, 4])
    assert refusal(plain, ["0"], imex=["0"])[1] == "this host's IMEX channels: 2, 4"


def test_a_missing_library_is_named_with_its_hint(plain):
    for f in os.listdir(plain.path(LIB64_DIR)):
        if f.startswith("libcuda.so"):
            os.unlink(plain.path(f"{LIB64_DIR}/{f}"))
    message, hint = refusal(plain, ["0"], ["compute"])
    assert message.startswith(f"libcuda.so not found under driver root {plain.root} (")
    assert message.endswith("), needed for the compute capability")
    assert hint == ("install the NVIDIA driver's user-space libraries, or fix driver-root in"
                    " config.toml")


def test_a_host_without_gpus_says_so_in_the_hint(tmp_path):
    bare = build_fake_driver(tmp_path / "bare", gpus=[])
    with pytest.raises(DirectError) as raised:
        select_gpus(discover(str(bare.root)), ["0"])
    assert (raised.value.message, raised.value.hint) == (
        "NVIDIA_VISIBLE_DEVICES: unknown GPU index 0 (this host has 0)", "this host's GPUs: none")


@pytest.mark.parametrize("setting", ["sbin/ldconfig", "@ldconfig"])
def test_an_ldconfig_that_is_not_absolute_is_refused_with_the_setting_to_use(setting):
    with pytest.raises(DirectError) as raised:
        host_ldconfig(setting)
    assert (raised.value.message, raised.value.hint) == (
        f"ldconfig path {setting!r} is not absolute",
        'set [nvidia-container-cli] ldconfig = "@/sbin/ldconfig" in config.toml')
    assert host_ldconfig("@/sbin/ldconfig") == "/sbin/ldconfig"
