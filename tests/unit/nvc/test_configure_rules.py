"""Our nvidia-container-cli's mounts and device rules at their edges, as the user sees them:
the IMEX channels asked for (mounted, or a one-line device error with its hint), the mount
points it makes in the image and their modes, a directory in the way, a rootfs that is no
directory, the log, entering the container's mount namespace (a real one, `unshare -m`) or a
process that is gone, the cgroup v1 controller found among others (a group path with colons
or bytes that are not UTF-8, a mount root other than /), what cannot be read or written, and
no descriptor left open by the mounts. Every mount happens in a private mount namespace."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from fixtures.fake_driver import LIB64_DIR, add_imex, build_fake_driver

import nvdocker2
from nvdocker2.direct.discover import DeviceNode
from nvdocker2.nvc.configure import NvcError, allow_devices

REPO = os.path.dirname(os.path.dirname(os.path.abspath(nvdocker2.__file__)))
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")

# In a private mount namespace: configure --pid of the shell, then the mounts under ROOTFS.
REPORT = ('code=0; "$@" || code=$?; echo "exit=$code"; '
          "grep \" $ROOTFS/\" /proc/self/mountinfo | cut -d' ' -f5,6")


def cli(rootfs, driver, *args, pid="$$", debug=None):
    """(exit status, {mount point inside rootfs: options}, stderr) of `configure`."""
    argv = [sys.executable, "-m", "nvdocker2.nvc", f"--root={driver.root}"]
    argv += [f"--debug={debug}"] if debug else []
    # --no-cgroups always: never a device rule written for a process of this machine.
    argv += ["configure", "--no-cgroups", "--ldconfig=@/sbin/ldconfig", *args]
    script = REPORT.replace('"$@"', f'"$@" --pid={pid} "$ROOTFS"')
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           "sh", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ROOTFS": str(rootfs)})
    lines = done.stdout.splitlines()
    mounts = dict(("/" + os.path.relpath(line.split(" ")[0], rootfs), line.split(" ")[1])
                  for line in lines[1:])
    return int(lines[0].split("=")[1]), mounts, done.stderr


@pytest.fixture
def driver(tmp_path):
    fake = build_fake_driver(tmp_path / "driver")
    add_imex(fake, [0, 3])
    return fake


@pytest.fixture
def rootfs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    return root


NODE = "rw,nosuid,noexec,relatime"
CHANNELS = "/dev/nvidia-caps-imex-channels"


def test_the_imex_channels_asked_for_are_mounted(driver, rootfs):
    code, mounts, err = cli(rootfs, driver, "--device=0", "--imex-channel=3")
    assert (code, err) == (0, "")
    assert mounts[f"{CHANNELS}/channel3"] == NODE
    assert f"{CHANNELS}/channel0" not in mounts


def test_a_missing_imex_channel_is_a_device_error_with_its_hint(driver, rootfs):
    code, mounts, err = cli(rootfs, driver, "--device=0", "--imex-channel=5")
    assert (code, mounts) == (1, {})
    assert err == (f"nvidia-container-cli: device error: IMEX channel 5: cannot stat "
                   f"{driver.root}{CHANNELS}/channel5: No such file or directory\n"
                   "hint: create the IMEX channel device nodes (nvidia-modprobe -i N)\n")


def test_an_imex_channel_that_is_no_device_is_refused(driver, rootfs):
    fake = driver.path(f"{CHANNELS}/channel3")
    fake.unlink()
    fake.write_text("not a device\n")
    code, mounts, err = cli(rootfs, driver, "--device=0", "--imex-channel=3")
    assert (code, mounts) == (1, {})
    assert err == (f"nvidia-container-cli: device error: IMEX channel 3: {fake} is not a "
                   "character device\n")


def test_the_mount_points_made_in_the_image_keep_their_modes(driver, rootfs):
    code, mounts, err = cli(rootfs, driver, "--device=0", "--utility")
    assert (code, err) == (0, "")
    assert mounts["/usr/bin/nvidia-smi"].startswith("ro,nosuid,nodev")
    # The namespace is gone: what is left in the image is the empty files mounted onto.
    node, program = rootfs / "dev/nvidia0", rootfs / "usr/bin/nvidia-smi"
    assert [(stat.S_IFMT(os.lstat(p).st_mode), stat.S_IMODE(os.lstat(p).st_mode),
             os.path.getsize(p)) for p in (node, program)] == [
        (stat.S_IFREG, 0o600, 0), (stat.S_IFREG, 0o644, 0)]


def test_a_directory_in_the_way_is_refused_before_it_is_mounted_onto(driver, rootfs):
    (rootfs / "dev/nvidia0").mkdir(parents=True)
    code, mounts, err = cli(rootfs, driver, "--device=0")
    assert code == 1
    assert "/dev/nvidia0" not in mounts
    assert err == ("nvidia-container-cli: mount error: /dev/nvidia0 in the container is a "
                   "directory; refusing to mount onto it\nhint: remove it from the image\n")


@pytest.mark.parametrize("what", ["missing", "file", "symlink"])
def test_a_rootfs_that_is_no_directory_is_a_container_error(driver, tmp_path, what):
    target = tmp_path / "not-a-rootfs"
    if what == "file":
        target.write_text("")
    elif what == "symlink":
        (tmp_path / "real").mkdir()
        target.symlink_to(tmp_path / "real")
    code, mounts, err = cli(target, driver, "--device=0")
    assert (code, mounts) == (1, {})
    assert err == f"nvidia-container-cli: container error: {target} is not a directory\n"
    assert not (what == "symlink" and os.listdir(tmp_path / "real"))


def test_the_log_names_each_mount_and_the_library_folders(driver, rootfs, tmp_path):
    log = tmp_path / "log"
    code, _, err = cli(rootfs, driver, "--device=0", "--utility", "--compute",
                       debug=str(log))
    assert (code, err) == (0, "")
    lines = log.read_text().splitlines()
    said = "I nvidia-container-cli: "
    assert f"{said}mounted {driver.root}/dev/nvidia0 at {rootfs}/dev/nvidia0" in lines
    assert f"{said}mounted {driver.root}/usr/bin/nvidia-smi at {rootfs}/usr/bin/nvidia-smi" \
        in lines
    # The ld cache is for the library folder only, not for the programs' /usr/bin.
    assert f"{said}updated the ld cache of {rootfs} for {LIB64_DIR}" in lines


def test_the_mounts_are_made_in_the_containers_mount_namespace(driver, rootfs):
    """--pid of a process in another mount namespace: the cli enters it, and the mounts are
    there, not in the namespace it was started in."""
    container = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 600"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert container.stdout.readline() == "ready\n"
        code, mounts, err = cli(rootfs, driver, "--device=0", pid=str(container.pid))
        assert (code, err) == (0, "")
        assert mounts == {}  # none where it started
        with open(f"/proc/{container.pid}/mountinfo") as f:
            theirs = [line.split(" ")[4] for line in f]
        assert f"{rootfs}/dev/nvidia0" in theirs
    finally:
        container.kill()
        container.wait()


def test_a_container_process_that_is_gone_is_named_with_a_hint(driver, rootfs):
    gone = subprocess.Popen(["true"])
    gone.wait()
    code, mounts, err = cli(rootfs, driver, "--device=0", pid=str(gone.pid))
    assert (code, mounts) == (1, {})
    assert err == (f"nvidia-container-cli: container error: cannot open /proc/{gone.pid}/ns/mnt:"
                   " No such file or directory\nhint: is the container's process still running?\n")


# --- the cgroup v1 device controller, on /proc files made here ------------------------------

NODES = (DeviceNode("/dev/nvidia1", "/x", 195, 1, 0o666, 0, 0),)
OTHER_MOUNT = "29 25 0:25 / {cg}/memory rw,relatime shared:8 - cgroup cgroup rw,memory\n"
DEVICES_MOUNT = "30 25 0:26 {root} {cg}/devices rw,relatime shared:9 - cgroup cgroup rw,{opts}\n"


def fake_proc(tmp_path, cgroup, mountinfo):
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True, exist_ok=True)
    (proc / "self").mkdir(exist_ok=True)
    (proc / "42" / "cgroup").write_bytes(cgroup)
    (proc / "self" / "mountinfo").write_bytes(mountinfo)
    return str(proc)


def group_dir(base, rel):
    path = os.path.join(os.fsencode(base), rel)
    os.makedirs(path)
    return path


@pytest.mark.parametrize("root, group, rel", [
    ("/", b"/docker/a:b", b"docker/a:b"),
    ("/docker", b"/docker/a:b", b"a:b"),         # the mount shows only a subtree
    ("/docker", b"/elsewhere/a:b", b"elsewhere/a:b"),  # a group outside it: as it is
])
def test_the_devices_controller_is_found_among_others(tmp_path, root, group, rel):
    cg = tmp_path / "cg"
    target = group_dir(cg / "devices", rel)
    cgroup = (b"not a cgroup line\n1:devices\n0::/init.scope\n5:memory:/docker/other\n"
              b"4:cpu,devices:" + group + b"\n3:pids:/docker/a:b\n")
    mountinfo = (OTHER_MOUNT + DEVICES_MOUNT.format(root=root, cg=cg, opts="cpu,devices")
                 + DEVICES_MOUNT.format(root="/", cg=f"{cg}/second", opts="devices")).encode()
    assert allow_devices(42, NODES, fake_proc(tmp_path, cgroup, mountinfo)) == ["c 195:1 rwm"]
    allow = os.path.join(target, b"devices.allow")
    with open(allow, "rb") as f:
        assert f.read() == b"c 195:1 rwm\n"
    assert stat.S_IMODE(os.stat(allow).st_mode) == 0o644  # made: no cgroupfs here


def test_paths_that_are_not_utf8_are_kept_as_bytes(tmp_path):
    """In the group path and in the controller's mount point."""
    cg = os.fsdecode(os.fsencode(tmp_path) + b"/cg\xfe")
    target = group_dir(os.path.join(cg, "devices"), b"docker/\xff")
    mountinfo = os.fsencode(DEVICES_MOUNT.format(root="/", cg=cg, opts="devices"))
    allow_devices(42, NODES, fake_proc(tmp_path, b"4:devices:/docker/\xff\n", mountinfo))
    with open(os.path.join(target, b"devices.allow"), "rb") as f:
        assert f.read() == b"c 195:1 rwm\n"


