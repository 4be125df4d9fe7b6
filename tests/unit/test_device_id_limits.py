"""The device id validator at its edges: the GPU-/MIG- prefix rule, and every size limit at
exactly its value and one past it (128-character id, 1024 ids, the total length cap), through
the function and through the hook started as a process."""

from __future__ import annotations

import pytest
from .hook_process import PROG, HookProcess

from nvdocker2.device_ids import RequestError, parse_device_list, validate_id


@pytest.mark.parametrize("device_id", [
    "gpu-0", "mig-0", "nvme0", "--r=0", "-1", "abcdef", "GPU-", "MIG-", "GPU--1", "GPX-abc",
    "GPU-xyz", "UUID-abc", "0x1", "1e3",
])
def test_an_id_without_the_gpu_or_mig_prefix_or_a_number_is_refused(device_id):
    with pytest.raises(RequestError, match=r"^NVIDIA_VISIBLE_DEVICES: invalid device id "):
        parse_device_list(device_id, "NVIDIA_VISIBLE_DEVICES")


@pytest.mark.parametrize("device_id", ["0", "15", "0:1", "GPU-abc", "MIG-0f-1", "GPU-A-b"])
def test_a_valid_id_is_returned_as_given(device_id):
    assert validate_id(device_id, "NVIDIA_VISIBLE_DEVICES") == device_id
    assert parse_device_list(device_id, "NVIDIA_VISIBLE_DEVICES") == (device_id,)


def test_the_exception_text_is_its_message():
    with pytest.raises(RequestError) as info:
        parse_device_list("0,,1", "NV_GPU")
    assert str(info.value) == info.value.message == "NV_GPU: empty device id in '0,,1'"


@pytest.mark.parametrize("prefix", ["GPU-", ""])
def test_an_id_of_exactly_128_characters_passes_and_129_is_refused(prefix):
    fill = "a" if prefix else "1"
    at_limit = prefix + fill * (128 - len(prefix))
    assert parse_device_list(at_limit, "X") == (at_limit,)
    with pytest.raises(RequestError, match="invalid device id"):
        parse_device_list(at_limit + fill, "X")


def test_exactly_1024_ids_pass_and_1025_are_refused():
    ids = [str(n) for n in range(1024)]
    assert parse_device_list(",".join(ids), "X") == tuple(ids)
    with pytest.raises(RequestError) as info:
        parse_device_list(",".join(ids + ["1024"]), "X")
    assert info.value.message == "X: too many device ids (1025, at most 1024)"


def test_the_total_length_cap_counts_padding():
    cap = 1024 * (128 + 1)
    at_cap = "0" + " " * (cap - 1)
    assert parse_device_list(at_cap, "X") == ("0",)
    with pytest.raises(RequestError) as info:
        parse_device_list(at_cap + " ", "X")
    assert info.value.message == f"X: device list too long ({cap + 1} characters)"
    with pytest.raises(RequestError, match=r"^X: device list too long \(200001 characters\)$"):
        parse_device_list("0" + " " * 200_000, "X")


# --- the same rules where they matter: the hook started as a process -------------------------

@pytest.fixture
def hook(tmp_path):
    process = HookProcess(tmp_path)
    return lambda devices: process.prestart(process.spec([f"NVIDIA_VISIBLE_DEVICES={devices}"]))


@pytest.mark.parametrize("devices", ["abcdef", "--r=0", "0" + " " * 200_000])
def test_the_hook_refuses_in_one_line_and_runs_nothing(hook, devices):
    proc, argv = hook(devices)
    assert proc.returncode == 1, proc.stderr
    assert argv is None
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 2 and lines[0].startswith(f"{PROG}: error: ")
    assert "NVIDIA_VISIBLE_DEVICES" in lines[0]
    assert "Traceback" not in proc.stderr


def test_the_hook_passes_a_128_character_uuid_to_the_cli(hook):
    uuid = "GPU-" + "a" * 124
    proc, argv = hook(uuid)
    assert proc.returncode == 0, proc.stderr
    assert f"--device={uuid}" in argv
