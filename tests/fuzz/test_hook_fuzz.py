"""Hostile container images against the hook (reference §4): whatever environment, mounts and
capabilities an image brings, the hook either refuses it, does nothing, or execs exactly
nvidia-container-cli with an argv of our own flags and an environment built from scratch.

The image controls `process.env` and `mounts` of config.json; hypothesis generates them, with
the variables the hook reads most of the time and values made of the pieces an attacker would
try (leading dashes, `=`, commas, shell syntax, control characters, non-ASCII). Every example
runs the hook's real `main` on a real bundle; only `os.execve` is replaced, by a recorder that
stops the process image from being replaced.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nvdocker2 import hook, toolkit_config
from nvdocker2.hook import cli_argv
from nvdocker2.hook.request import RequestError, container_request
from nvdocker2.toolkit_config import ALL_CAPABILITIES, ToolkitConfig

# The flags the hook may give nvidia-container-cli (docs/reference.md §4 rule 6), before the rootfs.
OUR_FLAGS = {
    "--root", "--load-kmods", "--debug", "--user", "--ldconfig", "--no-cgroups", "--device",
    "--mig-config", "--mig-monitor", "--require", "--pid",
    *(f"--{c}" for c in ALL_CAPABILITIES),
}
DEVICE_VALUE = re.compile(r"^(all|(\d+|\d+:\d+|(GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]*)"
                          r"(,(\d+|\d+:\d+|(GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]*))*)$")
SHELLS = {"sh", "bash", "dash", "busybox", "env"}

NAMES = st.sampled_from([
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_REQUIRE_DRIVER", "NVIDIA_REQUIRE_ARCH", "NVIDIA_DISABLE_REQUIRE", "CUDA_VERSION",
    "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", "DOCKER_RESOURCE_GPU",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "HOME", "NVIDIA_CONTAINER_RUNTIME_CONFIG",
]) | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_-=", min_size=0, max_size=12)
PIECES = st.sampled_from([
    "all", "none", "void", "0", "1", "0:1", "GPU-0a1b", "MIG-ff-3", "-", "--", "-1", "--root=/",
    "--config=/tmp/x", ",", " ", "=", ";", "$(id)", "`id`", "|sh", "\n", "\t", "\x00", "\x1b",
    "compute", "utility", "video", "graphics", "display", "compat32", "ngx", "cuda>=11.0",
    "11.8", "12.2.0", "true", "1", "é", "\u202e", "/dev/nvidia0", "../..",
])
VALUES = st.lists(PIECES | st.text(max_size=6), max_size=6).map("".join)
NOISE = st.lists(st.tuples(NAMES, VALUES).map("=".join) | st.text(max_size=10), max_size=6)
# Values that are mostly right, so that most examples reach the exec, with hostile ids mixed in.
GOOD_IDS = st.sampled_from(["0", "1", "7", "0:1", "GPU-0a1b-22", "MIG-ff-3", "all", "none"])
DEVICE_LISTS = st.lists(GOOD_IDS | GOOD_IDS | PIECES, min_size=1, max_size=4).map(",".join)
CAPS = st.lists(st.sampled_from([*ALL_CAPABILITIES, "all"]) | PIECES, max_size=3).map(",".join)
REQUIRES = st.lists(st.tuples(st.sampled_from(["CUDA", "DRIVER", "ARCH", "_X", "-Y"]),
                              st.sampled_from(["cuda>=11.0", "driver>=470", "arch=x86_64"])
                              | VALUES).map(lambda t: f"NVIDIA_REQUIRE_{t[0]}={t[1]}"),
                    max_size=3)


@st.composite
def environments(draw) -> list[str]:
    """An image's process.env: usually a GPU request, plus requirements and noise."""
    env = draw(NOISE) + draw(REQUIRES)
    if draw(st.integers(0, 9)) < 8:
        env.append("NVIDIA_VISIBLE_DEVICES=" + draw(DEVICE_LISTS))
    if draw(st.booleans()):
        env.append("NVIDIA_DRIVER_CAPABILITIES=" + draw(CAPS))
    if draw(st.integers(0, 4)) == 0:
        env.append("CUDA_VERSION=" + draw(st.sampled_from(["11.8", "12.2.0", "x", "-1"])))
    if draw(st.integers(0, 4)) == 0:
        name = draw(st.sampled_from(["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"]))
        env.append(f"{name}={draw(DEVICE_LISTS)}")
    return draw(st.permutations(env))


