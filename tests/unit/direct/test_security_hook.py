"""Direct mode's createContainer hook against hostile images (docs/reference.md §7).

runc runs the hook inside the container's mount namespace before pivot_root: the container's
/proc is mounted in the rootfs and its pid 1 (runc init) still has the host's root. The host's
`ldconfig -r ROOTFS` chroots into the image, and a chroot does not stop /proc magic links
(`/proc/PID/root`), so the hook must hide /proc from ldconfig.
These tests mount a real procfs into a TEST FIXTURE rootfs (root only).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from fixtures.fake_driver import make_bundle

from nvdocker2.direct.hook import main

needs_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="mounts a procfs: root only")


def _state(bundle):
    return io.StringIO(json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating",
                                   "pid": 1, "bundle": str(bundle)}))


@pytest.fixture
def proc_rootfs(tmp_path):
    """A bundle whose rootfs has a real procfs at /proc, as runc leaves it for the hook."""
    bundle, rootfs, _spec = make_bundle(tmp_path)
    (rootfs / "proc").mkdir()
    subprocess.run(["mount", "-t", "proc", "proc", str(rootfs / "proc")], check=True)
    try:
        yield bundle, rootfs
    finally:
        subprocess.run(["umount", "-l", str(rootfs / "proc")], check=False)


@needs_root
def test_ldconfig_does_not_follow_proc_pid_root_out_of_the_rootfs(proc_rootfs, tmp_path, capsys):
    """/var/cache/ldconfig -> /proc/<a process with the host root>/root/<host dir>: ldconfig
    would write its aux-cache file into that host directory as root."""
    bundle, rootfs = proc_rootfs
    target = tmp_path / "host-dir"
    target.mkdir()
    (rootfs / "var/cache").mkdir(parents=True)
    os.symlink(f"/proc/{os.getpid()}/root{target}", rootfs / "var/cache/ldconfig")
    (rootfs / "etc/ld.so.conf").write_text(f"/proc/{os.getpid()}/root{target}\n")

    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 0
    assert capsys.readouterr().err == ""
    assert os.listdir(target) == []
    assert (rootfs / "etc/ld.so.cache").is_file()
    # the container's own /proc is untouched: the hook hid it in a namespace of its own
    assert os.path.ismount(rootfs / "proc")


@needs_root
def test_ldconfig_makes_no_links_in_host_directories_through_proc(proc_rootfs, tmp_path):
    """An image's ld.so.conf naming /proc/<pid>/root/<host dir>: ldconfig would scan that host
    directory, put its libraries in the image's cache and make soname links in it."""
    bundle, rootfs = proc_rootfs
    host_lib = tmp_path / "host-lib"
    host_lib.mkdir()
    with open("/lib/x86_64-linux-gnu/libdl.so.2", "rb") as src:  # soname libdl.so.2
        (host_lib / "libhost.so.9").write_bytes(src.read())
    (rootfs / "etc/ld.so.conf").write_text(f"/proc/{os.getpid()}/root{host_lib}\n")

    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 0
    assert os.listdir(host_lib) == ["libhost.so.9"]
    assert str(host_lib).encode() not in (rootfs / "etc/ld.so.cache").read_bytes()


def test_ldconfig_output_that_is_not_utf8_is_reported_not_a_traceback(tmp_path, capsys):
    """ldconfig names the image's files in its warnings, and file names are bytes."""
    bundle, rootfs, _spec = make_bundle(tmp_path)
    (rootfs / "usr/lib").joinpath(os.fsdecode(b"libbad\xff.so.1")).write_bytes(b"\x7fELF\x02\x01")
    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 0
    assert capsys.readouterr().err == ""
    script = tmp_path / "noisy-ldconfig"
    script.write_text("#!/bin/sh\nprintf 'ldconfig: file /usr/lib/libbad\\377.so.1 is bad\\n'"
                      "\nexit 1\n")
    script.chmod(0o755)
    assert main(["update-ldcache", "--ldconfig", str(script)], _state(bundle)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {script} -r {rootfs} failed (exit 1): ldconfig: file"
                          " /usr/lib/libbad\\xff.so.1 is bad")


def test_an_ld_so_conf_fifo_does_not_hang_the_container_start(tmp_path, capsys, monkeypatch):
    """ldconfig blocks for ever reading a FIFO; the hook stops it and says so."""
    import nvdocker2.direct.hook as hook

    monkeypatch.setattr(hook, "LDCONFIG_TIMEOUT", 1.0)
    bundle, rootfs, _spec = make_bundle(tmp_path)
    os.mkfifo(rootfs / "etc/ld.so.conf")
    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: /sbin/ldconfig -r {rootfs} did not finish within 1 seconds")
    assert err.count("\n") == 2  # error and hint


def test_a_deeply_nested_state_is_one_error_line(capsys):
    state = io.StringIO('{"bundle": ' + "[" * 5000 + "]" * 5000 + "}")
    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], state) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: direct-hook: ")
    assert err.count("\n") == 1


