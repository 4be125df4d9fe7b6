"""The kubelet's path through the tests' own CRI client (tests/e2e/cri.py): a private containerd
configured by `install --engine containerd` runs a pod sandbox with runtime handler nvidia and
a container in it asking for a GPU by NVIDIA_VISIBLE_DEVICES; the runtime (direct mode, the
TEST FIXTURE fake driver) gives it exactly that GPU's device nodes. `--cdi` is refused by
containerd 1.6 and turns CDI on where the release has it, as the CRI's Status reports.

Releases: this machine's containerd (Debian 12: 1.6) and, from the cached trees of
tests/platforms, trixie's 1.7 and sid's 2.1 ($NVD2_CONTAINERD_BINS replaces the list).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
if os.environ.get("CI") != "true":  # under CI a missing grpcio fails the import below
    pytest.importorskip("grpc", reason="python3-grpcio (scripts/setup.sh tests)")

from cri import Cri  # noqa: E402
from fixtures.fake_driver import build_fake_driver  # noqa: E402
from privatecontainerd import (  # noqa: E402
    BINS,
    CONFIG,
    IMAGE,
    PrivateContainerd,
    missing_prerequisites,
    tree_binaries,
)

from nvdocker2.engines.containerd import service  # noqa: E402
from nvdocker2.runtime.launcher import write_launchers  # noqa: E402

NVDOCKER2 = [sys.executable, "-m", "nvdocker2"]
PROBE = ("for n in nvidia0 nvidia1 nvidiactl nvidia-uvm; do"
         " if [ -c /dev/$n ]; then echo \"$n present\"; else echo \"$n absent\"; fi; done"
         " > /out/devices")


@pytest.fixture(params=BINS, scope="module")
def node(request, tmp_path_factory):
    exe = request.param
    missing = missing_prerequisites("containerd" if exe in ("trixie", "sid") else exe)
    if missing:
        msg = "private containerd needs: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    if exe in ("trixie", "sid"):
        exe = tree_binaries(exe)
    root = tmp_path_factory.mktemp("cri")
    driver = build_fake_driver(root / "driver")
    (root / "bin").mkdir()
    write_launchers(str(root / "bin"))
    toml = root / "config.toml"
    toml.write_text(f'[nvidia-container-runtime]\nmode = "direct"\n'
                    f'driver-root = "{driver.root}"\n'
                    '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    # The CRI's pods run under cgroupfs here: no systemd to ask for a slice.
    c = PrivateContainerd(exe, CONFIG.replace("SystemdCgroup = true", "SystemdCgroup = false"),
                          unit_env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    try:
        c.start()
        c.import_for_cri()
        c.runtime = str(root / "bin" / "nvidia-container-runtime")
        yield c
    finally:
        c.cleanup()


def nvdocker2(c: PrivateContainerd, state: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = NVDOCKER2 + [*args, "--engine", "containerd", "--config", str(c.config),
                       "--containerd-address", c.address, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=c.env(NVDOCKER2_STATE_DIR=str(state)))


def run_pod(c: PrivateContainerd, out: Path, name: str, env: dict,
            annotations: dict | None = None) -> str:
    """A pod with handler nvidia running PROBE; what it wrote to /out/devices."""
    cri = Cri(c.address)
    sandbox = Cri.sandbox_config(name, f"uid-{name}")
    pod = cri.run_pod_sandbox(sandbox, "nvidia")
    try:
        cid = cri.create_container(pod, sandbox, "probe", IMAGE, ["/bin/sh", "-c", PROBE],
                                   env=env, annotations=annotations,
                                   mounts=[("/out", str(out))])
        cri.start_container(cid)
        deadline = time.monotonic() + 60
        st = cri.container_status(cid)
        while st.state != "EXITED" and time.monotonic() < deadline:
            time.sleep(0.2)
            st = cri.container_status(cid)
        assert st.state == "EXITED" and st.exit_code == 0, st
        return (out / "devices").read_text()
    finally:
        cri.stop_and_remove(pod)
        cri.close()


def test_a_pod_with_handler_nvidia_gets_exactly_the_gpu_its_env_asks_for(node, tmp_path):
    c = node
    state = tmp_path / "state"
    before = c.config.read_bytes()
    p = nvdocker2(c, state, "install", "--runtime-path", c.runtime)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True
    cfg = Cri(c.address).status()
    assert cfg["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == c.runtime
    out = tmp_path / "out"
    out.mkdir()
    assert run_pod(c, out, "gpu1", {"NVIDIA_VISIBLE_DEVICES": "1"}) == (
        "nvidia0 absent\nnvidia1 present\nnvidiactl present\nnvidia-uvm present\n")
    assert run_pod(c, out, "nogpu", {}) == (
        "nvidia0 absent\nnvidia1 absent\nnvidiactl absent\nnvidia-uvm absent\n")
    p = nvdocker2(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before
    assert "nvidia" not in Cri(c.address).status()["containerd"]["runtimes"]


def test_cdi_is_turned_on_where_the_release_needs_it_and_refused_on_1_6(node, tmp_path):
    c = node
    state = tmp_path / "state"
    before = c.config.read_bytes()
    release = service.release(c.exe)
    p = nvdocker2(c, state, "install", "--cdi", "--runtime-path", c.runtime)
    if release < (1, 7):
        assert p.returncode == 2
        assert f"containerd {release[0]}.{release[1]} has no CDI" in p.stderr
        assert c.config.read_bytes() == before
        return
    assert p.returncode == 0, p.stderr
    cfg = Cri(c.address).status()  # what the restarted CRI plugin runs
    assert cfg["enableCDI"] is True
    assert cfg["cdiSpecDirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert cfg["containerd"]["runtimes"]["nvidia"]["ContainerAnnotations"] == ["cdi.k8s.io/*"]
    changed = {c_["key"].rsplit(".", 1)[-1] for c_ in json.loads(p.stdout)["changes"]
               if c_["action"] != "unchanged"}
    assert ("enable_cdi" in changed) is (release < (2, 0))  # on by default in 2.x
    p = nvdocker2(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before
    assert not (c.dir / "conf.d").exists()
