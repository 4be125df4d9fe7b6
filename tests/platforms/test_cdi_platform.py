"""CDI mode end to end on real Docker 28.5 (Debian sid) and 26.1 (Debian 13) (docs/reference.md §9).

Each suite gets a tree of the platform matrix (trees.py) with the .deb installed, the TEST
FIXTURE fake driver tree of 2 GPUs at /opt/nvd2-driver inside it (real character nodes
195:N, tiny ELF libraries, a fake nvidia-smi) and its own dockerd. nvdocker2 runs inside the
tree, as an operator runs it there, with a config.toml whose driver-root is the fake tree.
The `--restart` case drives the tree's dockerd through the TEST FIXTURE `systemctl` stand-in
(tests/fixtures/systemctl) copied into the tree.
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import trees
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver

DRIVER = "/opt/nvd2-driver"
CONFIG = "/opt/nvd2/config.toml"
GPU = "nvidia.com/gpu"
NVML = f"{LIB64_DIR}/libnvidia-ml.so.{DRIVER_VERSION}"
CUDA = f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}"
STAND_IN = Path(__file__).resolve().parent.parent / "fixtures/systemctl"
PROBE = (
    "for n in nvidia0 nvidia1 nvidiactl; do"
    " if [ -c /dev/$n ]; then echo \"$n $(stat -c '%t:%T' /dev/$n)\"; else echo \"$n absent\"; fi;"
    " done;"
    f" for f in {NVML} {CUDA} /usr/bin/nvidia-smi; do"
    "  if [ -e $f ]; then echo \"$f present\"; else echo \"$f absent\"; fi; done;"
    f" echo x 2>/dev/null > {NVML} && echo nvml-writable || echo nvml-read-only;"
    " nvidia-smi | head -1"
)


@dataclass
class Host:
    tree: trees.Tree
    dockerd: trees.TreeDockerd
    driver: object

    def nvdocker2(self, *args: str, env: dict | None = None):
        cmd = " ".join(shlex.quote(a) for a in ("nvdocker2", *args))
        return self.tree.sh(cmd, env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": CONFIG, **(env or {})},
                            timeout=300)

    def ok_json(self, *args: str, env: dict | None = None) -> dict:
        proc = self.nvdocker2(*args, "--json", env=env)
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stderr}"
        return json.loads(proc.stdout)

    def run_gpu(self, device: str, script: str, image: str | None = None, check: bool = True):
        return self.dockerd.docker("run", "--rm", "--network=none", "--device", device,
                                   image or self.dockerd.image, "sh", "-c", script, check=check)

    @property
    def spec(self) -> Path:
        return self.tree.path("/etc/cdi/nvidia.yaml")

    def discovered(self) -> set:
        return {d.get("ID") for d in self.dockerd.info().get("DiscoveredDevices") or []}


def _host(suite: str, deb: Path, daemon_json: bytes | None):
    """A module's host: the suite's tree with the .deb, the fake driver, `daemon_json` (None:
    no file) and a started dockerd; closed after the module."""
    tree = trees.open_tree(suite)  # a suite not selected is deselected (conftest.py)
    try:
        tree.install_deb(deb, env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
        driver = build_fake_driver(tree.path(DRIVER))
        tree.path("/opt/nvd2").mkdir(parents=True, exist_ok=True)
        tree.path(CONFIG).write_text(f'[nvidia-container-runtime]\ndriver-root = "{DRIVER}"\n')
        if daemon_json is not None:
            tree.path("/etc/docker").mkdir(parents=True, exist_ok=True)
            tree.path("/etc/docker/daemon.json").write_bytes(daemon_json)
        dockerd = trees.start_dockerd(tree)
    except BaseException:
        tree.close()
        raise
    try:
        yield Host(tree, dockerd, driver)
    finally:
        tree.close()


# --- Docker 28.5 (sid): CDI on by default ----------------------------------------------------


@pytest.fixture(scope="module")
def sid(deb):
    yield from _host("sid", deb, None)


def test_sid_install_leaves_daemon_json_alone_and_dockerd_lists_the_gpus(sid):
    assert sid.dockerd.version.startswith("28.5")
    out = sid.ok_json("install", "--mode", "cdi")
    assert out["changed"] is True and out["verified"] is True
    assert out["restart_needed"] is False
    assert not sid.tree.path("/etc/docker/daemon.json").exists()
    uuids = [g.uuid for g in sid.driver.gpus]
    assert out["devices"] == [f"{GPU}=0", f"{GPU}={uuids[0]}", f"{GPU}=1", f"{GPU}={uuids[1]}",
                              f"{GPU}=all"]
    assert {f"{GPU}=0", f"{GPU}=1", f"{GPU}=all"} <= sid.discovered()
    assert "/etc/cdi" in sid.dockerd.info()["CDISpecDirs"]


def test_sid_device_1_gets_only_nvidia1_and_read_only_utility_files(sid):
    out = sid.run_gpu(f"{GPU}=1", PROBE).stdout.splitlines()
    assert out == [
        "nvidia0 absent",
        "nvidia1 c3:1",
        "nvidiactl c3:ff",
        f"{NVML} present",
        f"{CUDA} present",
        "/usr/bin/nvidia-smi present",
        "nvml-read-only",
        f"GPU 0: {sid.driver.gpus[0].model} (UUID: {sid.driver.gpus[0].uuid})",
    ]


def test_sid_a_second_install_is_unchanged(sid):
    spec = sid.spec.read_bytes()
    out = sid.ok_json("install", "--mode", "cdi")
    assert out["changed"] is False and out["restart_needed"] is False
    assert sid.spec.read_bytes() == spec


def test_sid_a_hostile_image_cannot_lead_the_cdi_hook_onto_the_host(sid, tmp_path):
    host_dir = sid.tree.path("/srv/host-dir")
    host_dir.mkdir(parents=True)
    up = "../" * 12
    sid.dockerd.docker("run", "--name", "mkevil", "--network=none", sid.dockerd.image, "sh",
                       "-c", f"mkdir -p /usr/lib && ln -s {up}srv/host-dir {LIB64_DIR}")
    sid.dockerd.docker("commit", "mkevil", "nvd2-evil:latest")
    try:
        proc = sid.run_gpu(f"{GPU}=0", "true", image="nvd2-evil:latest", check=False)
        assert proc.returncode != 0
        assert (f"error: {LIB64_DIR} in the container image is a symlink to '{up}srv/host-dir',"
                " which leads outside the container's root; refusing it") in proc.stderr
        assert list(host_dir.iterdir()) == []
    finally:
        sid.dockerd.docker("rm", "-f", "mkevil", check=False)
        sid.dockerd.docker("rmi", "nvd2-evil:latest", check=False)


def test_sid_a_removed_gpu_is_a_doctor_warning_until_cdi_refresh(sid):
    gone = sid.driver.gpus[1]
    gpu_dir = sid.tree.path(f"{DRIVER}/proc/driver/nvidia/gpus/{gone.bus_id}")
    shutil.rmtree(gpu_dir)
    checks = {c["id"]: c for c in json.loads(sid.nvdocker2("doctor", "--json").stdout)["checks"]}
    assert checks["cdi.spec"]["status"] == "warn"
    assert f"lists {GPU}=1, {GPU}={gone.uuid} no longer present" in checks["cdi.spec"]["detail"]
    out = sid.ok_json("cdi", "refresh")
    assert out["changed"] is True
    assert out["devices"] == [f"{GPU}=0", f"{GPU}={sid.driver.gpus[0].uuid}", f"{GPU}=all"]
    sid.dockerd.wait_info(lambda i: f"{GPU}=1" not in {
        d.get("ID") for d in i.get("DiscoveredDevices") or []})
    assert sid.ok_json("cdi", "refresh")["changed"] is False
    checks = {c["id"]: c for c in json.loads(sid.nvdocker2("doctor", "--json").stdout)["checks"]}
    assert checks["cdi.spec"]["status"] == "ok"
    assert checks["cdi.dockerd"]["status"] == "ok"


def test_sid_uninstall_removes_the_spec_and_leaves_daemon_json_as_it_was(sid):
    out = sid.ok_json("uninstall", "--mode", "cdi")
    assert out["changed"] is True and out["restart_needed"] is False
    assert not sid.spec.exists()
    assert not sid.tree.path("/etc/docker/daemon.json").exists()
    assert not {f"{GPU}=0", f"{GPU}=all"} & sid.discovered()


def test_sid_daemon_json_is_byte_identical_after_install_and_uninstall(sid):
    before = b'{\n\t"debug": false,\n\t"features": {"buildkit": true}\n}'
    sid.tree.path("/etc/docker").mkdir(parents=True, exist_ok=True)
    sid.tree.path("/etc/docker/daemon.json").write_bytes(before)
    assert sid.ok_json("install", "--mode", "cdi")["changed"] is True
    assert sid.tree.path("/etc/docker/daemon.json").read_bytes() == before
    assert sid.ok_json("uninstall", "--mode", "cdi")["changed"] is True
    assert sid.tree.path("/etc/docker/daemon.json").read_bytes() == before
    assert not sid.spec.exists()


# --- Docker 26.1 (Debian 13): CDI behind features.cdi ----------------------------------------

BUILDKIT = b'{\n    "features": {"buildkit": true}\n}\n'


@pytest.fixture(scope="module")
def trixie(deb):
    yield from _host("trixie", deb, BUILDKIT)


def test_trixie_install_merges_cdi_beside_buildkit_and_says_a_restart_is_needed(trixie):
    assert trixie.dockerd.version.startswith("26.1")
    proc = trixie.nvdocker2("install", "--mode", "cdi")
    assert proc.returncode == 0, proc.stderr
    assert "restart needed: yes" in proc.stdout
    assert "sudo systemctl restart docker" in proc.stdout
    assert trixie.tree.path("/etc/docker/daemon.json").read_bytes() == (
        b'{\n    "features": {"buildkit": true, "cdi": true}\n}\n')
    assert trixie.ok_json("install", "--mode", "cdi")["restart_needed"] is True
    # Not yet: the running dockerd has no CDI until it restarts.
    assert not trixie.dockerd.info().get("CDISpecDirs")
    assert trixie.run_gpu(f"{GPU}=0", "true", check=False).returncode != 0


def test_trixie_after_the_restart_device_0_works(trixie):
    trixie.dockerd.restart()
    assert "/etc/cdi" in trixie.dockerd.info()["CDISpecDirs"]
    out = trixie.run_gpu(f"{GPU}=0", PROBE).stdout.splitlines()
    assert out[:3] == ["nvidia0 c3:0", "nvidia1 absent", "nvidiactl c3:ff"]
    assert "nvml-read-only" in out


def test_trixie_uninstall_restores_features_byte_for_byte(trixie):
    out = trixie.ok_json("uninstall", "--mode", "cdi")
    assert out["restart_needed"] is True
    assert trixie.tree.path("/etc/docker/daemon.json").read_bytes() == BUILDKIT
    assert not trixie.spec.exists()
    trixie.dockerd.restart()
    assert not trixie.dockerd.info().get("CDISpecDirs")


def test_trixie_restart_through_systemctl_does_it_in_one_step_and_verifies(trixie):
    bindir = trixie.tree.path("/usr/local/sbin")
    for name in ("systemctl", "journalctl"):
        shutil.copy(STAND_IN, bindir / name)
        (bindir / name).chmod(0o755)
    (trixie.tree.run_dir / "dockerd.json").write_text(json.dumps({
        "argv": trixie.dockerd.argv(), "env": dict(trees.TREE_ENV),
        "log": "/run/dockerd-standin.log"}))
    # The installed package passes no NVD2_* variable to systemctl: the stand-in reads its
    # root from the file beside it.
    (bindir / "nvd2-dockerd-root").write_text("/run\n")
    env: dict[str, str] = {}
    out = trixie.ok_json("install", "--mode", "cdi", "--restart", env=env)
    assert out["changed"] is True and out["verified"] is True
    assert out["restart_needed"] is False
    assert out["reload"] == "systemd restart"
    assert "/etc/cdi" in trixie.dockerd.info()["CDISpecDirs"]
    assert trixie.run_gpu(f"{GPU}=0", "[ -c /dev/nvidia0 ] && echo yes").stdout == "yes\n"
    again = trixie.ok_json("install", "--mode", "cdi", "--restart", env=env)
    assert again["changed"] is False and again["restart_needed"] is False
