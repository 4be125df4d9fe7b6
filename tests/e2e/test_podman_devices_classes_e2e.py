"""Every device class of `nvdocker2 cdi generate` through rootful Podman 4.3 (CDI library 0.5.2).

The TEST FIXTURE fake driver tree (tests/fixtures/fake_driver.py) is grown with a MIG tree and
the stand-in libnvidia-ml it compiles (the hardware boundary, reporting NVIDIA's MIG indices and
UUIDs), IMEX channel nodes, each GPU's DRI nodes under its sysfs drm folder, the graphics JSON
and Xorg files, and the GDS, MOFED, gdrcopy, NVSwitch and nvlink nodes (all real nodes made with
mknod). The command line writes one spec per `--class` into the /etc/cdi of a private Podman
(privatepodman.py), and `podman run --device nvidia.com/...` shows from inside exactly the
character devices asked for, with their major:minor, against the same container without the
device: nothing extra. The direct-mode twins are tests/e2e/test_direct_{mig,graphics,gated}_e2e.py.
"""

from __future__ import annotations

import base64
import os

import pytest
from fixtures.fake_driver import (
    CAPS_MAJOR,
    DRI_MAJOR,
    DRIVER_VERSION,
    GDRDRV_MAJOR,
    GRAPHICS_CONFIGS,
    IMEX_MAJOR,
    INFINIBAND_MAJOR,
    LIB64_DIR,
    NVIDIA_FS_MAJOR,
    NVIDIA_MAJOR,
    NVSWITCH_MAJOR,
    UVM_MAJOR,
    add_dri,
    add_fabric,
    add_graphics,
    add_imex,
    add_mig,
    build_fake_driver,
    build_fake_nvml,
    default_migs,
    mig_minor,
)
from cdispec import nvdocker2
from privatepodman import PrivatePodman, runtime_launcher

from nvdocker2.direct.ldcache import parse_ld_cache

CLASSES = ("gpu", "imex-channel", "gds", "mofed", "gdrcopy", "nvswitch")
MIG_A, MIG_B, MIG_C = (m.uuid for m in default_migs())
# Every character device in the container, with its major:minor in hex, one a line.
LIST = "find /dev -type c | sort | while read n; do echo \"$n $(stat -c '%t:%T' $n)\"; done"


def node(path: str, major: int, minor: int) -> str:
    return f"{path} {major:x}:{minor:x}"


def caps(gi: int, ci: int | None = None) -> str:
    minor = mig_minor(0, gi, ci)
    return node(f"/dev/nvidia-caps/nvidia-cap{minor}", CAPS_MAJOR, minor)


CONTROL = {node("/dev/nvidiactl", NVIDIA_MAJOR, 255),
           node("/dev/nvidia-modeset", NVIDIA_MAJOR, 254), node("/dev/nvidia-uvm", UVM_MAJOR, 0),
           node("/dev/nvidia-uvm-tools", UVM_MAJOR, 1)}
PROFILES = f"/usr/share/nvidia/nvidia-application-profiles-{DRIVER_VERSION}-rc"
GPU0, GPU1 = node("/dev/nvidia0", NVIDIA_MAJOR, 0), node("/dev/nvidia1", NVIDIA_MAJOR, 1)
# Each GPU's DRI nodes (add_dri: card1 and renderD128 for the GPU on the lowest bus)
DRI0 = {node("/dev/dri/card1", DRI_MAJOR, 1), node("/dev/dri/renderD128", DRI_MAJOR, 128)}
DRI1 = {node("/dev/dri/card2", DRI_MAJOR, 2), node("/dev/dri/renderD129", DRI_MAJOR, 129)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, podman_prerequisites):
    root = tmp_path_factory.mktemp("podman-classes")
    runtime = runtime_launcher(root)
    driver = build_fake_driver(root / "driver")
    add_mig(driver, default_migs())
    build_fake_nvml(driver, root)
    add_imex(driver, [0, 2])
    driver.dri = add_dri(driver)
    add_graphics(driver)
    add_fabric(driver)
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(root / "none.toml"))
    specs = {}
    for device_class in CLASSES:
        out = root / f"nvidia-{device_class}.yaml"
        r = nvdocker2("cdi", "generate", "--class", device_class, "--output", str(out),
                      "--driver-root", str(driver.root), "--runtime-path", runtime, env=env)
        assert r.returncode == 0, r.stderr
        specs[device_class] = out
    pod = PrivatePodman()  # its own short root in /tmp: under pytest's a run takes 20 s
    pod.start()
    try:
        for out in specs.values():
            pod.write_cdi_spec(out.name, out.read_text())
        image = pod.import_image("localhost/nvd2-classes:1")
        base = set(run(pod, image, []).stdout.splitlines())
        yield pod, driver, specs, image, base
    finally:
        pod.cleanup()


