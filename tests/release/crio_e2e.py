"""The release check against a real CRI-O (`make crio-e2e CRIO=PATH [PINNS=PATH]`): a private
CRI-O (tests/release/privatecrio.py) configured by `nvdocker2 install --engine crio`, its
reloads by SIGHUP and by the unit's restart (the `systemctl` stand-in), what the running CRI-O
then reports (`crio status config`), and pods through the tests' own CRI client
(tests/e2e/cri.py) with handler nvidia, whose containers get exactly the GPU asked for of the
TEST FIXTURE fake driver: by NVIDIA_VISIBLE_DEVICES (an index, a UUID), by the device plugin's
volume mounts, by its CDI annotation and by the CRI's CDIDevices (CRI-O has CDI on).

Not collected by the suite's own runs (its name does not match test_*.py, and no conftest.py
lives here): CRI-O is in no archive this project is tested from, so it is built from its source
by whoever runs this check. Every missing prerequisite fails it: the check was asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "e2e"))

import grpc  # noqa: E402  (python3-grpcio: the CRI client's)
from cri import Cri, decode, message  # noqa: E402
from fixtures.fake_driver import build_fake_driver  # noqa: E402
from privatecrio import PrivateCrio, host_paths, missing_prerequisites  # noqa: E402
import test_cri_e2e as cri_e2e  # noqa: E402
from test_cri_e2e import DIRECT, run_pod  # noqa: E402
from test_cri_e2e import node_toolkit  # noqa: E402,F401  (a fixture, over this file's node)

from nvdocker2.engines.tomlread import tomllib  # noqa: E402
from nvdocker2.runtime import launcher  # noqa: E402

NVDOCKER2 = [sys.executable, "-m", "nvdocker2"]
CRIO = os.environ.get("NVD2_CRIO", "")
PINNS = os.environ.get("NVD2_PINNS") or os.path.join(os.path.dirname(CRIO), "pinns")
NO_GPU = "nvidia0 absent\nnvidia1 absent\nnvidiactl absent\nnvidia-uvm absent\n"
GPU1 = "nvidia0 absent\nnvidia1 present\nnvidiactl present\nnvidia-uvm present\n"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    missing = missing_prerequisites(CRIO, PINNS)
    if missing:
        pytest.fail("the CRI-O release check needs: " + ", ".join(missing), pytrace=False)
    before = host_paths()
    root = tmp_path_factory.mktemp("crio")
    driver = build_fake_driver(root / "driver")
    toml = root / "config.toml"
    toml.write_text(DIRECT.format(driver=driver.root))
    # CRI-O gives the runtime only its monitor_env and PATH: the runtime's launchers read the
    # node's config.toml from the path written into them, as a toolkit directory's do.
    (root / "bin").mkdir()
    for name, text in launcher.render(sys.executable, launcher.package_paths(),
                                      str(toml)).items():
        (root / "bin" / name).write_text(text)
        (root / "bin" / name).chmod(0o755)
    runtime = str(root / "bin" / "nvidia-container-runtime")
    c = PrivateCrio(CRIO, PINNS)
    try:
        p = subprocess.run(NVDOCKER2 + ["cdi", "generate", "--driver-root", str(driver.root),
                                        "--runtime-path", runtime,
                                        "--output", str(c.dir / "cdi" / "nvidia.yaml")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        c.load_images()
        c.start()
        c.runtime, c.toolkit, c.driver, c.spec_dir = runtime, toml, driver, c.dir / "cdi"
        yield c
    finally:
        c.cleanup()
    assert host_paths() == before, "the private CRI-O touched the machine's own paths"


# systemd is the init system where /run/systemd/system exists (sd_booted(3)): so it is, for
# nvdocker2 alone, in a mount namespace of its own with a /run of its own.
AS_IF_SYSTEMD = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 'mount -t tmpfs nvd2-run /run && mkdir -p /run/systemd/system && exec "$@"', "sh"]


@pytest.fixture(autouse=True)
def _left_clean(node):
    """A test that failed halfway leaves no drop-in (and no runtime) to the next one."""
    yield
    if dropins(node):
        for f in node.dropins.iterdir():
            f.unlink()
        node.start()


def nvdocker2(c: PrivateCrio, state: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = NVDOCKER2 + [*args, "--engine", "crio", "--config", str(c.dropins / "99-nvidia.conf"),
                       "--containerd-address", c.address, "--json"]
    if "systemd" in args:
        cmd = AS_IF_SYSTEMD + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=c.env(NVDOCKER2_STATE_DIR=str(state)))


def dropins(c: PrivateCrio) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(c.dropins.iterdir())}


def runtimes(c: PrivateCrio) -> tuple[dict, str]:
    """The runtime tables and default_runtime the running CRI-O reports."""
    rt = tomllib.loads(c.running_config())["crio"]["runtime"]
    return rt["runtimes"], rt["default_runtime"]


def handlers(c: PrivateCrio) -> list[str]:
    """The runtime handlers CRI-O's CRI Status names (StatusResponse.runtime_handlers, what
    the kubelet reads), the default one's name empty."""
    cri = Cri(c.address)
    try:
        resp = cri.call("Status", message((1, True)))
    finally:
        cri.close()
    return [decode(h).get(1, [b""])[-1].decode() for h in resp.get(3, [])]