@pytest.mark.parametrize("cgroup, mounts", [
    (b"4:devices:/docker/abc\n", OTHER_MOUNT),      # a devices group, no devices mount
    (b"5:memory:/docker/abc\n", DEVICES_MOUNT),     # a devices mount, no devices group
])
def test_without_both_the_group_and_its_mount_there_is_no_controller(tmp_path, cgroup, mounts):
    mountinfo = mounts.format(root="/", cg=tmp_path / "cg", opts="devices").encode()
    with pytest.raises(NvcError) as caught:
        allow_devices(42, NODES, fake_proc(tmp_path, cgroup, mountinfo))
    assert (caught.value.kind, caught.value.message.split(" (")[0]) == (
        "cgroup", "no cgroup v1 device controller for the container")


def test_cgroups_that_cannot_be_read_are_a_cgroup_error(tmp_path):
    with pytest.raises(NvcError) as caught:
        allow_devices(43, NODES, fake_proc(tmp_path, b"", b""))
    assert (caught.value.kind, caught.value.message) == (
        "cgroup", "cannot read the cgroups of process 43: No such file or directory")


def test_a_devices_allow_that_cannot_be_written_is_a_cgroup_error(tmp_path):
    cg = tmp_path / "cg"
    target = group_dir(cg / "devices", b"docker/abc")
    os.mkdir(os.path.join(target, b"devices.allow"))
    mountinfo = DEVICES_MOUNT.format(root="/", cg=cg, opts="devices").encode()
    with pytest.raises(NvcError) as caught:
        allow_devices(42, NODES, fake_proc(tmp_path, b"4:devices:/docker/abc\n", mountinfo))
    assert (caught.value.kind, caught.value.message) == (
        "cgroup", f"cannot write {cg}/devices/docker/abc/devices.allow: Is a directory")


