"""The tests' CRI client held against crictl, the kubelet's own CRI client
(`make cri-crosscheck CRICTL=PATH`).

tests/e2e/cri.py encodes the CRI messages by hand from the CRI API's field numbers, so that
the test command needs nothing outside Debian and PyPI. This check runs the same requests
through crictl (kubernetes-sigs/cri-tools, built from its source by whoever runs this check)
against the same private containerds (tests/e2e/test_cri_e2e.py's `node`: this machine's 1.6,
Debian 13's 1.7 and sid's 2.1) that `install --engine containerd` configured, and asserts that
both clients see the same thing:

- the runtime handlers the CRI plugin reports (`crictl info` against the client's Status);
- a pod with handler nvidia, NVIDIA_VISIBLE_DEVICES=<UUID> (the device plugin's envvar
  strategy): the container's /dev/nvidia* through crictl equals what the client's pod saw;
- where the release has CDI, the CRI's CDIDevices (the cdi-cri strategy) the same way.

Not collected by the suite's own runs (its name does not match test_*.py): crictl is in no
archive this project is tested from. Every missing prerequisite fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "e2e"))

from cri import Cri  # noqa: E402
from privatecontainerd import IMAGE, PrivateContainerd  # noqa: E402
import test_cri_e2e  # noqa: E402
from test_cri_e2e import GPUS, gpu1, gpus  # noqa: E402

from nvdocker2.engines.containerd import service  # noqa: E402

CRICTL = os.environ.get("NVD2_CRICTL", "")
# test_cri_e2e's fixtures: its private containerds, configured by install --engine containerd
node, node_toolkit, installed = (test_cri_e2e.node, test_cri_e2e.node_toolkit,
                                 test_cri_e2e.installed)


def crictl(c: PrivateContainerd, *args: str) -> str:
    if not (CRICTL and os.access(CRICTL, os.X_OK)):
        pytest.fail(f"the crictl cross-check needs NVD2_CRICTL, a crictl to run (got "
                    f"{CRICTL or 'nothing'!r})", pytrace=False)
    p = subprocess.run([CRICTL, "--runtime-endpoint", f"unix://{c.address}", "--timeout", "60s",
                        *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout.strip()


def crictl_pod(c: PrivateContainerd, out: Path, name: str, env: dict,
               cdi_devices: tuple = ()) -> list[str]:
    """What `gpus` reads, for a pod that crictl runs (runp, create, start, inspect)."""
    work = out / f"crictl-{name}"
    work.mkdir()
    pod = {"metadata": {"name": name, "uid": f"uid-crictl-{name}", "namespace": "default",
                        "attempt": 0},
           "log_directory": str(work),
           "linux": {"security_context": {"namespace_options": {
               "network": 2, "pid": 2, "ipc": 2}}}}
    ctr = {"metadata": {"name": "probe"}, "image": {"image": IMAGE},
           "command": ["/bin/sh", "-c", GPUS],
           "envs": [{"key": k, "value": v} for k, v in env.items()],
           "mounts": [{"container_path": "/out", "host_path": str(work)}],
           "log_path": "probe.log", "linux": {}}
    if cdi_devices:
        ctr["CDI_devices"] = [{"name": d} for d in cdi_devices]
    (work / "pod.json").write_text(json.dumps(pod))
    (work / "ctr.json").write_text(json.dumps(ctr))
    pid = crictl(c, "runp", "--runtime", "nvidia", str(work / "pod.json"))
    try:
        cid = crictl(c, "create", pid, str(work / "ctr.json"), str(work / "pod.json"))
        crictl(c, "start", cid)
        deadline = time.monotonic() + 60
        while True:
            st = json.loads(crictl(c, "inspect", "-o", "json", cid))["status"]
            if st["state"] == "CONTAINER_EXITED" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert st["state"] == "CONTAINER_EXITED" and st["exitCode"] == 0, st
        return (work / "devices").read_text().splitlines()
    finally:
        crictl(c, "stopp", pid)
        crictl(c, "rmp", pid)


def test_both_clients_see_the_same_runtime_handlers(installed):
    c = installed
    info = json.loads(crictl(c, "info", "-o", "json"))
    theirs = info["config"]["containerd"]["runtimes"]
    ours = Cri(c.address).status()["containerd"]["runtimes"]
    assert "nvidia" in theirs and sorted(theirs) == sorted(ours)
    assert theirs["nvidia"]["options"] == ours["nvidia"]["options"]


def test_both_clients_give_a_pod_the_same_gpu_by_uuid(installed, tmp_path):
    c = installed
    uuid = c.driver.gpus[1].uuid
    env = {"NVIDIA_VISIBLE_DEVICES": uuid}
    assert crictl_pod(c, tmp_path, "envvar", env) == gpus(c, tmp_path, "envvar", env) \
        == gpu1(uuid)


def test_both_clients_get_the_same_cdi_device_from_containerd(installed, tmp_path):
    c = installed
    if service.release(c.exe) < (1, 7):
        pytest.skip("containerd 1.6 has no CDI")
    uuid = c.driver.gpus[1].uuid
    devices = (f"nvidia.com/gpu={uuid}",)
    assert crictl_pod(c, tmp_path, "cdi", {}, devices) == gpus(
        c, tmp_path, "cdi", {}, cdi_devices=devices) == gpu1("void")
