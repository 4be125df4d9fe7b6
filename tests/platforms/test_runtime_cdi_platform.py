"""The runtime's CDI mode on Docker 26.1 (Debian 13) and 28.5 (Debian sid), which have
`docker run --annotation` (Docker 20.10 has not; Debian 12's dockerd is tested with the
environment alone, tests/e2e/test_runtime_cdi_e2e.py).

Each suite gets a tree (trees.py) with the .deb installed, the TEST FIXTURE fake driver tree
of 2 GPUs at /opt/nvd2-driver, the spec the tree's `nvdocker2 cdi generate` writes from it into
/etc/cdi, NVIDIA's own default config.toml (`nvidia-ctk config default` at main,
tests/data/nvidia-config/main.toml) byte for byte as /etc/nvidia-container-runtime/config.toml
(`mode = "auto"`, which resolves to cdi for a request of CDI names), and the tree's dockerd
with the nvidia runtime in daemon.json. A CDI name in NVIDIA_VISIBLE_DEVICES and one in a
`cdi.k8s.io/` annotation each give exactly the GPU asked for; an unknown name is refused
before the container starts, in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trees
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver

DRIVER = "/opt/nvd2-driver"
CONFIG = "/etc/nvidia-container-runtime/config.toml"
NVIDIA_DEFAULT = Path(__file__).resolve().parent.parent / "data/nvidia-config/main.toml"
PROBE = ("echo gpu-nodes: $(find /dev -maxdepth 1 -type c -name 'nvidia[0-9]*' | sort);"
         " [ -c /dev/nvidiactl ] && echo nvidiactl || echo no-nvidiactl;"
         f" [ -e {LIB64_DIR}/libcuda.so.{DRIVER_VERSION} ] && echo libcuda || echo no-libcuda;"
         ' echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-unset}"')
# How a container asks for a CDI name: docker run's flags for it, and where the runtime's
# refusal says the name came from.
ASK = {
    "env": (lambda name: ["-e", f"NVIDIA_VISIBLE_DEVICES={name}"], "NVIDIA_VISIBLE_DEVICES"),
    "annotation": (lambda name: ["--annotation", f"cdi.k8s.io/x={name}"],
                   "annotation 'cdi.k8s.io/x'"),
}




@pytest.fixture(scope="module", params=[n for n, s in trees.SUITES.items()
                                        if int(s.docker.split(".")[0]) >= 24])
def suite(request) -> str:
    """The suites whose Docker has `docker run --annotation` (24.0 on)."""
    return request.param


@pytest.fixture(scope="module")
def dockerd(suite, deb):
    tree = trees.open_tree(suite)  # a suite not selected is deselected (conftest.py)
    try:
        tree.install_deb(deb, env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
        build_fake_driver(tree.path(DRIVER))
        tree.path(CONFIG).write_bytes(NVIDIA_DEFAULT.read_bytes())
        tree.ok(f"nvdocker2 cdi generate --driver-root {DRIVER} --output /etc/cdi/nvidia.yaml")
        tree.path("/etc/docker").mkdir(parents=True, exist_ok=True)
        tree.path("/etc/docker/daemon.json").write_text(json.dumps(
            {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}))
        daemon = trees.start_dockerd(tree)
        assert daemon.major >= 24, daemon.version
        yield daemon
    finally:
        tree.close()


def run(dockerd, ask: str, name: str, *command: str):
    flags, _source = ASK[ask]
    return dockerd.docker("run", "--rm", "--network=none", "--runtime=nvidia", *flags(name),
                          dockerd.image, *command, check=False)


@pytest.mark.parametrize("ask", ASK)
def test_a_cdi_name_gives_exactly_its_gpu(dockerd, ask):
    proc = run(dockerd, ask, "nvidia.com/gpu=1", "sh", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "gpu-nodes: /dev/nvidia1", "nvidiactl", "libcuda", "NVIDIA_VISIBLE_DEVICES=void"]


@pytest.mark.parametrize("ask", ASK)
def test_an_unknown_cdi_name_is_refused_before_the_container_starts(dockerd, ask):
    proc = run(dockerd, ask, "nvidia.com/gpu=9", "echo", "ran")
    _flags, source = ASK[ask]
    # 125: docker run's own code for an error of the daemon (the OCI runtime's create failed)
    assert (proc.returncode, proc.stdout) == (125, ""), proc.stderr
    said = [line for line in proc.stderr.splitlines() if "nvidia.com/gpu=9" in line]
    # Docker 26 ends the runtime's line with containerd's ": unknown.", Docker 28 does not.
    assert len(said) == 1 and (
        f": OCI runtime create failed: nvidia-container-runtime: unresolvable CDI device"
        f" 'nvidia.com/gpu=9' ({source}): no CDI spec in /etc/cdi, /var/run/cdi defines it"
    ) in said[0], proc.stderr
    assert dockerd.docker("ps", "-aq").stdout == ""
