"""The package takeover from NVIDIA's packages (tests/packaging/takeover.py) on Debian 13 and
sid, whose dpkg and apt are newer than Debian 12's (tests/packaging/test_takeover.py): each
case in a fresh tree of the suite (trees.py) without our .deb, then our .deb over the
stand-ins and our upgrade over ours, as on Debian 12. Then the host NVIDIA left behind runs GPU
containers: daemon.json as `nvidia-ctk runtime configure` writes it, the tree's dockerd started
on it, `nvdocker2 install` adopting NVIDIA's `nvidia` entry, a GPU container through
`--runtime=nvidia` on the admin's config.toml (NVIDIA's default, `mode = "auto"`) asking for a
CDI name from the spec `nvdocker2 cdi generate` wrote from the TEST FIXTURE fake driver, and
`nvdocker2 uninstall` giving NVIDIA's daemon.json bytes back.

The upgrade .deb (version pkgtest.UPGRADE_VERSION): NVDOCKER2_DEB_UPGRADE when set, else
`make deb DEB_VERSION=...` once per session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trees
from fixtures.fake_driver import build_fake_driver
from pkgtest import REPO, RUNTIME, UPGRADE_VERSION
from takeover import take_over

DRIVER = "/opt/nvd2-driver"
# `nvidia-ctk runtime configure --runtime=docker` over no daemon.json: Go's json.MarshalIndent
# (four spaces, keys sorted, no newline at the end), the bare name as the runtime's path.
NVIDIA_WROTE = json.dumps({"runtimes": {"nvidia": {
    "args": [], "path": "nvidia-container-runtime"}}}, indent=4, sort_keys=True).encode()


@pytest.fixture(scope="session")
def deb_upgrade(deb, tmp_path_factory) -> Path:
    given = os.environ.get("NVDOCKER2_DEB_UPGRADE")
    if given:
        if not Path(given).is_file():
            trees.unavailable(f"NVDOCKER2_DEB_UPGRADE={given}: no such file")
        return Path(given)
    dist = tmp_path_factory.mktemp("dist-upgrade")
    proc = trees._run(["make", "-C", str(REPO), "deb", f"DEB_VERSION={UPGRADE_VERSION}",
                       f"DIST={dist}"], timeout=900)
    assert proc.returncode == 0, f"make deb failed:\n{proc.stdout}\n{proc.stderr}"
    return dist / f"nvdocker2_{UPGRADE_VERSION}_all.deb"


@pytest.mark.parametrize("generated", [False, True], ids=["conffile", "postinst-written"])
@pytest.mark.parametrize("suite", [n for n in trees.SUITES if n != "bookworm"])
def test_our_deb_takes_over_from_nvidias_packages_and_serves_gpu_containers(
        suite, deb, deb_upgrade, tmp_path, generated):
    tree = trees.open_tree(suite)  # a suite not selected is deselected (conftest.py)
    try:
        take_over(tree, deb, deb_upgrade, tmp_path, generated)
        gpu_container_on_what_nvidia_left(tree)
    finally:
        tree.close()


def gpu_container_on_what_nvidia_left(tree: trees.Tree) -> None:
    build_fake_driver(tree.path(DRIVER))
    tree.ok(f"nvdocker2 cdi generate --driver-root {DRIVER} --output /etc/cdi/nvidia.yaml")
    daemon_json = tree.path("/etc/docker/daemon.json")
    daemon_json.parent.mkdir(parents=True, exist_ok=True)
    daemon_json.write_bytes(NVIDIA_WROTE)
    dockerd = trees.start_dockerd(tree)
    out = json.loads(tree.ok("nvdocker2 install --json"))
    assert (out["changed"], out["verified"]) == (True, True), out
    assert json.loads(daemon_json.read_bytes())["runtimes"] == {"nvidia": {"path": RUNTIME}}
    probe = "echo gpu-nodes: $(find /dev -maxdepth 1 -type c -name 'nvidia[0-9]*' | sort)"
    proc = dockerd.docker("run", "--rm", "--network=none", "--runtime=nvidia", "-e",
                          "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1", dockerd.image,
                          "sh", "-c", probe)
    assert proc.stdout == "gpu-nodes: /dev/nvidia1\n", proc.stderr
    out = json.loads(tree.ok("nvdocker2 uninstall --json"))
    assert (out["changed"], out["verified"]) == (True, True), out
    assert daemon_json.read_bytes() == NVIDIA_WROTE