# --- the mounts leave no descriptor open -----------------------------------------------------

PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from nvdocker2.nvc.configure import Bind, bind_all
os.close(0)  # the first descriptor opened is then 0
before = sorted(os.listdir("/proc/self/fd"))
log = []
keep = bind_all(sys.argv[2], (Bind(sys.argv[3], "/dev/nvidia0", True),
                              Bind(sys.argv[4], "/usr/bin/nvidia-smi", False)), log)
print(json.dumps([before == sorted(os.listdir("/proc/self/fd")), len(keep), log]))
"""


def test_the_mounts_leave_no_descriptor_open(driver, rootfs):
    node, program = driver.path("/dev/nvidia0"), driver.path("/usr/bin/nvidia-smi")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                           PROBE, REPO, str(rootfs), str(node), str(program)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, 1, [
        f"mounted {node} at {rootfs}/dev/nvidia0",
        f"mounted {program} at {rootfs}/usr/bin/nvidia-smi"]]


ENTER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from nvdocker2.nvc.configure import NvcError, bind_all, Bind, enter_mount_namespace
before = sorted(os.listdir("/proc/self/fd"))
enter_mount_namespace(int(sys.argv[2]))
print(before == sorted(os.listdir("/proc/self/fd")))
try:
    bind_all(sys.argv[3], (Bind("/nonexistent/nvidia9", "/dev/nvidia9", True),), [])
except NvcError as err:
    print(err.kind, err.message)
"""


