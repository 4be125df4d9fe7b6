"""GPU containers end to end (reference §3, §4): a private dockerd with runc, the runtime shim and
the hook of this package, and the TEST FIXTURE nvidia-container-cli (tests/fixtures) standing in
for libnvidia-container: it records its argv and environment outside the container and writes
a marker into the container's rootfs through /proc/PID/root, which the container then reads.

One daemon serves the module: started with NVIDIA_CONTAINER_RUNTIME_CONFIG pointing at a test
config.toml, the launchers' directory first on its PATH (so `--gpus` finds the hook), and two
runtimes: `nvidia` (the packaged sh launcher) and `nvidia-console` (the pip console script).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from privatedockerd import PrivateDockerd, missing_prerequisites

from nvdocker2.runtime.launcher import write_launchers

FIXTURE_CLI = Path(__file__).parent.parent / "fixtures" / "nvidia-container-cli"
CONSOLE_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER = "configured by the test fixture nvidia-container-cli for pid "
EVIL_SITECUSTOMIZE = """import os
with open(os.path.join(os.path.dirname(__file__), "imported"), "ab") as f:
    f.write(open("/proc/self/cmdline", "rb").read() + b"\\n")
"""


class GpuSetup:
    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        write_launchers(str(self.bin))
        self.cli = root / "cli" / "nvidia-container-cli"
        self.cli.parent.mkdir()
        shutil.copy(FIXTURE_CLI, self.cli)
        self.record = root / "record"
        self.record.mkdir()
        self.config = root / "config.toml"
        self.config.write_text(
            f'[nvidia-container-cli]\npath = "{self.cli}"\n'
            f'environment = ["FIXTURE_RECORD_DIR={self.record}"]\n')
        self.evil = root / "evil-pythonpath"
        self.evil.mkdir()
        (self.evil / "sitecustomize.py").write_text(EVIL_SITECUSTOMIZE)

    def clear(self):
        for f in self.record.iterdir():
            f.unlink()
        for c in self.root.rglob("nvidia-marker"):
            c.unlink()

    def recorded(self, name):
        f = self.record / name
        return f.read_text() if f.exists() else None

    def argv(self):
        return self.recorded("argv").splitlines()


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    missing = missing_prerequisites()
    if missing:
        message = "private dockerd needs: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    setup = GpuSetup(tmp_path_factory.mktemp("gpu"))
    config = {"runtimes": {
        "nvidia": {"path": str(setup.bin / "nvidia-container-runtime")},
        "nvidia-console": {"path": str(CONSOLE_BIN / "nvidia-container-runtime")},
    }}
    env = dict(os.environ)
    env.update({"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(setup.config),
                "PYTHONPATH": str(setup.evil), "LD_LIBRARY_PATH": "/nonexistent-dockerd-lib",
                "DOCKERD_ONLY_VARIABLE": "1"})
    daemon = PrivateDockerd(config=json.dumps(config).encode(), env=env,
                            path_prepend=[setup.bin])
    try:
        daemon.start()
        setup.daemon = daemon
        yield setup
    finally:
        daemon.cleanup()


@pytest.fixture
def g(gpu):
    gpu.clear()
    ids = gpu.daemon.docker("ps", "-aq").stdout.split()
    if ids:
        gpu.daemon.docker("rm", "-f", *ids)
    return gpu


def run(g, *args, check=True):
    return g.daemon.docker("run", "--rm", "--network=none", *args, check=check, timeout=120)


def assert_configured_the_container(g, proc, middle):
    """The cli ran once, with exactly this argv, the container's pid, a clean env, and its
    marker is what the container printed."""
    assert g.recorded("calls") == "called\n"
    argv = g.argv()
    pid = int(argv[-2].removeprefix("--pid="))
    rootfs = argv[-1]
    assert argv == [str(g.cli), "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig",
                    *middle, f"--pid={pid}", rootfs]
    assert rootfs.startswith(str(g.daemon.data_root) + "/")
    assert proc.stdout == f"{MARKER}{pid}\n"
    facts = dict(line.split("=", 1) for line in g.recorded("proc").splitlines())
    # The pid is the container's init, in its own mount namespace, before pivot_root.
    assert facts["pid_mnt_ns"].startswith("mnt:[") and facts["pid_mnt_ns"] != facts["own_mnt_ns"]
    init = facts["pid_cmdline"].split()
    assert (os.path.basename(init[0]), init[1:2]) == ("runc", ["init"])
    env = dict(line.split("=", 1) for line in g.recorded("env").splitlines())
    env.pop("PWD", None)
    assert env == {"PATH": SYSTEM_PATH, "FIXTURE_RECORD_DIR": str(g.record)}


@pytest.mark.parametrize("runtime", ["nvidia", "nvidia-console"])
def test_runtime_nvidia_configures_the_container_with_its_pid(g, runtime):
    proc = run(g, f"--runtime={runtime}", "-e", "NVIDIA_VISIBLE_DEVICES=0,1",
               "-e", "LD_PRELOAD=/image-lib.so", g.daemon.image, "cat", "/nvidia-marker")
    assert_configured_the_container(g, proc, ["--device=0,1", "--compute", "--utility"])


def test_runtime_nvidia_without_gpu_request_never_calls_the_cli(g):
    proc = run(g, "--runtime=nvidia", g.daemon.image, "sh", "-c", "ls /nvidia-marker || echo no")
    assert proc.stdout.endswith("no\n")
    run(g, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=void", g.daemon.image, "true")
    assert g.recorded("calls") is None


def test_refused_request_fails_docker_run_with_the_hook_message(g):
    proc = run(g, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0,--root=/tmp",
               g.daemon.image, "true", check=False)
    assert proc.returncode != 0
    assert ("nvidia-container-runtime-hook: error: NVIDIA_VISIBLE_DEVICES: invalid device id"
            " '--root=/tmp'") in proc.stderr
    assert g.recorded("calls") is None
    assert g.daemon.docker("ps", "-q").stdout == ""


@pytest.mark.parametrize("gpus,middle", [
    ("all", ["--device=all", "--compute", "--utility"]),
    ('"device=0,1"', ["--device=0,1", "--compute", "--utility"]),
    ("all,capabilities=utility", ["--device=all", "--utility"]),
])
def test_gpus_flag_through_the_hook_dockerd_injects(g, gpus, middle):
    assert g.daemon.info()["DefaultRuntime"] == "runc"
    proc = run(g, "--gpus", gpus, g.daemon.image, "cat", "/nvidia-marker")
    assert_configured_the_container(g, proc, middle)


def test_gpus_and_runtime_nvidia_configure_once(g):
    proc = run(g, "--gpus", "all", "--runtime=nvidia", g.daemon.image, "cat", "/nvidia-marker")
    assert_configured_the_container(g, proc, ["--device=all", "--compute", "--utility"])


def test_dockerd_environment_does_not_reach_the_launchers_or_the_cli(g):
    run(g, "--gpus", "all", g.daemon.image, "true")
    run(g, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all", g.daemon.image, "true")
    imported = g.evil / "imported"
    lines = imported.read_bytes().splitlines() if imported.exists() else []
    # Only the console-script runtime (run by the other tests) honours PYTHONPATH.
    assert not [line for line in lines if str(g.bin).encode() in line]
    assert "DOCKERD_ONLY_VARIABLE" not in g.recorded("env")
    assert "LD_LIBRARY_PATH" not in g.recorded("env")


def test_runtime_create_failure_is_shown_by_docker_run(g):
    good = g.config.read_bytes()
    g.config.write_text("[nvidia-container-runtime]\nruntimes = [\n")
    try:
        proc = run(g, "--runtime=nvidia", g.daemon.image, "true", check=False)
    finally:
        g.config.write_bytes(good)
    assert proc.returncode != 0
    assert f"nvidia-container-runtime: {g.config}: invalid TOML" in proc.stderr
    assert g.daemon.docker("ps", "-q").stdout == ""
