"""How `mode = "auto"` is resolved for one container (nvdocker2.runtime.mode): the devices it
asks for, the host platform read from the driver root, and the (mode, why) the runtime logs and
`doctor` prints. Real files under a private driver root; no mocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdocker2.runtime.mode import (
    container_mode,
    host_platform,
    is_cdi_name,
    requested_devices,
    resolve_auto,
)
from nvdocker2.toolkit_config import parse

GPU = "proc/driver/nvidia/gpus/0000:01:00.0/information"


def driver(root: Path, *files: str, family: str = "") -> str:
    for rel in files:
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x\n")
    if family:
        f = root / "sys/devices/soc0/family"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(family.encode())
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def config(tmp_path: Path, root: str, mode: str = "auto", extra: str = "") -> object:
    text = (f'{extra}[nvidia-container-cli]\nroot = "{root}"\n'
            f'[nvidia-container-runtime]\nmode = "{mode}"\n')
    return parse(text.encode(), path=str(tmp_path / "config.toml"))


def spec(*env: str, **more) -> dict:
    return {"process": {"env": ["PATH=/bin", *env]}, **more}


# --- the devices asked for ---------------------------------------------------------------

def test_requested_devices_reads_nvidia_visible_devices_trimmed():
    env = {"NVIDIA_VISIBLE_DEVICES": " 0, ,1 ,", "XX": "7"}
    assert requested_devices(env) == ["0", "1"]
    assert requested_devices({"PATH": "/bin"}) == []


def test_swarm_resource_names_are_read_first_in_their_order():
    env = {"DOCKER_RESOURCE_GPU": "2", "B": "3", "NVIDIA_VISIBLE_DEVICES": "0"}
    assert requested_devices(env, " A , DOCKER_RESOURCE_GPU,B") == ["2"]
    assert requested_devices(env, "B,DOCKER_RESOURCE_GPU") == ["3"]
    assert requested_devices(env, "NONE") == ["0"]
    assert requested_devices({"A": ""}, "A") == []


@pytest.mark.parametrize("name, cdi", [
    ("nvidia.com/gpu=0", True),
    ("nvidia.com/gpu=all", True),
    ("nvidia.com/gpu", False),          # no =name
    ("nvidia.com/gpu=", False),         # empty name
    ("nvidia.com=0", False),            # no class
    ("nvidia.com/=0", False),           # empty class
    ("/gpu=0", False),                  # empty vendor
    ("nvidia/gpu=0", False),            # the vendor is a domain
    ("0", False),
    ("GPU-4a2b", False),
])
def test_only_fully_qualified_cdi_names_count(name, cdi):
    assert is_cdi_name(name) is cdi


# --- the host platform -------------------------------------------------------------------

def test_host_platform_order_and_reasons(tmp_path):
    root = driver(tmp_path / "wsl", "dev/dxg", GPU, "etc/nv_tegra_release")
    assert host_platform(root) == ("wsl", f"{root}/dev/dxg exists (WSL)")
    root = driver(tmp_path / "tegra", "etc/nv_tegra_release")
    assert host_platform(root) == (
        "tegra", f"a Tegra board without a GPU in {root}/proc/driver/nvidia/gpus")
    root = driver(tmp_path / "igpu", GPU, "etc/nv_tegra_release")
    assert host_platform(root) == ("nvml", f"GPUs in {root}/proc/driver/nvidia/gpus")
    root = driver(tmp_path / "none")
    assert host_platform(root) == ("unknown", f"no GPU in {root}/proc/driver/nvidia/gpus")
    root = driver(tmp_path / "empty", "proc/driver/nvidia/gpus/.keep")
    (tmp_path / "empty" / "proc/driver/nvidia/gpus/.keep").unlink()
    assert host_platform(root)[0] == "unknown"


def test_soc_family_names_tegra_in_its_first_64_bytes_any_case(tmp_path):
    assert host_platform(driver(tmp_path / "a", family="NVIDIA TEGRA\n"))[0] == "tegra"
    assert host_platform(driver(tmp_path / "b", family="x" * 59 + "Tegra"))[0] == "tegra"
    assert host_platform(driver(tmp_path / "c", family="x" * 60 + "tegra"))[0] == "unknown"
    assert host_platform(driver(tmp_path / "d", family="jetson-orin\n"))[0] == "unknown"
    assert host_platform(driver(tmp_path / "e", GPU, family="tegra"))[0] == "nvml"


# --- auto for one container --------------------------------------------------------------

def test_auto_with_no_devices_is_direct_not_cdi(tmp_path):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    assert resolve_auto({}, cfg)[0] == "direct"


def test_the_cdi_reason_names_the_devices_cut_at_80_characters(tmp_path):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    names = [f"nvidia.com/gpu=GPU-{n:04d}-aaaaaaaaaaaa" for n in range(4)]
    joined = ",".join(names)
    assert len(joined) > 81
    assert resolve_auto({"NVIDIA_VISIBLE_DEVICES": joined}, cfg) == (
        "cdi", f"the container asks only for CDI devices ({joined[:80]})")


def test_auto_reads_the_driver_root_it_is_given_else_its_own(tmp_path):
    own = driver(tmp_path / "own", GPU)
    other = driver(tmp_path / "other", "dev/dxg")
    cfg = config(tmp_path, own)
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    assert resolve_auto(env, cfg) == (
        "direct", f"GPUs in {own}/proc/driver/nvidia/gpus: NVIDIA's auto says jit-cdi"
                  " (v1.18 on), which is direct mode here")
    assert resolve_auto(env, cfg, other) == (
        "legacy", f"{other}/dev/dxg exists (WSL): direct mode does not serve WSL;"
                  " libnvidia-container does")


def test_auto_on_tegra_gives_csv_with_its_reason(tmp_path):
    root = driver(tmp_path / "t", "etc/nv_tegra_release")
    assert resolve_auto({}, config(tmp_path, root)) == (
        "csv", f"a Tegra board without a GPU in {root}/proc/driver/nvidia/gpus: NVIDIA's auto"
               " says csv: the mount-spec CSV files")


@pytest.mark.parametrize("env", [
    {"NVIDIA_VISIBLE_DEVICES": "0:1"},
    {"NVIDIA_VISIBLE_DEVICES": "0,MIG-4a2b"},
    {"NVIDIA_VISIBLE_DEVICES": "mig-4a2b"},
    {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_MIG_CONFIG_DEVICES": "all"},
    {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_MIG_MONITOR_DEVICES": "0"},
])
def test_mig_requests_are_legacy(tmp_path, env):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    assert resolve_auto(env, cfg) == (
        "legacy", "the container asks for MIG devices, which direct mode does not serve")


@pytest.mark.parametrize("env", [
    {"NVIDIA_VISIBLE_DEVICES": "0,GPU-4a2b:00"},
    {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_MIG_CONFIG_DEVICES": " "},
    {"NVIDIA_VISIBLE_DEVICES": "1"},
])
def test_whole_gpus_are_direct(tmp_path, env):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    assert resolve_auto(env, cfg)[0] == "direct"


def test_container_mode_reads_the_spec_env_and_annotations(tmp_path):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    assert container_mode(spec("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"), cfg) == (
        "cdi", "auto resolves to cdi: the container asks only for CDI devices"
               " (nvidia.com/gpu=1)")
    # Annotations outside the prefixes are not a CDI request.
    other = spec("NVIDIA_VISIBLE_DEVICES=0", annotations={"io.x/y": "nvidia.com/gpu=0"})
    assert container_mode(other, cfg)[0] == "direct"
    keys = [f"cdi.k8s.io/device-plugin-{n}" for n in range(4)]
    annotated = spec("NVIDIA_VISIBLE_DEVICES=0", annotations={k: "nvidia.com/gpu=0"
                                                              for k in reversed(keys)})
    assert container_mode(annotated, cfg) == (
        "cdi", "auto resolves to cdi: the container has CDI annotations ("
               + ",".join(keys)[:80] + ")")
    assert len(",".join(keys)) > 81


def test_annotation_prefixes_come_from_the_config(tmp_path):
    extra = ('[nvidia-container-runtime.modes.cdi]\n'
             'annotation-prefixes = ["example.com/cdi-"]\n')
    text = (f'[nvidia-container-cli]\nroot = "{driver(tmp_path / "d", GPU)}"\n'
            f'[nvidia-container-runtime]\nmode = "auto"\n{extra}')
    cfg = parse(text.encode(), path=str(tmp_path / "config.toml"))
    s = spec("NVIDIA_VISIBLE_DEVICES=0", annotations={"example.com/cdi-a": "x.com/y=z"})
    assert container_mode(s, cfg)[0] == "cdi"
    s = spec("NVIDIA_VISIBLE_DEVICES=0", annotations={"cdi.k8s.io/a": "x.com/y=z"})
    assert container_mode(s, cfg)[0] == "direct"


@pytest.mark.parametrize("bad", [
    {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0", 7]}},
    {"process": {"env": "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"}},
    {"process": "x", "annotations": ["cdi.k8s.io/a"]},
    {},
])
def test_a_malformed_spec_resolves_as_if_it_asked_for_nothing(tmp_path, bad):
    cfg = config(tmp_path, driver(tmp_path / "d", GPU))
    mode, why = container_mode(bad, cfg)
    assert mode == "direct" and why.startswith("auto resolves to direct: GPUs in ")


def test_a_given_mode_is_kept_and_named_with_its_file(tmp_path):
    cfg = config(tmp_path, driver(tmp_path / "d", "dev/dxg"), mode="jit-cdi")
    cdi = spec("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0")
    assert container_mode(cdi, cfg) == ("direct", f"'jit-cdi' in {tmp_path}/config.toml")
    cfg = config(tmp_path, driver(tmp_path / "d", "dev/dxg"), mode="legacy")
    assert container_mode(cdi, cfg) == ("legacy", f"'legacy' in {tmp_path}/config.toml")
