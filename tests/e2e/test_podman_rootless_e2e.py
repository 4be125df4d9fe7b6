"""Rootless Podman 4.3 given GPUs by `nvdocker2 cdi generate`'s spec.

A throwaway user (privatepodman.RootlessUser: made inside the private namespace, so the
machine's /etc never holds it) runs Podman with subuid/subgid ranges; the namespace's /dev
holds the fake driver's nodes, since rootless Podman bind-mounts a node from its container
path. The spec is generated from the TEST FIXTURE fake driver tree and installed 0644, as a
rootless reader needs. What the user would see is asserted inside the container.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import podmanchecks as checks
from fixtures.fake_driver import build_fake_driver
from podmanchecks import LIBCUDA
from privatedockerd import busybox_rootfs_tar
from privatepodman import PrivatePodman, RootlessUser, runtime_launcher

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/nvd2-rootless:1"


@pytest.fixture(scope="module")
def rl(podman_prerequisites):
    from prereq import require

    require("rootless podman", [t for t in ("newuidmap", "newgidmap", "setpriv", "useradd")
                                if shutil.which(t) is None])
    # Every path the user reads (driver files, the hook, the image) must be reachable by it.
    root = Path(tempfile.mkdtemp(prefix="nvd2-rootless-"))
    root.chmod(0o755)
    runtime = runtime_launcher(root)
    driver = build_fake_driver(root / "driver")
    spec = root / "nvidia.yaml"
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(root / "none.toml"))
    r = subprocess.run([sys.executable, "-m", "nvdocker2", "cdi", "generate", "--output",
                        str(spec), "--driver-root", str(driver.root), "--runtime-path", runtime],
                       capture_output=True, text=True, env=env, timeout=120, cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    nodes = {p.name: (os.major(p.stat().st_rdev), os.minor(p.stat().st_rdev))
             for p in (driver.root / "dev").iterdir()}
    pod = PrivatePodman(root / "podman")
    pod.start()
    try:
        pod.write_cdi_spec("nvidia.yaml", spec.read_text())
        pod.sh("chmod 0644 /etc/cdi/nvidia.yaml")
        home = root / "home"
        user = RootlessUser(pod, home, nodes)
        tar = home / "busybox.tar"
        shutil.copy(busybox_rootfs_tar(), tar)
        tar.chmod(0o644)
        user.podman("import", str(tar), IMAGE)
        yield user, driver
        user.stop()
        assert user.processes() == [], "the user's pause process outlived the test"
    finally:
        pod.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def run(user, device: str, script: str):
    return user.podman("run", "--rm", "--network=none", "--device", device, IMAGE, "sh", "-c",
                       script, check=False)


def test_the_user_exists_only_in_the_namespace_and_maps_subordinate_ids(rl):
    user, _ = rl
    with pytest.raises(KeyError):
        pwd.getpwnam(user.name)
    r = run(user, "nvidia.com/gpu=0", "cat /proc/self/uid_map")
    assert r.returncode == 0, r.stderr
    first = r.stdout.split("\n")[0].split()
    assert first == ["0", str(user.uid), "1"]
    assert len(r.stdout.strip().splitlines()) >= 2  # subordinate ranges too, not one uid


@pytest.mark.parametrize("which", checks.WHICH)
def test_a_rootless_container_sees_exactly_the_gpus_it_asked_for(rl, which):
    user, driver = rl
    device, gpus = checks.requested(driver, which)
    checks.assert_exactly_these_gpus(run(user, device, checks.NODES), gpus)


def test_rootless_driver_files_are_read_only_and_in_the_ld_cache(rl):
    user, _ = rl
    # root's file is nobody's in the user namespace: the write is refused before EROFS; the
    # createContainer hook ran ldconfig, rootless too.
    r = run(user, "nvidia.com/gpu=all", checks.DRIVER_FILES)
    checks.assert_driver_files_read_only(r, f"can't create {LIBCUDA}")


def test_a_spec_the_user_cannot_read_gives_no_gpu_and_validate_says_why(rl, tmp_path):
    user, _ = rl
    user.pod.sh("chmod 0600 /etc/cdi/nvidia.yaml")
    try:
        r = run(user, "nvidia.com/gpu=0", "true")
        v = user.pod.sh(f"{sys.executable} -m nvdocker2 cdi validate /etc/cdi/nvidia.yaml "
                        "--for podman-4.3", check=False)
    finally:
        user.pod.sh("chmod 0644 /etc/cdi/nvidia.yaml")
    assert r.returncode != 0
    assert "unresolvable CDI devices nvidia.com/gpu=0" in r.stderr
    assert ("warning: /etc/cdi/nvidia.yaml is not readable by other users (mode 0600): "
            "rootless Podman cannot read it; chmod 0644 it") in v.stderr