@pytest.fixture
def mounted_rootfs(tmp_path):
    """A bundle as runc leaves it for the hook: below the rootfs a read-write volume (at a path
    with a space, which mountinfo escapes), a tmpfs, procfs, and the driver's libcuda
    bind-mounted read-only into the library folder (listed in config.json as the spec would
    list it)."""
    from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver

    driver = build_fake_driver(tmp_path / "driver")
    bundle, rootfs, spec = make_bundle(tmp_path)
    libdir = rootfs / LIB64_DIR.lstrip("/")
    libdir.mkdir(parents=True)
    cuda = f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}"
    (rootfs / cuda.lstrip("/")).touch()
    volume = tmp_path / "volume"
    volume.mkdir()
    for d in ("data dir", "proc", "dev"):
        (rootfs / d).mkdir(exist_ok=True)
    spec["mounts"].append({"destination": cuda, "type": "bind", "source": str(driver.path(cuda)),
                           "options": ["nosuid", "nodev", "bind", "ro"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    mounts = [
        ["mount", "--bind", str(volume), str(rootfs / "data dir")],
        ["mount", "-t", "tmpfs", "tmpfs", str(rootfs / "dev")],
        ["mount", "-t", "proc", "proc", str(rootfs / "proc")],
        ["mount", "--bind", "-o", "ro", str(driver.path(cuda)), str(rootfs / cuda.lstrip("/"))],
    ]
    done = []
    try:
        for argv in mounts:
            subprocess.run(argv, check=True)
            done.append(argv[-1])
        yield bundle, rootfs, cuda
    finally:
        for point in reversed(done):
            subprocess.run(["umount", "-l", point], check=False)


def _recording_ldconfig(tmp_path):
    """A stand-in for ldconfig that writes down what it was given: its argv, capabilities,
    no_new_privs and the mounts it sees."""
    out = tmp_path / "seen"
    script = tmp_path / "recording-ldconfig"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {out}.argv\n"
                      f"grep -E '^(Cap|NoNewPrivs)' /proc/self/status > {out}.status\n"
                      f"cat /proc/self/mountinfo > {out}.mounts\n")
    script.chmod(0o755)
    return script, out


@needs_root
def test_ldconfig_sees_only_the_image_and_the_drivers_read_only_files(mounted_rootfs, tmp_path):
    bundle, rootfs, cuda = mounted_rootfs
    script, out = _recording_ldconfig(tmp_path)
    folder = os.path.dirname(cuda)
    assert main(["update-ldcache", "--ldconfig", str(script), "--folder", folder],
                _state(bundle)) == 0
    assert _points_below(rootfs, Path(f"{out}.mounts").read_text()) == [f"{rootfs}{cuda}"]
    assert Path(f"{out}.argv").read_text() == f"-i -X -r {rootfs} {folder}\n"
    # the container's own mounts are all still there
    assert _points_below(rootfs, Path("/proc/self/mountinfo").read_text()) == sorted(
        [f"{rootfs}{cuda}", f"{rootfs}/data dir", f"{rootfs}/dev", f"{rootfs}/proc"])


def _points_below(rootfs, mountinfo):
    points = (line.split(" ")[4].replace("\\040", " ") for line in mountinfo.splitlines())
    return sorted(p for p in points if p.startswith(f"{rootfs}/"))


@needs_root
def test_ldconfig_runs_with_cap_sys_chroot_alone_and_no_new_privs(mounted_rootfs, tmp_path):
    bundle, _rootfs, _cuda = mounted_rootfs
    script, out = _recording_ldconfig(tmp_path)
    assert main(["update-ldcache", "--ldconfig", str(script)], _state(bundle)) == 0
    status = dict(line.split(":\t") for line in Path(f"{out}.status").read_text().splitlines())
    chroot_only = f"{1 << 18:016x}"
    assert {k: status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
        "CapInh": "0" * 16, "CapPrm": chroot_only, "CapEff": chroot_only,
        "CapBnd": chroot_only, "CapAmb": "0" * 16}
    assert status["NoNewPrivs"] == "1"
    # the hook's own process (here: the test's) keeps what it had
    own = dict(line.split(":\t") for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("Cap"))
    assert own["CapEff"] != chroot_only


@needs_root
def test_an_image_aux_cache_dir_is_read_only_for_ldconfig(mounted_rootfs, tmp_path):
    """The image's /var/cache/ldconfig is covered by an empty read-only tmpfs for ldconfig:
    the host's real ldconfig neither reads the image's aux cache nor writes one."""
    bundle, rootfs, _cuda = mounted_rootfs
    aux = rootfs / "var/cache/ldconfig"
    aux.mkdir(parents=True)
    (aux / "aux-cache").write_bytes(b"glibc-ld.so.auxcache-2.0 planted by the image")
    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 0
    assert os.listdir(aux) == ["aux-cache"]
    assert (aux / "aux-cache").read_bytes() == b"glibc-ld.so.auxcache-2.0 planted by the image"
    assert (rootfs / "etc/ld.so.cache").is_file()


@needs_root
def test_an_etc_that_is_another_mount_is_refused_and_not_written(tmp_path, capsys):
    """ldconfig writes /etc/ld.so.cache~ and /etc/ld.so.cache: not into a volume at /etc."""
    bundle, rootfs, _spec = make_bundle(tmp_path)
    volume = tmp_path / "etc-volume"
    volume.mkdir()
    subprocess.run(["mount", "--bind", str(volume), str(rootfs / "etc")], check=True)
    try:
        assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig"], _state(bundle)) == 1
    finally:
        subprocess.run(["umount", "-l", str(rootfs / "etc")], check=False)
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: /etc in the container is on another mount than the container image (a volume?);"
        " refusing to make links or run ldconfig there")
    assert os.listdir(volume) == []
