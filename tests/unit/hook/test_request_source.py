"""What cdi mode reads from a container's config.json (`request_source`), the feature gates a
container turns on, and its IMEX channels: a hostile image writes all of it, so every shape
config.json may take is refused in one line or read under the trust rules of every other mode."""

from __future__ import annotations

import pytest
from ..hook_process import HookProcess

from nvdocker2.hook.request import RequestError, container_request, request_source
from nvdocker2.runtime import cdi
from nvdocker2.toolkit_config import ToolkitConfig

MOUNT_ROOT = "/var/run/nvidia-container-devices/"
SYS_ADMIN = {"bounding": ["CAP_SYS_ADMIN"]}


def spec(env=None, mounts=None, privileged=True) -> dict:
    process: dict = {"args": ["sh"]}
    if env is not None:
        process["env"] = env
    if privileged:
        process["capabilities"] = SYS_ADMIN
    out: dict = {"process": process}
    if mounts is not None:
        out["mounts"] = mounts
    return out


def source(doc, **changes):
    return request_source(doc, ToolkitConfig().replace(**changes))


def devnull(dest):
    return {"destination": dest, "source": "/dev/null", "type": "bind", "options": ["bind"]}


# --- request_source: config.json's shape ------------------------------------------------------

@pytest.mark.parametrize("doc", [{}, {"process": None}, {"process": []}, {"process": "sh"}])
def test_a_process_that_is_no_object_is_refused_in_one_line(doc):
    with pytest.raises(RequestError) as raised:
        source(doc)
    assert raised.value.message == "config.json: 'process' must be an object"


@pytest.mark.parametrize("env,mounts", [
    ("NVIDIA_VISIBLE_DEVICES=0", []),
    ({"NVIDIA_VISIBLE_DEVICES": "0"}, None),
    (["NVIDIA_VISIBLE_DEVICES=0"], {"destination": MOUNT_ROOT + "0"}),
    (["NVIDIA_VISIBLE_DEVICES=0"], "/dev/null"),
    ("x", "y"),
])
def test_env_or_mounts_that_are_no_list_are_refused_in_one_line(env, mounts):
    with pytest.raises(RequestError) as raised:
        source(spec(env, mounts))
    assert raised.value.message == "config.json: 'process.env' and 'mounts' must be lists"


def test_the_visible_devices_are_read_from_process_env():
    assert source(spec(["A=1", "NVIDIA_VISIBLE_DEVICES=0,1"], None)) == (
        "0,1", "NVIDIA_VISIBLE_DEVICES")


@pytest.mark.parametrize("doc", [spec(None, None), spec(None, []), spec([], None),
                                 {"process": {"env": None}, "mounts": None}])
def test_missing_or_null_env_and_mounts_ask_for_nothing(doc):
    assert source(doc, accept_volume_mounts=True) == (None, "NVIDIA_VISIBLE_DEVICES")


def test_volume_mounts_are_read_from_mounts_where_accepted():
    doc = spec(["NVIDIA_VISIBLE_DEVICES=0"], [devnull(MOUNT_ROOT + "1"), devnull(MOUNT_ROOT + "2")],
               privileged=False)
    strict = {"accept_envvar_unprivileged": False}
    assert source(doc, accept_volume_mounts=True, **strict) == ("1,2", "mounts under " + MOUNT_ROOT)
    assert source(doc, **strict) == (None, "NVIDIA_VISIBLE_DEVICES")


def test_an_unprivileged_container_is_ignored_unless_config_accepts_its_env():
    doc = spec(["NVIDIA_VISIBLE_DEVICES=0"], privileged=False)
    assert source(doc, accept_envvar_unprivileged=False) == (None, "NVIDIA_VISIBLE_DEVICES")
    assert source(doc) == ("0", "NVIDIA_VISIBLE_DEVICES")


# --- request_source: a legacy CUDA image (CUDA_VERSION without NVIDIA_REQUIRE_CUDA) ------------

def test_cuda_version_without_require_cuda_asks_for_all_devices():
    assert source(spec(["CUDA_VERSION=11.8"])) == ("all", "NVIDIA_VISIBLE_DEVICES")


