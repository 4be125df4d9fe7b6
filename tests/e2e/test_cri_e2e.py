"""The kubelet's path through the tests' own CRI client (tests/e2e/cri.py): a private containerd
configured by `install --engine containerd` runs a pod sandbox with runtime handler nvidia and
a container in it asking for a GPU by NVIDIA_VISIBLE_DEVICES; the runtime (direct mode, the
TEST FIXTURE fake driver) gives it exactly that GPU's device nodes. `--cdi` is refused by
containerd 1.6 and turns CDI on where the release has it, as the CRI's Status reports.

NVIDIA's k8s-device-plugin's four --device-list-strategy answers, as the kubelet passes them
into the CRI: `envvar` and `volume-mounts` (served by the runtime), `cdi-annotations` (through
handler nvidia, the annotations let through by `install --cdi`) and `cdi-cri` (CDIDevices,
injected by containerd itself); the CDI spec is `nvdocker2 cdi generate`'s for the fake driver,
in a spec directory of the test's that containerd's `cdi_spec_dirs` and the runtime's
`spec-dirs` name. Each pod's container sees exactly the GPU asked for.

Releases: this machine's containerd (Debian 12: 1.6) and, from the cached trees of
tests/platforms, trixie's 1.7 and sid's 2.1 ($NVD2_CONTAINERD_BINS replaces the list).
"""

from __future__ import annotations

