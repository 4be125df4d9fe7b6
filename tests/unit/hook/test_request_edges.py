"""The hook's decision at its edges: capability lists with empty items, every spelling of
NVIDIA_DISABLE_REQUIRE, CUDA_VERSION values that are not versions, requirement size limits,
non-object mounts, and the exact refusal texts; the same through the hook started as a process,
whose cli (a test fixture) records what it was asked."""

from __future__ import annotations

import pytest
from ..hook_process import PROG, HookProcess

from nvdocker2.hook.request import RequestError, container_request, request_from_spec
from nvdocker2.toolkit_config import ToolkitConfig

MOUNT_ROOT = "/var/run/nvidia-container-devices/"


def request(env, privileged=True, mounts=(), **changes):
    return container_request(env, privileged, list(mounts), ToolkitConfig().replace(**changes))


@pytest.mark.parametrize("value", ["compute,utility,", ",compute,,utility", " compute , utility "])
def test_empty_capability_items_are_skipped_not_refused(value):
    got = request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES={value}"])
    assert got.capabilities == ("compute", "utility")


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_capability_list_means_the_defaults(value):
    got = request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES={value}"])
    assert got.capabilities == ("compute", "utility")


def test_capabilities_come_in_the_cli_order_and_all_means_every_supported_one():
    got = request(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video,compute"])
    assert got.capabilities == ("compute", "video")
    got = request(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"],
                  supported_driver_capabilities=("utility", "graphics"))
    assert got.capabilities == ("utility", "graphics")


@pytest.mark.parametrize("item,known", [("graphics", "known"), ("gaming", "unknown")])
def test_an_unsupported_capability_is_refused_saying_whether_it_exists(item, known):
    with pytest.raises(RequestError) as raised:
        request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES=compute,{item}"],
                supported_driver_capabilities=("compute", "utility"))
    assert raised.value.message == (
        f"NVIDIA_DRIVER_CAPABILITIES: {known} capability {item!r} is not supported here"
        " (supported: compute,utility)")


@pytest.mark.parametrize("value", ["1", "t", "T", "true", "TRUE", "True", " true "])
def test_every_true_spelling_of_disable_require_drops_the_requirements(value):
    got = request(["CUDA_VERSION=11.8", "NVIDIA_REQUIRE_ARCH=arch=x86_64",
                   f"NVIDIA_DISABLE_REQUIRE={value}"])
    assert got.requirements == ()


@pytest.mark.parametrize("value", ["", "0", "false", "yes", "on", "tru"])
def test_other_values_of_disable_require_keep_them(value):
    got = request(["CUDA_VERSION=11.8", "NVIDIA_REQUIRE_ARCH=arch=x86_64",
                   f"NVIDIA_DISABLE_REQUIRE={value}"])
    assert got.requirements == ("arch=x86_64", "cuda>=11.8")


@pytest.mark.parametrize("version,requirement", [
    ("11.8", "cuda>=11.8"), ("12.2.0", "cuda>=12.2"), ("11.08", "cuda>=11.8"),
    (" 10.1 ", "cuda>=10.1"), ("12.1.x", "cuda>=12.1"), ("12.4.1-rc1", "cuda>=12.4"),
])
def test_cuda_version_becomes_the_requirement(version, requirement):
    assert request([f"CUDA_VERSION={version}"]).requirements == (requirement,)


@pytest.mark.parametrize("version", ["11", "x.y", "١١.8", "11.", ".8", "11.x", "", "+1.2"])
def test_cuda_version_that_is_not_a_version_is_refused_in_one_line(version):
    with pytest.raises(RequestError) as raised:
        request([f"CUDA_VERSION={version}"])
    assert raised.value.message == (
        f"CUDA_VERSION: {version.strip()!r} is not a CUDA version like 11.8 or 11.8.0")


def test_requirements_at_4096_characters_pass_and_4097_are_refused():
    at_limit = "cuda>=1 " + "x" * (4096 - 8)
    got = request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_REQUIRE_A={at_limit}",
                   "NVIDIA_REQUIRE_B=brand=tesla !x"])
    assert got.requirements == (at_limit, "brand=tesla !x")
    with pytest.raises(RequestError) as raised:
        request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_REQUIRE_A={at_limit}x"])
    assert raised.value.message == (
        "NVIDIA_REQUIRE_A: requirement too long or has control characters")


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\t"])
def test_a_requirement_with_a_control_character_is_refused(char):
    with pytest.raises(RequestError, match="^NVIDIA_REQUIRE_A: requirement too long"):
        request(["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_REQUIRE_A=cuda>=1{char}0"])


def test_empty_requirements_are_skipped_and_the_rest_sorted_by_name():
    got = request(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_Z=z>=1", "NVIDIA_REQUIRE_E= ",
                   "NVIDIA_REQUIRE_A=a>=1"])
    assert got.requirements == ("a>=1", "z>=1")