def run(pod, image, devices, script=LIST, *flags, check=True):
    args = [a for d in devices for a in ("--device", d)]
    r = pod.podman("run", "--rm", "--network=none", *args, *flags, image, "sh", "-c", script,
                   check=False)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def added(setup, *devices, flags=()) -> set[str]:
    """The character devices a container with `devices` has that one without has not; asserts
    that it keeps every one of those."""
    pod, _, _, image, base = setup
    assert not [n for n in base if "nvidia" in n or "/dri/" in n]
    got = set(run(pod, image, devices, LIST, *flags).stdout.splitlines())
    assert base <= got
    return got - base


def test_validate_says_podman_4_3_reads_every_generated_class_spec(setup):
    _, _, specs, _, _ = setup
    for out in specs.values():
        r = nvdocker2("cdi", "validate", str(out), "--for", "podman-4.3")
        assert r.returncode == 0, (out.name, r.stderr)


@pytest.mark.parametrize("ident", ["0:1", MIG_C])
def test_a_mig_device_gets_exactly_its_parent_and_instance_nodes(setup, ident):
    # NVML's MIG index 1 on GPU 0 is GI 2, CI 1 (the fixture's order is not the (gi, ci) order)
    assert added(setup, f"nvidia.com/gpu={ident}") == {GPU0, caps(2), caps(2, 1), *CONTROL}


def test_the_mig_devices_cgroup_opens_its_caps_node_and_no_other(setup):
    pod, _, _, image, _ = setup
    mine = f"/dev/nvidia-caps/nvidia-cap{mig_minor(0, 1, 0)}"
    script = (f"head -c1 {mine} 2>&1; mknod /tmp/other c {CAPS_MAJOR} {mig_minor(0, 2, 0)};"
              " head -c1 /tmp/other 2>&1; true")
    out = run(pod, image, [f"nvidia.com/gpu={MIG_A}"], script, "--cap-add=MKNOD").stdout
    first, second = out.splitlines()
    assert "No such device or address" in first  # allowed: no driver behind the fake node
    assert "Operation not permitted" in second


def test_all_gives_every_gpu_mig_device_and_dri_node_but_no_mig_config_or_monitor(setup):
    assert added(setup, "nvidia.com/gpu=all") == {
        GPU0, GPU1, caps(1), caps(1, 0), caps(2), caps(2, 0), caps(2, 1), *DRI0, *DRI1, *CONTROL}


def test_imex_channels_exactly_those_asked(setup):
    assert added(setup, "nvidia.com/imex-channel=2") == {
        node("/dev/nvidia-caps-imex-channels/channel2", IMEX_MAJOR, 2)}
    assert added(setup, "nvidia.com/gpu=1", "nvidia.com/imex-channel=all") == {
        GPU1, *DRI1, node("/dev/nvidia-caps-imex-channels/channel0", IMEX_MAJOR, 0),
        node("/dev/nvidia-caps-imex-channels/channel2", IMEX_MAJOR, 2), *CONTROL}