ENV = environments()
MOUNTS = st.lists(st.fixed_dictionaries({
    "source": st.sampled_from(["/dev/null", "/tmp", "tmpfs"]),
    "destination": st.sampled_from(["/var/run/nvidia-container-devices/"]).flatmap(
        lambda root: VALUES.map(lambda v: root + v)) | st.text(max_size=20),
    "type": st.just("bind"),
}), max_size=4)
CONFIGS = st.builds(
    ToolkitConfig,
    disable_require=st.booleans(),
    supported_driver_capabilities=st.sampled_from([
        ToolkitConfig().supported_driver_capabilities, ("utility", "compute"), ("utility",)]),
    accept_envvar_unprivileged=st.booleans(),
    accept_volume_mounts=st.booleans(),
    swarm_resource=st.sampled_from(["", "DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_GPU,OTHER"]),
)


class Exec(BaseException):
    """Raised instead of replacing the test process: what the hook would have run."""

    def __init__(self, path: str, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(path)
        self.path, self.argv, self.env = path, list(argv), dict(env)


def _record_execve(path, argv, env):
    raise Exec(path, argv, env)


def _toml_string(s: str) -> str:
    return json.dumps(s)


def check_argv(argv: list[str], cli: str, rootfs: str, pid: int) -> None:
    """What must hold of any nvidia-container-cli command line the hook builds."""
    assert argv[0] == cli and os.path.basename(argv[0]) not in SHELLS
    assert argv[-1] == rootfs and os.path.isabs(rootfs)
    assert argv.count("configure") == 1
    assert f"--pid={pid}" in argv
    for arg in argv[1:-1]:
        assert "\x00" not in arg
        if arg == "configure":
            continue
        flag = arg.split("=", 1)[0]
        assert arg.startswith("--") and flag in OUR_FLAGS, f"not one of our flags: {arg!r}"
        if flag == "--device":
            assert DEVICE_VALUE.match(arg[len("--device="):]), arg
        if flag == "--require":
            assert not any(ord(c) < 32 for c in arg), arg


def check_env(env: dict[str, str], config: ToolkitConfig, image_env: list[str]) -> None:
    """The cli's environment is PATH plus the configured entries; nothing from the image."""
    assert env == cli_argv.cli_environment(config)
    assert env["PATH"] == cli_argv.SYSTEM_PATH
    configured = {e.partition("=")[0] for e in config.cli.environment}
    for entry in image_env:
        name, sep, value = entry.partition("=")
        if sep and name not in configured and name != "PATH":
            assert name not in env, f"{name} leaked from the image into the cli environment"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=ENV, privileged=st.booleans(), mounts=MOUNTS, config=CONFIGS,
       pid=st.integers(min_value=1, max_value=2**22))
def test_decision_and_argv_for_any_environment(env, privileged, mounts, config, pid) -> None:
    """The pure decision plus argv builder: refused, nothing, or only our flags."""
    try:
        request = container_request(env, privileged, mounts, config)
    except RequestError as e:
        assert e.message and "\n" not in e.message
        return
    if request is None:
        return
    cli = "/usr/bin/nvidia-container-cli"
    argv = cli_argv.build_argv(cli, request, config, pid, "/run/bundle/rootfs")
    check_argv(argv, cli, "/run/bundle/rootfs", pid)
    if not privileged:
        assert not any(a.startswith(("--mig-config", "--mig-monitor")) for a in argv)


