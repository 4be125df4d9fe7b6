"""Direct mode's OCI spec edits on the fake driver tree (test fixture) and a small bundle."""

from __future__ import annotations

import copy
import os

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR

from nvdocker2.direct import DirectError, direct_edit
from nvdocker2.direct.rootfs import UnsafePath

RUNTIME = "/usr/bin/nvidia-container-runtime"
V = DRIVER_VERSION
COMPUTE_UTILITY = {"compute", "utility"}


def edit(driver, bundle, devices, caps=COMPUTE_UTILITY, **kw):
    path, _rootfs, spec = bundle
    return direct_edit(
        spec, str(path), devices, caps, driver_root=str(driver.root), runtime_path=RUNTIME, **kw
    )


def dev_paths(spec):
    return [d["path"] for d in spec["linux"]["devices"]]


def test_index_gives_that_gpu_and_the_control_nodes(driver, bundle):
    spec = edit(driver, bundle, ["1"])
    assert spec["linux"]["devices"][0] == {
        "path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1,
        "fileMode": 0o666, "uid": 0, "gid": 0,
    }
    assert dev_paths(spec) == [
        "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    assert spec["linux"]["resources"]["devices"] == [
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rwm"},
        {"allow": True, "type": "c", "major": 509, "minor": 0, "access": "rwm"},
        {"allow": True, "type": "c", "major": 509, "minor": 1, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 254, "access": "rwm"},
    ]


def test_uuid_full_prefix_or_lower_case_select_the_same_gpu(driver, bundle):
    uuid = driver.gpus[1].uuid
    for ident in (uuid, uuid[:12], uuid.lower().replace("gpu-", "GPU-")):
        assert dev_paths(edit(driver, bundle, [ident]))[0] == "/dev/nvidia1"


def test_all_none_and_duplicates(driver, bundle):
    assert dev_paths(edit(driver, bundle, "all"))[:3] == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
    assert dev_paths(edit(driver, bundle, ["none"]))[0] == "/dev/nvidiactl"
    assert dev_paths(edit(driver, bundle, []))[0] == "/dev/nvidiactl"
    one = edit(driver, bundle, ["0", driver.gpus[0].uuid, "0"])
    assert dev_paths(one)[:2] == ["/dev/nvidia0", "/dev/nvidiactl"]


@pytest.mark.parametrize(
    "ident, message",
    [
        ("2", "NVIDIA_VISIBLE_DEVICES: unknown GPU index 2 (this host has 2)"),
        ("GPU-ffffffff", "NVIDIA_VISIBLE_DEVICES: unknown GPU UUID 'GPU-ffffffff'"),
        ("GPU-0000000", "NVIDIA_VISIBLE_DEVICES: GPU UUID prefix 'GPU-0000000' is ambiguous"),
        ("0:1", "NVIDIA_VISIBLE_DEVICES: unknown MIG device '0:1'"),
        ("MIG-abc", "NVIDIA_VISIBLE_DEVICES: unknown MIG device 'MIG-abc'"),
    ],
)
def test_unknown_ids_fail_with_one_line_and_leave_the_spec_alone(driver, bundle, ident, message):
    before = copy.deepcopy(bundle[2])
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["0", ident])
    assert err.value.message == message
    assert "\n" not in err.value.message
    assert bundle[2] == before


def test_unknown_id_hint_lists_the_gpus(driver, bundle):
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["7"])
    assert err.value.hint == (
        f"this host's GPUs: 0 ({driver.gpus[0].uuid}), 1 ({driver.gpus[1].uuid})"
    )