import json
import os
import shutil
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
# The runtime's config.toml on the node: direct mode on the fake driver, no libnvidia-container.
DIRECT = ('[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{driver}"\n'
          '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
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
    runtime = str(root / "bin" / "nvidia-container-runtime")
    spec_dir = root / "cdi"  # the node's CDI spec directory: containerd's and the runtime's
    p = subprocess.run(NVDOCKER2 + ["cdi", "generate", "--driver-root", str(driver.root),
                                    "--runtime-path", runtime,
                                    "--output", str(spec_dir / "nvidia.yaml")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    toml = root / "config.toml"
    toml.write_text(DIRECT.format(driver=driver.root))
    # The CRI's pods run under cgroupfs here: no systemd to ask for a slice.
    config = CONFIG.replace("SystemdCgroup = true", "SystemdCgroup = false")
    if service.release(shutil.which(exe) or exe) >= (1, 7):  # 1.6 has no such key
        config = config.replace("    disable_tcp_service = true\n", "    disable_tcp_service"
                                f' = true\n    cdi_spec_dirs = ["{spec_dir}"]\n')
    c = PrivateContainerd(exe, config,
                          unit_env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    try:
        c.start()
        c.import_for_cri()
        c.runtime = runtime
        c.toolkit, c.driver, c.spec_dir = toml, driver, spec_dir
        yield c
    finally:
        c.cleanup()


def nvdocker2(c: PrivateContainerd, state: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = NVDOCKER2 + [*args, "--engine", "containerd", "--config", str(c.config),
                       "--containerd-address", c.address, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=c.env(NVDOCKER2_STATE_DIR=str(state)))


def run_pod(c: PrivateContainerd, out: Path, name: str, env: dict,
            annotations: dict | None = None, *, probe: str = PROBE, mounts: tuple = (),
            cdi_devices: tuple = (), handler: str = "nvidia") -> str:
    """A pod with `handler` ("": the default runtime) running `probe`; what it wrote to
    /out/devices."""
    cri = Cri(c.address)
    sandbox = Cri.sandbox_config(name, f"uid-{name}")
    pod = cri.run_pod_sandbox(sandbox, handler)
    try:
        cid = cri.create_container(pod, sandbox, "probe", IMAGE, ["/bin/sh", "-c", probe],
                                   env=env, annotations=annotations, cdi_devices=cdi_devices,
                                   mounts=[("/out", str(out)), *mounts])
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
    assert cfg["cdiSpecDirs"] == [str(c.spec_dir)]  # the node's own: kept
    assert cfg["containerd"]["runtimes"]["nvidia"]["ContainerAnnotations"] == ["cdi.k8s.io/*"]
    changed = {c_["key"].rsplit(".", 1)[-1] for c_ in json.loads(p.stdout)["changes"]
               if c_["action"] != "unchanged"}
    assert ("enable_cdi" in changed) is (release < (2, 0))  # on by default in 2.x
    assert "cdi_spec_dirs" not in changed
    p = nvdocker2(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before
    assert not (c.dir / "conf.d").exists()


# NVIDIA's k8s-device-plugin (internal/plugin/server.go, getAllocateResponse) answers the
# kubelet's Allocate for one GPU, by its UUID, with one of these per --device-list-strategy;
# the kubelet puts the answer into the container's CRI ContainerConfig as it is here.
DEVICE_ROOT = "/var/run/nvidia-container-devices"  # deviceListAsVolumeMountsContainerPathRoot
PLUGIN_ANNOTATION = "cdi.k8s.io/nvidia-device-plugin_7b4c1d2e-0f3a-4b5c-8d6e-9f0a1b2c3d4e"
GPUS = ('for f in /dev/nvidia*; do [ -c "$f" ] && echo "$f"; done > /out/devices;'
        ' echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES" >> /out/devices')
TOOLKIT = ('[nvidia-container-runtime]\nmode = "auto"\ndebug = "{log}"\n'
           '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n'
           '[nvidia-container-cli]\nroot = "{driver}"\n'
           'path = "/nonexistent/nvidia-container-cli"\n')
VOLUME_MOUNTS = ("accept-nvidia-visible-devices-as-volume-mounts = true\n"
                 "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")


@pytest.fixture
def node_toolkit(node, tmp_path):
    """The node's config.toml as the GPU Operator's toolkit writes it (mode auto, the node's
    CDI spec directory), `strategy_toolkit(extra)` with top-level keys added; the runtime's
    debug log is `node.runtime_log`. The direct-mode file goes back afterwards."""
    before = node.toolkit.read_bytes()
    node.runtime_log = tmp_path / "runtime.log"

    def write(extra: str = "") -> None:
        node.toolkit.write_text(extra + TOOLKIT.format(log=node.runtime_log,
                                                       spec_dir=node.spec_dir,
                                                       driver=node.driver.root))

    write()
    node.strategy_toolkit = write
    yield node
    node.toolkit.write_bytes(before)


def _installed(c: PrivateContainerd, tmp_path: Path):
    """install --engine containerd (with --cdi where the release has CDI); uninstall gives
    back the bytes before."""
    before = c.config.read_bytes()
    state = tmp_path / "state"
    cdi = ["--cdi"] if service.release(c.exe) >= (1, 7) else []
    p = nvdocker2(c, state, "install", *cdi, "--runtime-path", c.runtime)
    assert p.returncode == 0, p.stderr
    yield c
    p = nvdocker2(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before


@pytest.fixture
def installed(node_toolkit, tmp_path):
    yield from _installed(node_toolkit, tmp_path)


@pytest.fixture
def installed_cdi(node_toolkit, tmp_path):
    """`installed`, on a release with CDI; on 1.6 `install --cdi` must refuse with its reason,
    change nothing, and the test is skipped with that reason."""
    c = node_toolkit
    release = service.release(c.exe)
    if release >= (1, 7):
        yield from _installed(c, tmp_path)
        return
    before = c.config.read_bytes()
    p = nvdocker2(c, tmp_path / "state", "install", "--cdi", "--runtime-path", c.runtime)
    reason = f"containerd {release[0]}.{release[1]} has no CDI (it came in containerd 1.7)"
    assert p.returncode == 2 and reason in p.stderr, p.stderr
    assert c.config.read_bytes() == before
    pytest.skip(f"CDI strategy on containerd {release[0]}.{release[1]}: install --cdi says "
                f"{reason!r}")


def gpus(c: PrivateContainerd, out: Path, name: str, env: dict, **pod) -> list[str]:
    """The /dev/nvidia* nodes a pod's container sees, then its NVIDIA_VISIBLE_DEVICES line."""
    return run_pod(c, out, name, env, probe=GPUS, **pod).splitlines()


def gpu1(env: str) -> list[str]:
    """What `gpus` reads in a container given GPU 1 of the fake driver: its node and the
    driver's control nodes, not /dev/nvidia0."""
    return ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1",
            "/dev/nvidiactl", f"NVIDIA_VISIBLE_DEVICES={env}"]


def runtime_log(c: PrivateContainerd) -> str:
    return c.runtime_log.read_text() if c.runtime_log.exists() else ""


def test_envvar_strategy_a_uuid_in_the_env_gets_exactly_that_gpu(installed, tmp_path):
    c = installed
    uuid = c.driver.gpus[1].uuid
    assert gpus(c, tmp_path, "envvar", {"NVIDIA_VISIBLE_DEVICES": uuid}) == gpu1(uuid)
    assert "mode: auto resolves to direct" in runtime_log(c)


def test_volume_mounts_strategy_gets_the_mounted_gpu_and_the_env_var_is_refused(installed,
                                                                                  tmp_path):
    c = installed
    c.strategy_toolkit(VOLUME_MOUNTS)
    uuid = c.driver.gpus[1].uuid
    mounts = ((f"{DEVICE_ROOT}/{uuid}", "/dev/null"),)
    assert gpus(c, tmp_path, "mounts", {"NVIDIA_VISIBLE_DEVICES": DEVICE_ROOT},
                mounts=mounts) == gpu1(DEVICE_ROOT)
    # What the device plugin's volume mounts replace: the env var of an unprivileged pod.
    assert gpus(c, tmp_path, "env-refused", {"NVIDIA_VISIBLE_DEVICES": uuid}) == [
        f"NVIDIA_VISIBLE_DEVICES={uuid}"]


def test_cdi_annotations_strategy_reaches_the_runtime_through_handler_nvidia(installed_cdi,
                                                                             tmp_path):
    c = installed_cdi
    uuid = c.driver.gpus[1].uuid
    annotations = {PLUGIN_ANNOTATION: f"nvidia.com/gpu={uuid}"}
    # The spec's own edits set NVIDIA_VISIBLE_DEVICES=void: nothing else serves it again.
    assert gpus(c, tmp_path, "annotations", {}, annotations=annotations) == gpu1("void")
    # containerd passed the annotation on (container_annotations) and the runtime served it;
    # containerd with CDI on injected the same device too, and the edits are the same.
    assert (f"cdi: nvidia.com/gpu={uuid} (annotation {PLUGIN_ANNOTATION!r})"
            in runtime_log(c)), runtime_log(c)


def test_cdi_cri_strategy_is_injected_by_containerd_from_the_nodes_spec(installed_cdi, tmp_path):
    c = installed_cdi
    uuid = c.driver.gpus[1].uuid
    assert gpus(c, tmp_path, "cdi-cri", {}, cdi_devices=(f"nvidia.com/gpu={uuid}",)) == gpu1(
        "void")
    log = runtime_log(c)  # containerd did it: the runtime (handler nvidia) had nothing to do
    assert "mode: auto resolves to direct" in log and "cdi: " not in log
