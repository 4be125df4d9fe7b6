"""CSV mode end to end: a private dockerd with runc and this package's runtime (the packaged sh
launcher) in `mode = "csv"`, its driver root the TEST FIXTURE fake Jetson of
tests/fixtures/fake_driver.py (`build_fake_tegra`: mknod'd nvhost/nvmap/dri nodes, tiny ELF
libraries behind symlink chains, a folder, NVIDIA's CSV files in their real format). Inside
the container: exactly the nodes, files, links and folders the CSV files name.
"""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import TEGRA_LIB_DIR, build_fake_tegra
from privatedockerd import PrivateDockerd

from nvdocker2.runtime.launcher import write_launchers

L = TEGRA_LIB_DIR


@pytest.fixture(scope="module")
def csvd(tmp_path_factory, e2e_prerequisites):
    root = tmp_path_factory.mktemp("csv")
    tegra = build_fake_tegra(root / "tegra")
    bindir = root / "bin"
    bindir.mkdir()
    write_launchers(str(bindir))
    config = root / "config.toml"
    config.write_text(
        f'[nvidia-container-runtime]\nmode = "csv"\n'
        f'[nvidia-container-runtime.modes.csv]\nmount-spec-path = "{tegra.spec_dir}"\n'
        f'[nvidia-container-cli]\nroot = "{tegra.root}"\n'
        'path = "/nonexistent/nvidia-container-cli"\n')
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(config))
    daemon = PrivateDockerd(config=json.dumps({"runtimes": {"nvidia": {
        "path": str(bindir / "nvidia-container-runtime")}}}).encode(), env=env)
    try:
        daemon.start()
        yield daemon, tegra
    finally:
        daemon.cleanup()


def sh(daemon, env, script):
    flags = [a for e in env for a in ("-e", e)]
    return daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", *flags,
                         daemon.image, "sh", "-c", script, timeout=120).stdout


PROBE = (
    "for n in $(find /dev -type c | sort); do echo \"node $n $(stat -c '%t:%T' $n)\"; done;"
    f" for f in {L}/nvidia/libcuda.so.1.1 {L}/nvidia/libnvrm_gpu.so {L}/nvidia/libnvextra.so"
    f" {L}/tegra-egl/libEGL_nvidia.so.0 /usr/share/vulkan/icd.d/nvidia_icd.json"
    " /etc/nv_tegra_release; do [ -f $f ] && echo \"file $f\"; done;"
    f" for l in {L}/nvidia/libcuda.so.1 {L}/nvidia/libcuda.so {L}/libcuda.so"
    "  /etc/vulkan/icd.d/nvidia_icd.json /dev/dri/by-path/platform-gpu-card; do"
    "  [ -L $l ] && echo \"link $l -> $(readlink $l)\"; done;"
    f" echo x 2>/dev/null > {L}/nvidia/libcuda.so.1.1 && echo writable || echo read-only;"
    f" head -c 4 {L}/libcuda.so | od -An -c | tr -d ' '"
)

STANDARD = [  # what /dev holds in every container (docker's own nodes)
    "node /dev/full 1:7", "node /dev/null 1:3", "node /dev/pts/ptmx 5:2", "node /dev/random 1:8",
    "node /dev/tty 5:0",
    "node /dev/urandom 1:9", "node /dev/zero 1:5"]


def test_the_csv_set_is_exactly_what_the_container_gets(csvd):
    daemon, _tegra = csvd
    out = sh(daemon, ["NVIDIA_VISIBLE_DEVICES=all"], PROBE).splitlines()
    nodes = sorted([*STANDARD, "node /dev/dri/card0 e2:0", "node /dev/dri/renderD128 e2:80",
                    "node /dev/nvhost-ctrl 1e9:0", "node /dev/nvhost-ctrl-gpu 1e9:1",
                    "node /dev/nvmap a:78"])
    assert out == [
        *nodes,
        f"file {L}/nvidia/libcuda.so.1.1", f"file {L}/nvidia/libnvrm_gpu.so",
        f"file {L}/tegra-egl/libEGL_nvidia.so.0", "file /usr/share/vulkan/icd.d/nvidia_icd.json",
        "file /etc/nv_tegra_release",
        f"link {L}/nvidia/libcuda.so.1 -> {L}/nvidia/libcuda.so.1.1",
        f"link {L}/nvidia/libcuda.so -> {L}/nvidia/libcuda.so.1",
        f"link {L}/libcuda.so -> {L}/nvidia/libcuda.so",
        # the image has no /etc/vulkan: the hook makes the folder, as NVIDIA's does
        "link /etc/vulkan/icd.d/nvidia_icd.json -> /usr/share/vulkan/icd.d/nvidia_icd.json",
        "link /dev/dri/by-path/platform-gpu-card -> ../card0",
        "read-only",
        "177ELF",
    ]


def test_no_request_gets_nothing_and_an_unknown_id_is_refused(csvd):
    daemon, _tegra = csvd
    out = sh(daemon, [], PROBE).splitlines()
    assert [line for line in out if line.split(" ")[0] in ("node", "file", "link")] == STANDARD
    proc = daemon.docker("run", "--rm", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1",
                         daemon.image, "true", check=False, timeout=120)
    assert proc.returncode != 0
    assert "csv mode serves the board's one GPU, '1' is not it" in proc.stderr