def test_libraries_are_read_only_bind_mounts_at_their_own_path(driver, bundle):
    spec = edit(driver, bundle, ["0"])
    ours = [m for m in spec["mounts"] if m["type"] == "bind"]
    assert ours == [
        {
            "destination": dest,
            "type": "bind",
            "source": f"{driver.root}{dest}",
            "options": ["nosuid", "nodev", "bind", "ro"],
        }
        for dest in (
            f"{LIB64_DIR}/libnvidia-ml.so.{V}",
            f"{LIB64_DIR}/libcuda.so.{V}",
            f"{LIB64_DIR}/libnvidia-ptxjitcompiler.so.{V}",
            f"{LIB64_DIR}/libnvidia-nvvm.so.{V}",
            "/usr/bin/nvidia-smi",
        )
    ]
    assert spec["mounts"][0] == {"destination": "/proc", "type": "proc", "source": "proc"}


def test_utility_only_gives_nvidia_smi_and_nvml_but_not_libcuda(driver, bundle):
    spec = edit(driver, bundle, ["0"], {"utility"})
    dests = [m["destination"] for m in spec["mounts"][1:]]
    assert dests == [f"{LIB64_DIR}/libnvidia-ml.so.{V}", "/usr/bin/nvidia-smi"]


def test_compat32_adds_the_32bit_twins(driver, bundle):
    spec = edit(driver, bundle, ["0"], {"compute", "compat32"})
    dests = {m["destination"] for m in spec["mounts"][1:]}
    assert f"/usr/lib/i386-linux-gnu/libcuda.so.{V}" in dests


def test_create_container_hook_is_the_runtime_with_a_clean_environment(driver, bundle):
    spec = edit(driver, bundle, ["0"], {"compute"}, ldconfig="@/sbin/ldconfig")
    assert spec["hooks"] == {
        "createContainer": [
            {
                "path": RUNTIME,
                "args": [
                    "nvidia-container-runtime", "direct-hook", "update-ldcache",
                    "--ldconfig", "/sbin/ldconfig",
                    "--link", f"{LIB64_DIR}/libcuda.so.1::libcuda.so.{V}",
                    "--link", f"{LIB64_DIR}/libnvidia-ptxjitcompiler.so.1::"
                    f"libnvidia-ptxjitcompiler.so.{V}",
                    "--link", f"{LIB64_DIR}/libnvidia-nvvm.so.4::libnvidia-nvvm.so.{V}",
                    "--folder", LIB64_DIR,
                ],
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            }
        ]
    }
    assert "prestart" not in spec["hooks"]


def test_a_relative_ldconfig_is_refused(driver, bundle):
    with pytest.raises(DirectError, match="ldconfig path 'ldconfig' is not absolute"):
        edit(driver, bundle, ["0"], ldconfig="ldconfig")


def test_the_users_own_mount_at_the_same_place_wins(driver, bundle):
    path, _rootfs, spec = bundle
    spec["mounts"].append({"destination": "/usr/bin/nvidia-smi", "type": "bind",
                           "source": "/opt/my-smi", "options": ["rbind"]})
    new = edit(driver, (path, _rootfs, spec), ["0"], {"utility"})
    smi = [m for m in new["mounts"] if m["destination"] == "/usr/bin/nvidia-smi"]
    assert smi == [{"destination": "/usr/bin/nvidia-smi", "type": "bind",
                    "source": "/opt/my-smi", "options": ["rbind"]}]


def test_a_requested_node_that_is_not_a_char_device_fails_create(driver, bundle):
    (driver.root / "dev/nvidia1").unlink()
    (driver.root / "dev/nvidia1").write_text("")
    with pytest.raises(DirectError) as err:
        edit(driver, bundle, ["1"])
    assert err.value.message == (
        f"device /dev/nvidia1: {driver.root}/dev/nvidia1 is not a character device"
    )
    # Another GPU still works: only what the container asked for must be sound.
    assert dev_paths(edit(driver, bundle, ["0"]))[0] == "/dev/nvidia0"


def test_an_optional_node_that_is_not_a_char_device_still_fails(driver, bundle):
    (driver.root / "dev/nvidia-uvm").unlink()
    os.mkdir(driver.root / "dev/nvidia-uvm")
    with pytest.raises(DirectError, match="nvidia-uvm is not a character device"):
        edit(driver, bundle, ["0"])


