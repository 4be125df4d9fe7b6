"""MIG devices and IMEX channels in direct mode, end to end: a private dockerd with runc and this
package's runtime in `mode = "direct"`, pointed at the TEST FIXTURE fake driver tree grown with
a MIG tree and IMEX channel nodes (tests/fixtures/fake_driver.py, nodes made with mknod) and
the stand-in libnvidia-ml it compiles with gcc (the hardware boundary, reporting NVIDIA's MIG
indices and UUIDs). What a container sees is read inside it: every NVIDIA node under /dev with
its major:minor, and whether the device cgroup lets it open one (ENXIO: allowed, the fake node
has no driver behind it; EPERM: refused)."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import (
    CAPS_MAJOR,
    add_imex,
    add_mig,
    build_fake_driver,
    build_fake_nvml,
    default_migs,
    mig_minor,
)
from privatedockerd import PrivateDockerd

from nvdocker2.runtime.launcher import write_launchers

MIG_A, MIG_B, MIG_C = (m.uuid for m in default_migs())
LIST = ("find /dev \\( -name 'nvidia*' -o -path '*/nvidia-*/*' \\) -type c | sort"
        " | while read n; do"
        " echo \"$n $(stat -c '%t:%T' $n)\"; done")


def caps(gi, ci=None):
    minor = mig_minor(0, gi, ci)
    return f"/dev/nvidia-caps/nvidia-cap{minor} {CAPS_MAJOR:x}:{minor:x}"


CONTROL = ["/dev/nvidia-modeset c3:fe", "/dev/nvidia-uvm 1fd:0", "/dev/nvidia-uvm-tools 1fd:1",
           "/dev/nvidiactl c3:ff"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, e2e_prerequisites):
    root = tmp_path_factory.mktemp("direct-mig")
    fake = build_fake_driver(root / "driver")
    add_mig(fake, default_migs())
    add_imex(fake, [0, 2])
    build_fake_nvml(fake, root)
    bindir = root / "bin"
    bindir.mkdir()
    write_launchers(str(bindir))
    config = root / "config.toml"
    config.write_text(
        f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{fake.root}"\n'
        '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(config))
    runtimes = {"runtimes": {"nvidia": {"path": str(bindir / "nvidia-container-runtime")}}}
    d = PrivateDockerd(config=json.dumps(runtimes).encode(), env=env)
    try:
        d.start()
        yield d
    finally:
        d.cleanup()


def run(daemon, env, script="true", *flags, check=True):
    args = [a for e in env for a in ("-e", e)]
    return daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", *flags, *args,
                         daemon.image, "sh", "-c", script, check=check, timeout=120)


def nodes(daemon, env, *flags):
    """Every NVIDIA character device inside the container with its major:minor, sorted."""
    return sorted(run(daemon, env, LIST, *flags).stdout.splitlines())


@pytest.mark.parametrize("ident", ["0:1", MIG_C])
def test_a_mig_device_gets_exactly_its_parent_and_instance_nodes(daemon, ident):
    assert nodes(daemon, [f"NVIDIA_VISIBLE_DEVICES={ident}"]) == sorted(
        [caps(2), caps(2, 1), "/dev/nvidia0 c3:0", *CONTROL])


def test_the_cgroup_lets_the_container_open_its_caps_nodes_and_no_other(daemon):
    mine = f"/dev/nvidia-caps/nvidia-cap{mig_minor(0, 1, 0)}"
    script = (f"head -c1 {mine} 2>&1; mknod /tmp/other c {CAPS_MAJOR} {mig_minor(0, 2, 0)};"
              " head -c1 /tmp/other 2>&1; true")
    out = run(daemon, [f"NVIDIA_VISIBLE_DEVICES={MIG_A}"], script).stdout
    first, second = out.splitlines()
    assert "No such device or address" in first  # allowed: no driver behind the fake node
    assert "Operation not permitted" in second


def test_mig_config_caps_only_for_a_container_that_asks_and_is_privileged(daemon):
    listed = nodes(daemon, ["NVIDIA_VISIBLE_DEVICES=0:0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
                   "--cap-add=SYS_ADMIN")
    assert listed == sorted([f"/dev/nvidia-caps/nvidia-cap1 {CAPS_MAJOR:x}:1", caps(2),
                             caps(2, 0), "/dev/nvidia0 c3:0", "/dev/nvidia1 c3:1", *CONTROL])
    proc = run(daemon, ["NVIDIA_VISIBLE_DEVICES=0:0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
               check=False)
    assert proc.returncode != 0
    assert "NVIDIA_MIG_CONFIG_DEVICES is only allowed in privileged containers" in proc.stderr


def test_imex_channels_exactly_those_asked(daemon):
    assert nodes(daemon, ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_IMEX_CHANNELS=2"]) == sorted(
        ["/dev/nvidia-caps-imex-channels/channel2 1fb:2", "/dev/nvidia1 c3:1", *CONTROL])


def test_all_gives_every_gpu_and_mig_device_but_no_config_monitor_or_imex(daemon):
    assert nodes(daemon, ["NVIDIA_VISIBLE_DEVICES=all"]) == sorted(
        [caps(1), caps(1, 0), caps(2), caps(2, 0), caps(2, 1), "/dev/nvidia0 c3:0",
         "/dev/nvidia1 c3:1", *CONTROL])


@pytest.mark.parametrize("env, message", [
    (["NVIDIA_VISIBLE_DEVICES=0:5"], "NVIDIA_VISIBLE_DEVICES: unknown MIG device '0:5'"),
    (["NVIDIA_VISIBLE_DEVICES=MIG-../../etc"], "NVIDIA_VISIBLE_DEVICES: invalid device id"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"],
     "NVIDIA_IMEX_CHANNELS: no IMEX channel 1"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=--root=/"],
     "NVIDIA_IMEX_CHANNELS: invalid IMEX channel"),
])
def test_a_hostile_or_missing_id_is_refused_before_the_container_starts(daemon, env, message):
    proc = run(daemon, env, "echo started", check=False)
    assert proc.returncode != 0 and "started" not in proc.stdout
    assert message in proc.stderr
    assert daemon.docker("ps", "-aq").stdout == ""


