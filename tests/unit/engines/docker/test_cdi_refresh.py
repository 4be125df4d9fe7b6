"""`cdi refresh` rewrites only the spec `install --mode cdi` wrote, and only in a directory no
other user can write, never through a symlink (docs/cdi.md "Refresh", docs/security.md).

The packages run it as root at every boot, on a driver change and on a MIG change, so a spec
someone made by hand must keep its bytes, and a link another user planted at the spec's name
must never make root write (or back up) the file it points at. The other user is `nobody`,
acting through `setpriv`; the driver is the TEST FIXTURE fake tree (tests/fixtures)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from ...dockerd_fixtures import running_engine
from .test_cdi import DIRS, GPU, Host

SECRET = b"root:$y$j9T$only-root-reads-this:19000:0:99999:7:::\n"
HAND_MADE = (b'cdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ndevices:\n  - name: "0"\n'
             b'    containerEdits:\n      deviceNodes:\n        - path: "/dev/nvidia0"\n')

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as nobody")


@pytest.fixture
def shared():
    """A Host under a directory of root's in /tmp (0755: nobody may enter it, as pytest's own
    tmp_path does not let it), with a root-only file beside it; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="nvd2-cdi-refresh-", dir="/tmp"))
    base.chmod(0o755)
    secret = base / "shadow-like"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    try:
        with running_engine(base) as engine:
            yield Host(base, engine), secret
    finally:
        shutil.rmtree(base)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A root-only file beside the Host of `host`."""
    p = tmp_path / "shadow-like"
    p.write_bytes(SECRET)
    p.chmod(0o600)
    return p


def installed(host: Host) -> None:
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    r = host.install()
    assert r.returncode == 0, r.stderr


def remove_a_gpu(host: Host) -> None:
    """The GPU at minor 1 goes away: the spec install wrote is stale from now on."""
    gone = host.driver.root / "proc/driver/nvidia/gpus" / host.driver.gpus[1].bus_id
    for p in gone.iterdir():
        p.unlink()
    gone.rmdir()


def as_nobody(*cmd: str) -> None:
    pw = pwd.getpwnam("nobody")
    r = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                        "--clear-groups", *cmd], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def refused(r: subprocess.CompletedProcess, first_line: str) -> None:
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0] == first_line, r.stderr
    assert lines[1].startswith("hint: ")


@needs_root
def test_a_link_a_group_member_plants_in_a_group_writable_spec_dir_is_never_written(shared):
    host, secret = shared
    installed(host)
    remove_a_gpu(host)
    backups = host.backups()
    # An administrator lets the group nogroup write the spec directory; nobody, a member,
    # swaps the spec for a link to a root-only file.
    os.chown(host.spec_dir, 0, pwd.getpwnam("nobody").pw_gid)
    host.spec_dir.chmod(0o775)
    as_nobody("rm", str(host.spec))
    as_nobody("ln", "-s", str(secret), str(host.spec))

    r = host.run("cdi", "refresh", mode=False)
    refused(r, f"error: CDI spec directory {host.spec_dir}: {host.spec_dir} is writable by "
               "other users; nothing was read or written")
    assert "chmod go-w" in r.stderr
    assert secret.read_bytes() == SECRET
    assert stat.S_IMODE(secret.lstat().st_mode) == 0o600 and secret.lstat().st_uid == 0
    assert host.backups() == backups  # nothing of the secret copied into the state
    assert sorted(p.name for p in secret.parent.iterdir() if p.name.startswith(".")) == []
    assert os.readlink(host.spec) == str(secret)


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_symlink_or_fifo_at_the_spec_name_is_refused_in_a_trusted_dir(host, secret, planted):
    installed(host)
    remove_a_gpu(host)
    backups = host.backups()
    host.spec.unlink()
    if planted == "symlink":
        host.spec.symlink_to(secret)
        why = "is a symlink"
    else:
        os.mkfifo(host.spec, 0o644)
        why = "is not a regular file"

    r = host.run("cdi", "refresh", mode=False)
    refused(r, f"error: {host.spec} {why}; nothing was read or written (cdi refresh replaces "
               "only the file install --mode cdi wrote)")
    assert f"rm {host.spec}" in r.stderr
    assert secret.read_bytes() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert host.backups() == backups
    assert sorted(p.name for p in host.spec_dir.iterdir()) == ["nvidia.yaml"]  # no temp file
    assert host.spec.is_symlink() if planted == "symlink" else stat.S_ISFIFO(
        host.spec.lstat().st_mode)


def test_a_hand_made_spec_is_left_byte_for_byte(host):
    host.spec_dir.mkdir()
    host.spec.write_bytes(HAND_MADE)
    mtime = host.spec.stat().st_mtime_ns

    r = host.run("cdi", "refresh", "--cdi-spec-dir", str(host.spec_dir), mode=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"left alone: {host.spec}: nvdocker2 install --mode cdi did not write "
                        "it (its journal records no spec there); nothing written\n")
    r = host.run("cdi", "refresh", "--cdi-spec-dir", str(host.spec_dir), "--json", mode=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["changed"], out["present"], out["backup"]) == (False, True, None)
    assert out["left_alone"].startswith("nvdocker2 install --mode cdi did not write it")
    assert host.spec.read_bytes() == HAND_MADE and host.spec.stat().st_mtime_ns == mtime
    assert host.backups() == []


def test_a_spec_replaced_by_hand_after_install_is_left_byte_for_byte(host):
    installed(host)
    remove_a_gpu(host)
    backups = host.backups()
    host.spec.write_bytes(HAND_MADE)

    r = host.run("cdi", "refresh", mode=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"left alone: {host.spec}: it does not start with the line install "
                        "--mode cdi writes (replaced since?); nothing written\n")
    assert host.spec.read_bytes() == HAND_MADE
    assert host.backups() == backups


def test_the_spec_install_wrote_is_rewritten_in_place_keeping_its_mode(host):
    installed(host)
    host.spec.chmod(0o640)
    remove_a_gpu(host)

    r = host.run("cdi", "refresh", "--json", mode=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["changed"] is True and out["left_alone"] is None
    assert out["devices"] == [f"{GPU}=0", f"{GPU}={host.driver.gpus[0].uuid}", f"{GPU}=all"]
    assert f"{GPU}={host.driver.gpus[1].uuid}" not in host.spec.read_text()
    assert stat.S_IMODE(host.spec.stat().st_mode) == 0o640
    assert sorted(p.name for p in host.spec_dir.iterdir()) == ["nvidia.yaml"]


def test_a_link_put_at_the_spec_name_right_before_the_rename_is_not_written_through(
        host, secret, monkeypatch):
    installed(host)
    remove_a_gpu(host)
    backups = host.backups()
    # Test hook (read only under the test suite's switch): runs at the instant between the
    # complete temp file and the rename.
    monkeypatch.setenv("NVDOCKER2_TEST_RUN_BEFORE_RENAME",
                       f"rm {host.spec} && ln -s {secret} {host.spec}")

    r = host.run("cdi", "refresh", mode=False)
    refused(r, f"error: {host.spec} was changed by another program while nvdocker2 was editing "
               "it (it was replaced by a symlink); nothing was written")
    assert secret.read_bytes() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert os.readlink(host.spec) == str(secret)
    assert host.backups() == backups
    assert sorted(p.name for p in host.spec_dir.iterdir()) == ["nvidia.yaml"]


def test_refresh_makes_a_missing_control_node_first_so_the_spec_lists_it(host):
    from fixtures.fake_driver import UVM_MAJOR, write_proc_devices

    write_proc_devices(host.driver)
    tools = host.driver.root / "dev/nvidia-uvm-tools"
    tools.unlink()  # as at boot before any CUDA call: nvidia-modprobe made none yet
    installed(host)
    assert '"/dev/nvidia-uvm-tools"' not in host.spec.read_text()
    r = host.run("cdi", "refresh", "--json", mode=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is True
    st = tools.lstat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (
        UVM_MAJOR, 1)
    assert '"/dev/nvidia-uvm-tools"' in host.spec.read_text()