def test_a_gpu_gets_only_its_own_dri_nodes(setup):
    driver = setup[1]
    card, render = driver.dri[driver.gpus[1].uuid]
    assert (card, render) == ("card2", "renderD129")
    assert added(setup, f"nvidia.com/gpu={driver.gpus[1].uuid}") == {GPU1, *DRI1, *CONTROL}


def test_the_graphics_files_are_the_drivers_read_only_and_in_the_ld_cache(setup):
    pod, driver, _, image, _ = setup
    files = (  # (in the container, in the driver root)
        ("/etc/vulkan/icd.d/nvidia_icd.json", "/usr/share/vulkan/icd.d/nvidia_icd.json"),
        ("/etc/vulkan/implicit_layer.d/nvidia_layers.json",
         "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json"),
        *((p, p) for p, _ in GRAPHICS_CONFIGS[2:]),
        (PROFILES, PROFILES))
    script = "".join(f"cat {f}; grep -c ' {f} [^ ]* ro,' /proc/mounts; " for f, _ in files)
    script += "(echo x >> /etc/vulkan/icd.d/nvidia_icd.json && echo WROTE); base64 /etc/ld.so.cache"
    r = run(pod, image, ["nvidia.com/gpu=0"], script)
    wanted = "".join(driver.path(source).read_text() + "1\n" for _, source in files)
    assert r.stdout.startswith(wanted), r.stdout[:2000]
    assert "WROTE" not in r.stdout and "Read-only file system" in r.stderr
    found = {e.name: e.path for e in parse_ld_cache(base64.b64decode(r.stdout[len(wanted):]))}
    for soname in ("libEGL_nvidia.so.0", "libGLX_nvidia.so.0", "libnvidia-ngx.so.1",
                   "libcuda.so.1"):
        assert found.get(soname) == f"{LIB64_DIR}/{soname}", sorted(found)


@pytest.mark.parametrize("device_class, nodes", [
    ("gds", {node("/dev/nvidia-fs0", NVIDIA_FS_MAJOR, 0),
             node("/dev/nvidia-fs1", NVIDIA_FS_MAJOR, 1)}),
    ("mofed", {node("/dev/infiniband/uverbs0", INFINIBAND_MAJOR, 192),
               node("/dev/infiniband/uverbs1", INFINIBAND_MAJOR, 193),
               node("/dev/infiniband/rdma_cm", 10, 58)}),  # not umad0 nor issm0
    ("gdrcopy", {node("/dev/gdrdrv", GDRDRV_MAJOR, 0)}),
    ("nvswitch", {node("/dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255),
                  node("/dev/nvidia-nvswitch0", NVSWITCH_MAJOR, 0),
                  node("/dev/nvidia-nvswitch1", NVSWITCH_MAJOR, 1)}),  # not nvidia-nvlink
])
def test_each_gated_class_gives_exactly_its_nodes(setup, device_class, nodes):
    assert added(setup, "nvidia.com/gpu=0", f"nvidia.com/{device_class}=all") == {
        GPU0, *DRI0, *CONTROL, *nodes}


@pytest.mark.parametrize("device, message", [
    ("nvidia.com/gpu=0:5", "unresolvable CDI devices nvidia.com/gpu=0:5"),
    ("nvidia.com/imex-channel=1", "unresolvable CDI devices nvidia.com/imex-channel=1"),
    ("nvidia.com/gds=0", "unresolvable CDI devices nvidia.com/gds=0"),
    # not a CDI name at all (a `/` in the device name): Podman takes it for a host path
    ("nvidia.com/gpu=MIG-../../etc", "stat nvidia.com/gpu=MIG-../../etc: no such file"),
])
def test_a_device_the_specs_do_not_name_is_refused_before_the_container_starts(setup, device,
                                                                                 message):
    pod, _, _, image, _ = setup
    r = run(pod, image, [device], "echo started", check=False)
    assert r.returncode != 0 and "started" not in r.stdout
    assert message in r.stderr, r.stderr
    assert pod.podman("ps", "-aq").stdout == ""
