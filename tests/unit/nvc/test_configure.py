"""`nvidia-container-cli configure` (ours) against the fake driver and a fake rootfs: the exact
mounts inside, the soname links and ld cache, the image's symlinks never followed out, and the
cgroup v1 device rules. Each run happens in a private mount namespace (`unshare -m`), so no
mount reaches the host; the namespace reports its own mounts before it ends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR

from nvdocker2.direct.discover import DeviceNode
from nvdocker2.nvc.configure import NvcError, allow_devices

V = DRIVER_VERSION
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")

REPORT = (
    'code=0; "$@" --pid=$$ "$ROOTFS" || code=$?; echo "exit=$code"; '
    "grep \" $ROOTFS/\" /proc/self/mountinfo | cut -d' ' -f5,6"
)


def _configure(rootfs, *args, driver):
    """Run the cli as `configure --pid=<the namespace's shell>` in a fresh mount namespace;
    (exit status, {mount point inside rootfs: options}, stderr)."""
    argv = [sys.executable, "-m", "nvdocker2.nvc", f"--root={driver.root}", "configure",
            "--no-cgroups", "--ldconfig=@/sbin/ldconfig", *args]
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", REPORT,
                           "sh", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ROOTFS": str(rootfs)})
    lines = done.stdout.splitlines()
    code = int(lines[0].split("=")[1])
    mounts = {}
    for line in lines[1:]:
        point, options = line.split(" ")
        mounts["/" + os.path.relpath(point, rootfs)] = options
    return code, mounts, done.stderr


@pytest.fixture
def rootfs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    return root


@needs_root
def test_configure_mounts_the_chosen_gpu_and_the_capabilities_files(driver, rootfs):
    code, mounts, err = _configure(rootfs, "--device=1", "--compute", "--utility",
                                   driver=driver)
    assert (code, err) == (0, "")
    node = "rw,nosuid,noexec,relatime"
    lib = "ro,nosuid,nodev,relatime"
    assert mounts == {
        "/dev/nvidia1": node, "/dev/nvidiactl": node, "/dev/nvidia-uvm": node,
        "/dev/nvidia-uvm-tools": node, "/dev/nvidia-modeset": node,
        f"{LIB64_DIR}/libnvidia-ml.so.{V}": lib, f"{LIB64_DIR}/libcuda.so.{V}": lib,
        f"{LIB64_DIR}/libnvidia-ptxjitcompiler.so.{V}": lib,
        f"{LIB64_DIR}/libnvidia-nvvm.so.{V}": lib, "/usr/bin/nvidia-smi": lib,
    }
    libdir = rootfs / LIB64_DIR.lstrip("/")
    assert os.readlink(libdir / "libcuda.so.1") == f"libcuda.so.{V}"
    cache = subprocess.run(["ldconfig", "-r", str(rootfs), "-p"], capture_output=True,
                           text=True, check=True).stdout
    assert f"libcuda.so.1 (libc6,x86-64) => {LIB64_DIR}/libcuda.so.1" in cache
    # the mounts were the namespace's own: the host sees none of them
    with open("/proc/self/mountinfo") as f:
        assert str(rootfs) not in f.read()


@needs_root
def test_without_capabilities_only_the_nodes_are_mounted(driver, rootfs):
    code, mounts, err = _configure(rootfs, "--device=0", driver=driver)
    assert code == 0, err
    assert sorted(mounts) == ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                              "/dev/nvidia0", "/dev/nvidiactl"]


@needs_root
def test_an_images_absolute_symlink_stays_inside_the_rootfs(driver, rootfs, tmp_path):
    outside = tmp_path / "host-bin"
    outside.mkdir()
    (rootfs / "usr").mkdir()
    (rootfs / "usr" / "bin").symlink_to(outside)  # absolute: resolved at the rootfs
    code, mounts, err = _configure(rootfs, "--utility", driver=driver)
    assert code == 0, err
    assert f"{outside}/nvidia-smi" in mounts  # i.e. ROOTFS/<outside>/nvidia-smi
    assert os.listdir(outside) == []


@needs_root
def test_a_symlinked_device_node_is_refused_and_nothing_is_mounted(driver, rootfs, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    (rootfs / "dev").mkdir()
    (rootfs / "dev" / "nvidia0").symlink_to(victim)
    code, mounts, err = _configure(rootfs, "--device=0", driver=driver)
    assert code == 1 and mounts == {}
    assert err.startswith("nvidia-container-cli: mount error: /dev/nvidia0 in the container"
                          " image is a symlink")
    assert victim.read_text() == "host file\n"


@needs_root
def test_an_unknown_gpu_is_a_device_error_before_any_mount(driver, rootfs):
    code, mounts, err = _configure(rootfs, "--device=7", "--utility", driver=driver)
    assert (code, mounts) == (1, {})
    assert err.splitlines()[0] == ("nvidia-container-cli: device error: unknown GPU index 7"
                                   " (this host has 2)")


@needs_root
def test_an_unsatisfied_requirement_is_refused_before_any_mount(driver, rootfs):
    code, mounts, err = _configure(rootfs, "--utility", "--require=driver>=999", driver=driver)
    assert (code, mounts) == (1, {})
    assert err == ("nvidia-container-cli: requirement error: unsatisfied condition:"
                   " driver>=999\n")


def _fake_proc(tmp_path, cgroup_lines, mountinfo):
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "42" / "cgroup").write_text(cgroup_lines)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    return proc


NODES = (DeviceNode("/dev/nvidia1", "/x", 195, 1, 0o666, 0, 0),
         DeviceNode("/dev/nvidiactl", "/x", 195, 255, 0o666, 0, 0))


def test_cgroup_v1_device_rules_are_appended_to_the_containers_devices_allow(tmp_path):
    group = tmp_path / "cg" / "docker" / "abc"
    group.mkdir(parents=True)
    (group / "devices.allow").write_text("")
    proc = _fake_proc(tmp_path, "12:devices:/docker/abc\n3:memory:/docker/abc\n",
                      f"30 25 0:26 / {tmp_path}/cg rw,relatime shared:9 - cgroup cgroup"
                      " rw,devices\n")
    assert allow_devices(42, NODES, str(proc)) == ["c 195:1 rwm", "c 195:255 rwm"]
    assert (group / "devices.allow").read_text() == "c 195:1 rwm\nc 195:255 rwm\n"


def test_cgroup_v2_is_refused_with_the_no_cgroups_hint(tmp_path):
    proc = _fake_proc(tmp_path, "0::/system.slice/docker-abc.scope\n",
                      "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    with pytest.raises(NvcError) as caught:
        allow_devices(42, NODES, str(proc))
    assert caught.value.kind == "cgroup" and "--no-cgroups" in caught.value.hint