def refused(c: PrivateCrio, name: str, handler: str) -> str:
    """What CRI-O answers a RunPodSandbox with `handler` it refuses ("" if it runs it)."""
    cri = Cri(c.address)
    try:
        sandbox = Cri.sandbox_config(name, f"uid-{name}")
        try:
            pod = cri.run_pod_sandbox(sandbox, handler)
        except grpc.RpcError as e:
            return e.details()
        cri.stop_and_remove(pod)
        return ""
    finally:
        cri.close()


@pytest.mark.parametrize("reload", ["auto", "systemd"])
def test_install_restarts_crio_and_a_pod_with_handler_nvidia_gets_exactly_its_gpu(node, tmp_path,
                                                                                 reload):
    c = node
    state = tmp_path / "state"
    before, pid = dropins(c), c.pid()
    p = nvdocker2(c, state, "install", "--runtime-path", c.runtime, "--reload", reload)
    assert p.returncode == 0, p.stderr + c.log_tail()
    out = json.loads(p.stdout)
    assert out["verified"] is True and c.pid() != pid  # the unit restarted: a new crio
    if reload == "auto":
        assert any(m.endswith("(cri-o/cri-o#10202): restarting") for m in out["notes"]), out
    rts, default = runtimes(c)
    assert rts["nvidia"]["runtime_path"] == c.runtime and default == "runc"
    assert "nvidia" in handlers(c)
    doctor = {d["id"]: d["status"] for d in json.loads(nvdocker2(c, state, "doctor").stdout)[
        "checks"] if d["id"].startswith("crio-")}
    assert doctor == {"crio-dropin": "ok", "crio-running": "ok"}
    pods = tmp_path / "out"
    pods.mkdir()
    assert run_pod(c, pods, f"gpu1-{reload}", {"NVIDIA_VISIBLE_DEVICES": "1"}) == GPU1
    assert run_pod(c, pods, f"nogpu-{reload}", {}) == NO_GPU
    p = nvdocker2(c, state, "uninstall", "--reload", reload)
    assert p.returncode == 0, p.stderr + c.log_tail()
    assert json.loads(p.stdout)["verified"] is True
    assert dropins(c) == before
    assert "nvidia" not in runtimes(c)[0] and "nvidia" not in handlers(c)
    assert "failed to find runtime handler nvidia" in refused(c, f"gone-{reload}", "nvidia")


def test_sighup_shows_the_runtime_in_crio_status_but_crio_still_refuses_it_to_pods(node,
                                                                                    tmp_path):
    """CRI-O's own bug (cri-o/cri-o#10202), the reason `auto` restarts: after the SIGHUP both
    `crio status config` and the CRI's Status name the runtime, and RunPodSandbox refuses it.
    When this fails, a CRI-O release has fixed it, and auto may signal that release again."""
    c = node
    state = tmp_path / "state"
    before, pid = dropins(c), c.pid()
    p = nvdocker2(c, state, "install", "--runtime-path", c.runtime, "--reload", "signal")
    assert p.returncode == 0, p.stderr + c.log_tail()
    out = json.loads(p.stdout)
    assert out["verified"] is True and c.pid() == pid  # SIGHUP: the same crio
    assert any("restart CRI-O for its pods to run with the change" in m
               for m in out["notes"]), out
    assert runtimes(c)[0]["nvidia"]["runtime_path"] == c.runtime and "nvidia" in handlers(c)
    assert "failed to find runtime handler nvidia" in refused(c, "after-sighup", "nvidia")
    p = nvdocker2(c, state, "uninstall", "--reload", "signal")
    assert p.returncode == 0, p.stderr + c.log_tail()
    assert dropins(c) == before and "nvidia" not in runtimes(c)[0]