@pytest.mark.parametrize("env", [[], ["PATH=/bin"], ["NVIDIA_REQUIRE_CUDA=cuda>=11.8"],
                                 ["CUDA_VERSION=11.8", "NVIDIA_REQUIRE_CUDA=cuda>=11.8"]])
def test_no_legacy_rule_without_cuda_version_or_with_require_cuda(env):
    assert source(spec(env)) == (None, "NVIDIA_VISIBLE_DEVICES")


def test_the_legacy_all_is_named_for_the_environment_even_where_mounts_are_accepted():
    # No device mount: the "all" comes from the CUDA_VERSION rule, and a refusal must say so.
    doc = spec(["CUDA_VERSION=11.8"], [devnull("/elsewhere/0")])
    config = ToolkitConfig().replace(accept_volume_mounts=True)
    assert request_source(doc, config) == ("all", "NVIDIA_VISIBLE_DEVICES")
    names, said = cdi.requested(doc, config)
    assert names == ["nvidia.com/gpu=all"]
    with pytest.raises(cdi.CdiRefusal) as raised:
        cdi.Registry([], lambda warning: None).resolve(names, said)
    assert raised.value.message.startswith(
        "unresolvable CDI device 'nvidia.com/gpu=all' (NVIDIA_VISIBLE_DEVICES):")


def test_the_legacy_all_is_ignored_for_an_unprivileged_container_where_config_says_so():
    doc = spec(["CUDA_VERSION=11.8"], privileged=False)
    assert source(doc, accept_volume_mounts=True, accept_envvar_unprivileged=False) == (
        None, "NVIDIA_VISIBLE_DEVICES")


# --- feature gates ------------------------------------------------------------------------

def gates(*env):
    return container_request(["NVIDIA_VISIBLE_DEVICES=0", *env], True, [], ToolkitConfig()).gated


@pytest.mark.parametrize("name,gate", [("NVIDIA_GDS", "gds"), ("NVIDIA_MOFED", "mofed"),
                                       ("NVIDIA_GDRCOPY", "gdrcopy"),
                                       ("NVIDIA_NVSWITCH", "nvswitch")])
def test_each_gate_variable_set_to_enabled_turns_on_its_gate(name, gate):
    assert gates(f"{name}=enabled") == (gate,)


def test_every_gate_at_once_comes_in_a_fixed_order():
    assert gates("NVIDIA_NVSWITCH=enabled", "NVIDIA_GDRCOPY=enabled", "NVIDIA_MOFED=enabled",
                 "NVIDIA_GDS=enabled") == ("gds", "mofed", "gdrcopy", "nvswitch")


@pytest.mark.parametrize("value", ["", " ", "Enabled", "true", "1", "enabled;x"])
def test_a_gate_variable_set_to_anything_else_leaves_every_gate_off(value):
    assert gates(*(f"{name}={value}" for name in ("NVIDIA_GDS", "NVIDIA_MOFED",
                                                   "NVIDIA_GDRCOPY", "NVIDIA_NVSWITCH"))) == ()


def test_an_entry_with_an_empty_name_turns_on_no_gate():
    assert gates("=enabled") == ()


# --- IMEX channels, through the hook as runc starts it ------------------------------------------

@pytest.mark.parametrize("value,flag", [("0", "--imex-channel=0"), ("all", "--imex-channel=all"),
                                        ("0,3", "--imex-channel=0,3")])
def test_the_hook_passes_the_imex_channels_the_container_asks_for(tmp_path, value, flag):
    hook = HookProcess(tmp_path)
    proc, argv = hook.prestart(hook.spec(["NVIDIA_VISIBLE_DEVICES=0",
                                          f"NVIDIA_IMEX_CHANNELS={value}"]))
    assert proc.returncode == 0, proc.stderr
    assert [a for a in argv if a.startswith("--imex")] == [flag]


def test_the_hook_passes_no_imex_flag_when_none_is_asked(tmp_path):
    hook = HookProcess(tmp_path)
    proc, argv = hook.prestart(hook.spec(["NVIDIA_VISIBLE_DEVICES=0", "=0"]))
    assert proc.returncode == 0, proc.stderr
    assert [a for a in argv if a.startswith("--imex")] == []