@pytest.fixture(scope="module")
def bundle_root():
    with tempfile.TemporaryDirectory(prefix="nvd2-hookfuzz-") as d:
        root = Path(d)
        cli = root / "nvidia-container-cli"
        cli.write_text("#!/bin/sh\nexit 0\n")  # never run: execve is recorded instead
        cli.chmod(0o755)
        (root / "bundle" / "rootfs").mkdir(parents=True)
        yield root


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(env=ENV, privileged=st.booleans(), mounts=MOUNTS, pid=st.integers(1, 2**22),
       toml_flags=st.fixed_dictionaries({
           "accept-nvidia-visible-devices-as-volume-mounts": st.booleans(),
           "accept-nvidia-visible-devices-envvar-when-unprivileged": st.booleans(),
       }), cli_env=st.lists(st.sampled_from(["LD_LIBRARY_PATH=/opt/nv/lib", "FOO=bar"]),
                            max_size=2, unique=True))
def test_hook_main_execs_only_the_cli_with_our_flags_and_a_clean_environment(
    bundle_root: Path, env, privileged, mounts, pid, toml_flags, cli_env
) -> None:
    """The real hook entry point on a real bundle, config.toml and stdin state."""
    cli = bundle_root / "nvidia-container-cli"
    config_file = bundle_root / "config.toml"
    lines = [f"{k} = {str(v).lower()}" for k, v in toml_flags.items()]
    lines += ["[nvidia-container-cli]", f"path = {_toml_string(str(cli))}",
              f"environment = [{', '.join(_toml_string(e) for e in cli_env)}]"]
    config_file.write_text("\n".join(lines) + "\n")
    bundle = bundle_root / "bundle"
    caps = ["CAP_CHOWN", "CAP_SYS_ADMIN"] if privileged else ["CAP_CHOWN"]
    spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "mounts": mounts,
            "process": {"env": env, "args": ["sh"], "capabilities": {"bounding": caps}}}
    (bundle / "config.json").write_text(json.dumps(spec))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": pid, "bundle": str(bundle)})

    stdin, stderr = sys.stdin, sys.stderr
    # The hook's own environment (dockerd's, under --gpus) must decide nothing.
    hostile = {"LD_PRELOAD": "/tmp/evil.so", "NVIDIA_VISIBLE_DEVICES": "all",
               "NVIDIA_DRIVER_CAPABILITIES": "all", "HOME": "/root/from-dockerd"}
    saved_env = {k: os.environ.get(k) for k in hostile}
    sys.stdin = io.TextIOWrapper(io.BytesIO(state.encode()))
    sys.stderr = io.StringIO()
    os.environ.update(hostile)
    real_execve = os.execve
    os.execve = _record_execve
    try:
        code = hook.main(["--config", str(config_file), "prestart"])
        ran = None
    except Exec as e:
        ran, code = e, None
    finally:
        os.execve = real_execve
        err = sys.stderr.getvalue()
        sys.stdin, sys.stderr = stdin, stderr
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    # The decision is the image's alone: the same as the pure function on config.json.
    config = toolkit_config.load(str(config_file))
    try:
        expected = container_request(env, privileged, mounts, config)
    except RequestError as e:
        event("refused")
        assert (ran, code) == (None, 1)
        assert err == f"nvidia-container-runtime-hook: error: {e.message}\n"
        return
    if expected is None:
        event("not a GPU container")
        assert (ran, code, err) == (None, 0, "")
        return
    event("exec")
    assert ran is not None, (code, err)
    assert ran.path == str(cli)
    rootfs = str(bundle / "rootfs")
    assert ran.argv == cli_argv.build_argv(str(cli), expected, config, pid, rootfs)
    check_argv(ran.argv, str(cli), rootfs, pid)
    check_env(ran.env, config, env)
    for value in hostile.values():
        assert value not in ran.env.values()
