"""Podman 5 (Debian 13 and sid) given GPUs by `nvdocker2 cdi generate`'s spec, rootful and
rootless, in the platform matrix's trees.

Each suite gets a tree (trees.py) with the .deb installed, the TEST FIXTURE fake driver tree
of 2 GPUs at /opt/nvd2-driver inside it, and the spec written by the tree's own `nvdocker2 cdi
generate` into the tree's /etc/cdi, as an operator writes it there. Podman is the tree's, run
in a mount namespace made from the tree's and pivot_rooted into the tree (TreePodman: a
chrooted process may not make the user namespace rootless Podman needs), with the settings
this VM needs (privatepodman.CONTAINERS_CONF: cgroupfs, runc, ulimits, a file event log); its
storage, /etc and /run are the tree's, so nothing of this machine is written. The rootless
user (privatepodman.RootlessUser) is made in the tree's /etc with subuid/subgid ranges; the
namespace gets a /dev of its own holding the fake nodes (rootless Podman bind-mounts a node
from its container path). What a user would see is asserted inside the container, with the
checks the Debian 12 Podman tests use (tests/e2e/podmanchecks.py); the hostile image's
"host" paths are the tree's, as Podman there sees the host.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import podmanchecks as checks
import pytest
import trees
from fixtures.fake_driver import build_fake_driver
from privatepodman import PrivatePodman, RootlessUser

DRIVER = "/opt/nvd2-driver"
SPEC = "/etc/cdi/nvidia.yaml"
IMAGE = "localhost/nvd2-podman:1"
WHO = ["root", "user"]
# Appending to a driver file: refused by the read-only mount as root; as the rootless user
# root's file is nobody's in the user namespace, so it is refused before that.
REFUSAL = {"root": "Read-only file system", "user": f"can't create {checks.LIBCUDA}"}


class TreePodman(PrivatePodman):
    """PrivatePodman run in the tree: its holder makes a mount namespace of its own from the
    tree's and pivot_roots into the tree (not a chroot: a chrooted process may not make a user
    namespace, which rootless Podman needs). `root` is a directory of ours as the tree's
    commands see it (unique, so two trees' users never mix)."""

    def __init__(self, tree: trees.Tree) -> None:
        self.tree = tree
        super().__init__(Path(f"/var/lib/nvd2-podman-{os.urandom(3).hex()}"))
        self.env = {**trees.TREE_ENV, "PODMAN_IGNORE_CGROUPSV1_WARNING": "1",
                    "CONTAINERS_CONF": str(self.root / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf")}

    def host_path(self, path: str | os.PathLike) -> Path:
        return self.tree.path(str(path))

    def holder_argv(self) -> list[str]:
        script = (
            "set -e\n"
            f"cd {shlex.quote(str(self.tree.root))}\n"
            "mkdir .nvd2-old-root\n"
            "pivot_root . .nvd2-old-root\n"
            "cd /\n"
            "umount -l /.nvd2-old-root\n"
            "rmdir /.nvd2-old-root\n"
            "echo ready\n"
            "exec sleep 86400\n"
        )
        return self.tree.namespace_argv(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script])


@dataclass
class Host:
    tree: trees.Tree
    driver: object
    engines: dict  # "root": TreePodman, "user": RootlessUser

    def import_image(self, who: str, tag: str, extra=()) -> str:
        """`podman import`, as `who`, of the busybox-static rootfs plus `extra`."""
        engine = self.engines[who]
        return self.engines["root"].import_image(tag, extra, engine=engine)

    def run(self, who: str, device: str, script: str, image: str = IMAGE):
        return self.engines[who].podman("run", "--rm", "--network=none", "--device", device,
                                        image, "sh", "-c", script, check=False)


@pytest.fixture(scope="module", params=[n for n, s in trees.SUITES.items() if s.podman])
def suite(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def host(suite, deb):
    tree = trees.open_tree(suite)  # a suite not selected is deselected (conftest.py)
    pod = user = None
    try:
        tree.install_deb(deb, env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
        driver = build_fake_driver(tree.path(DRIVER))
        tree.ok(f"nvdocker2 cdi generate --driver-root {DRIVER}",
                env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": "/nonexistent.toml"})
        pod = TreePodman(tree)
        pod.start()
        nodes = {p.name: (os.major(p.stat().st_rdev), os.minor(p.stat().st_rdev))
                 for p in tree.path(f"{DRIVER}/dev").iterdir()}
        user = RootlessUser(pod, pod.root / "home", nodes)
        made = Host(tree, driver, {"root": pod, "user": user})
        for who in WHO:
            made.import_image(who, IMAGE)
        yield made
        user.stop()
        assert user.processes() == [], "the user's pause process outlived the tests"
    finally:
        if user is not None:
            user.stop()
        if pod is not None:
            pod.cleanup()
        tree.close()


def test_the_tree_runs_the_suites_podman_and_the_spec_is_the_trees_own(host):
    version = host.engines["root"].podman("version", "--format", "{{.Client.Version}}")
    assert version.stdout.startswith(host.tree.suite.podman + "."), version.stdout
    spec = host.tree.path(SPEC)
    assert spec.stat().st_mode & 0o777 == 0o644
    assert 'cdiVersion: "0.5.0"' in spec.read_text()
    assert 'path: "/usr/bin/nvidia-container-runtime"' in spec.read_text()


def test_the_rootless_user_is_uid_mapped_with_subordinate_ids(host):
    user = host.engines["user"]
    proc = host.run("user", "nvidia.com/gpu=0", "cat /proc/self/uid_map")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split() == ["0", str(user.uid), "1"]
    # the tree's useradd gives a new user its range itself (SUB_UID_MIN in login.defs)
    ranges = [line.split(":") for line in host.tree.path("/etc/subuid").read_text().split()]
    start, count = next(r[1:] for r in ranges if r[0] == user.name)
    assert lines[1].split() == ["1", start, count]


@pytest.mark.parametrize("which", checks.WHICH)
@pytest.mark.parametrize("who", WHO)
def test_a_container_sees_exactly_the_gpus_it_asked_for(host, who, which):
    device, gpus = checks.requested(host.driver, which)
    checks.assert_exactly_these_gpus(host.run(who, device, checks.NODES), gpus)


@pytest.mark.parametrize("who", WHO)
def test_a_container_without_the_device_sees_no_gpu_and_no_driver_file(host, who):
    proc = host.engines[who].podman("run", "--rm", "--network=none", IMAGE, "sh", "-c",
                                    f"ls /dev; ls {checks.LIBCUDA}", check=False)
    assert "nvidia" not in proc.stdout
    assert f"{checks.LIBCUDA}: No such file or directory" in proc.stderr


@pytest.mark.parametrize("who", WHO)
def test_the_driver_files_are_read_only_and_in_the_ld_cache(host, who):
    proc = host.run(who, "nvidia.com/gpu=all", checks.DRIVER_FILES)
    checks.assert_driver_files_read_only(proc, REFUSAL[who])


@pytest.mark.parametrize("who", WHO)
def test_an_image_linking_out_of_its_rootfs_changes_nothing_on_the_host(host, who):
    """The image's library directory and /etc/ld.so.cache are absolute links to a directory
    and a file of the tree (the host, as Podman sees it)."""
    inside = host.engines["root"].root / f"links-out-{who}"
    host_dir, host_file = checks.make_host_targets(host.tree.path(str(inside)))
    image = host.import_image(who, f"localhost/nvd2-links-out-{who}:1", checks.links_out_image(
        str(inside / host_dir.name), str(inside / host_file.name)))
    proc = host.run(who, "nvidia.com/gpu=all", checks.LIST_LIBRARIES, image=image)
    checks.assert_links_out_changed_nothing(proc, host_dir, host_file)