def test_missing_optional_nodes_are_left_out_but_nvidiactl_is_required(driver, bundle):
    (driver.root / "dev/nvidia-modeset").unlink()
    assert "/dev/nvidia-modeset" not in dev_paths(edit(driver, bundle, ["0"]))
    (driver.root / "dev/nvidiactl").unlink()
    with pytest.raises(DirectError, match="device /dev/nvidiactl: .* does not exist"):
        edit(driver, bundle, ["0"])


def test_missing_libcuda_fails_a_compute_request(driver, bundle):
    for name in os.listdir(driver.root / "usr/lib/x86_64-linux-gnu"):
        if name.startswith("libcuda"):
            os.unlink(driver.root / "usr/lib/x86_64-linux-gnu" / name)
    with pytest.raises(DirectError, match="libcuda.so not found under driver root"):
        edit(driver, bundle, ["0"], {"compute"})
    assert edit(driver, bundle, ["0"], {"utility"})["mounts"]


def test_missing_driver_fails_create(tmp_path, bundle):
    with pytest.raises(DirectError, match="no NVIDIA driver found"):
        direct_edit(bundle[2], str(bundle[0]), ["0"], COMPUTE_UTILITY,
                    driver_root=str(tmp_path / "nothing"), runtime_path=RUNTIME)


# --- images whose symlinks try to carry a mount out of the container (CVE-2024-0132 class) ---

def test_image_symlink_escaping_the_rootfs_is_refused(driver, bundle, tmp_path):
    _path, rootfs, spec = bundle
    outside = tmp_path / "host-secret-dir"
    outside.mkdir()
    os.symlink("../../../../../../../../" + str(outside).lstrip("/"),
               rootfs / "usr/lib/x86_64-linux-gnu")
    before = copy.deepcopy(spec)
    with pytest.raises(UnsafePath) as err:
        edit(driver, bundle, ["0"], {"compute"})
    assert err.value.message.startswith(
        "/usr/lib/x86_64-linux-gnu in the container image is a symlink to '../../")
    assert err.value.message.endswith("which leads outside the container's root; refusing it")
    assert spec == before
    assert os.listdir(outside) == []


def test_image_symlink_as_the_mount_target_is_refused(driver, bundle):
    _path, rootfs, _spec = bundle
    os.symlink("/etc/shadow", rootfs / "usr/bin/nvidia-smi")
    with pytest.raises(UnsafePath) as err:
        edit(driver, bundle, ["0"], {"utility"})
    assert err.value.message == (
        "/usr/bin/nvidia-smi in the container image is a symlink; refusing to mount onto it"
    )


def test_absolute_image_symlinks_resolve_inside_the_rootfs(driver, bundle):
    _path, rootfs, _spec = bundle
    (rootfs / "opt/lib64").mkdir(parents=True)
    os.symlink("/opt/lib64", rootfs / "usr/lib/x86_64-linux-gnu")
    spec = edit(driver, bundle, ["0"], {"compute"})
    dests = [m["destination"] for m in spec["mounts"][1:]]
    assert dests[0] == f"/opt/lib64/libcuda.so.{V}"
    assert "--folder" in spec["hooks"]["createContainer"][0]["args"]
    assert spec["hooks"]["createContainer"][0]["args"][-1] == "/opt/lib64"


def test_symlink_loops_in_the_image_are_refused(driver, bundle):
    _path, rootfs, _spec = bundle
    os.symlink("b", rootfs / "usr/lib/x86_64-linux-gnu")
    os.symlink("x86_64-linux-gnu", rootfs / "usr/lib/b")
    with pytest.raises(UnsafePath, match="too many levels of symlinks"):
        edit(driver, bundle, ["0"], {"compute"})