def test_entering_the_namespace_leaves_no_descriptor_and_a_missing_source_is_named(rootfs):
    container = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 600"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert container.stdout.readline() == "ready\n"
        done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                               "-c", ENTER, REPO, str(container.pid), str(rootfs)],
                              capture_output=True, text=True, timeout=60)
    finally:
        container.kill()
        container.wait()
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "True", "mount /nonexistent/nvidia9 at /dev/nvidia9: No such file or directory"]



def test_a_namespace_it_may_not_enter_is_a_container_error(driver, rootfs):
    """Without CAP_SYS_ADMIN (setpriv takes it off) setns is refused: one line, nothing
    mounted anywhere."""
    container = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 600"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert container.stdout.readline() == "ready\n"
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "setpriv", "--bounding-set=-sys_admin",
             "--inh-caps=-sys_admin", sys.executable, "-m", "nvdocker2.nvc",
             f"--root={driver.root}", "configure", "--no-cgroups", "--device=0",
             f"--pid={container.pid}", str(rootfs)],
            capture_output=True, text=True, timeout=60)
        with open(f"/proc/{container.pid}/mountinfo") as f:
            assert str(rootfs) not in f.read()
    finally:
        container.kill()
        container.wait()
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("nvidia-container-cli: container error: entering the mount namespace"
                           f" of process {container.pid}: Operation not permitted\n")


def test_an_image_symlink_that_climbs_out_of_the_rootfs_is_refused(driver, rootfs, tmp_path):
    (rootfs / "usr").mkdir()
    (rootfs / "usr" / "bin").symlink_to("../../../outside")
    code, mounts, err = cli(rootfs, driver, "--utility")
    assert code == 1 and not [m for m in mounts if "nvidia-smi" in m]
    assert err.splitlines()[0] == (
        "nvidia-container-cli: mount error: /usr/bin in the container image is a symlink to"
        " '../../../outside', which leads outside the container's root; refusing it")
    assert not (tmp_path / "outside").exists() and not (rootfs / "outside").exists()