def test_non_object_mounts_are_skipped_with_volume_mounts_accepted():
    mounts = ["x", 5, None, ["/dev/null"], {"source": "/dev/null", "destination": 7},
              {"source": "/dev/zero", "destination": MOUNT_ROOT + "9"},
              {"source": "/dev/null", "destination": "/elsewhere/3"},
              {"source": "/dev/null", "destination": MOUNT_ROOT + "1"},
              {"source": "/dev/null", "destination": MOUNT_ROOT + "0"}]
    got = request([], privileged=False, mounts=mounts, accept_volume_mounts=True)
    assert got.devices == ("1", "0")


def test_volume_mounts_are_not_read_unless_accepted():
    mounts = [{"source": "/dev/null", "destination": MOUNT_ROOT + "1"}]
    assert request([], privileged=False, mounts=mounts) is None
    got = request(["NVIDIA_VISIBLE_DEVICES=0"], mounts=mounts, accept_volume_mounts=True)
    assert got.devices == ("1",)


def test_an_empty_visible_devices_falls_back_from_mounts_to_the_environment():
    got = request(["NVIDIA_VISIBLE_DEVICES=2"], mounts=[], accept_volume_mounts=True)
    assert got.devices == ("2",)


def test_swarm_resource_names_come_before_nvidia_visible_devices():
    got = request(["NVIDIA_VISIBLE_DEVICES=0", "DOCKER_RESOURCE_GPU=3"],
                  swarm_resource=" , DOCKER_RESOURCE_GPU ,")
    assert got.devices == ("3",)


@pytest.mark.parametrize("spec,message", [
    ({}, "config.json: 'process' must be an object"),
    ({"process": []}, "config.json: 'process' must be an object"),
    ({"process": {"env": "A=1"}}, "config.json: 'process.env' must be a list of strings"),
    ({"process": {"env": []}, "mounts": "x"}, "config.json: 'mounts' must be a list"),
])
def test_malformed_spec_refusals_name_the_expected_type(spec, message):
    with pytest.raises(RequestError) as raised:
        request_from_spec(spec, ToolkitConfig())
    assert raised.value.message == message


def test_null_env_and_mounts_are_empty_lists():
    spec = {"process": {"env": None}, "mounts": None}
    assert request_from_spec(spec, ToolkitConfig().replace(accept_volume_mounts=True)) is None
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"],
                        "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}, "mounts": None}
    got = request_from_spec(spec, ToolkitConfig().replace(accept_volume_mounts=True))
    assert got.devices == ("0",)


def test_mig_lists_are_read_for_privileged_containers_only_when_set():
    got = request(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all",
                   "NVIDIA_MIG_MONITOR_DEVICES= "])
    assert (got.mig_config, got.mig_monitor) == ("all", None)


# --- through the hook process ----------------------------------------------------------------

@pytest.fixture
def hook(tmp_path):
    process = HookProcess(tmp_path)

    def run(env, mounts=None, privileged=True, accept_volume_mounts=False):
        return process.prestart(process.spec(env, mounts, privileged), accept_volume_mounts)

    run.process = process
    return run


@pytest.mark.parametrize("version", ["11", "x.y", "١١.8"])
def test_the_hook_refuses_a_bad_cuda_version_in_one_line(hook, version):
    proc, argv = hook([f"CUDA_VERSION={version}"])
    assert (proc.returncode, argv) == (1, None)
    assert proc.stderr == (f"{PROG}: error: CUDA_VERSION: {version!r} is not a CUDA version"
                           " like 11.8 or 11.8.0\n")


def test_the_hook_passes_the_cuda_requirement_and_a_trailing_comma_list(hook):
    proc, argv = hook(["CUDA_VERSION=11.8.0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility,"])
    assert proc.returncode == 0, proc.stderr
    assert "--require=cuda>=11.8" in argv
    assert "--compute" in argv and "--utility" in argv


@pytest.mark.parametrize("value,required", [("TRUE", False), ("t", False), ("", True)])
def test_the_hook_honours_disable_require(hook, value, required):
    proc, argv = hook(["CUDA_VERSION=11.8", f"NVIDIA_DISABLE_REQUIRE={value}"])
    assert proc.returncode == 0, proc.stderr
    assert ("--require=cuda>=11.8" in argv) is required


def test_the_hook_skips_non_object_mounts(hook):
    mounts = ["x", 5, {"source": "/dev/null", "destination": MOUNT_ROOT + "1"}]
    proc, argv = hook([], mounts=mounts, privileged=False, accept_volume_mounts=True)
    assert proc.returncode == 0, proc.stderr
    assert "--device=1" in argv


def test_the_hook_refuses_a_process_that_is_not_an_object(hook):
    spec = hook.process.spec([])
    spec["process"] = ["sh"]
    proc, argv = hook.process.prestart(spec)
    assert (proc.returncode, argv) == (1, None)
    assert proc.stderr == f"{PROG}: error: config.json: 'process' must be an object\n"