def test_set_default_runs_pods_without_a_handler_through_nvidia_until_uninstall(node, tmp_path):
    c = node
    state = tmp_path / "state"
    before = dropins(c)
    p = nvdocker2(c, state, "install", "--runtime-path", c.runtime, "--set-default")
    assert p.returncode == 0, p.stderr + c.log_tail()
    assert runtimes(c)[1] == "nvidia"
    pods = tmp_path / "out"
    pods.mkdir()
    gpu = {"NVIDIA_VISIBLE_DEVICES": "1"}
    assert run_pod(c, pods, "default-nvidia", gpu, handler="") == GPU1
    p = nvdocker2(c, state, "uninstall")
    assert p.returncode == 0, p.stderr + c.log_tail()
    assert dropins(c) == before and runtimes(c)[1] == "runc"
    assert run_pod(c, pods, "default-runc", gpu, handler="") == NO_GPU


@pytest.mark.parametrize("default", [False, True])
def test_a_runtime_crio_cannot_run_is_rolled_back_and_crio_runs_as_before(node, tmp_path,
                                                                          default):
    """CRI-O leaves out a runtime whose runtime_path it cannot run (and does not start when
    that runtime is its default): the change does not verify, the drop-in goes back."""
    c = node
    before = dropins(c)
    missing = str(tmp_path / "nvidia-container-runtime")
    p = nvdocker2(c, tmp_path / "state", "install", "--runtime-path", missing,
                  "--allow-missing-runtime", *(["--set-default"] if default else []),
                  "--timeout", "10")
    assert p.returncode == 4, p.stderr
    if default:  # the restart failed: crio exited; the rollback's restart brought it back
        assert "systemctl restart crio failed" in p.stderr
    else:
        assert 'CRI-O reports: runtime "nvidia" is missing' in p.stderr
        assert 'Runtime handler \\"nvidia\\" is being ignored' in c.log.read_text()
    assert "the previous file was restored" in p.stderr
    assert dropins(c) == before and c.pid()
    rts, default_runtime = runtimes(c)
    assert list(rts) == ["runc"] and default_runtime == "runc"


@pytest.fixture
def installed(node_toolkit, tmp_path):  # noqa: F811  (the fixture imported above)
    """install --engine crio (a restart); uninstall gives back the drop-in directory's bytes."""
    c = node_toolkit
    before = dropins(c)
    p = nvdocker2(c, tmp_path / "state", "install", "--runtime-path", c.runtime)
    assert p.returncode == 0, p.stderr
    yield c
    p = nvdocker2(c, tmp_path / "state", "uninstall")
    assert p.returncode == 0, p.stderr
    assert dropins(c) == before


@pytest.fixture
def installed_cdi(installed):
    """CRI-O has CDI on (its cdi_spec_dirs: the node's spec directory): no --cdi to install."""
    return installed


# The device plugin's strategies as tests/e2e/test_cri_e2e.py asserts them on containerd, run
# here on this file's fixtures: the same containers, the same runtime log. CRI-O injects an
# annotated device itself and passes the annotation on in the OCI spec, as containerd does.
test_envvar_strategy_a_uuid_in_the_env_gets_exactly_that_gpu = \
    cri_e2e.test_envvar_strategy_a_uuid_in_the_env_gets_exactly_that_gpu
test_volume_mounts_strategy_gets_the_mounted_gpu_and_the_env_var_is_refused = \
    cri_e2e.test_volume_mounts_strategy_gets_the_mounted_gpu_and_the_env_var_is_refused
test_cdi_annotations_strategy_reaches_the_runtime_through_handler_nvidia = \
    cri_e2e.test_cdi_annotations_strategy_reaches_the_runtime_through_handler_nvidia
test_cdi_cri_strategy_is_injected_by_crio_from_the_nodes_spec = \
    cri_e2e.test_cdi_cri_strategy_is_injected_by_containerd_from_the_nodes_spec
