"""The hook as runc runs it (reference §4): state on stdin, a bundle in tmp_path, and the TEST
FIXTURE nvidia-container-cli (tests/fixtures) recording its argv and environment and writing a
marker into the rootfs through /proc/PID/root. The "container" pid is this test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_gpu_request_execs_the_cli_with_exact_argv_and_clean_env(hook):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0,1", "LD_PRELOAD=/evil.so", "PATH=/evil",
                     "NVIDIA_DRIVER_CAPABILITIES=utility"])
    env = {"PATH": f"/evil:{os.environ['PATH']}", "LD_LIBRARY_PATH": "/evil",
           "PYTHONPATH": "/evil", "HOOK_ENV_LEAK": "1"}
    proc = hook.run(env=env)
    assert proc.returncode == 0, proc.stderr
    rootfs = hook.bundle / "rootfs"
    assert hook.recorded("argv").splitlines() == [
        str(hook.cli), "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig",
        "--device=0,1", "--utility", f"--pid={os.getpid()}", str(rootfs)]
    recorded_env = dict(line.split("=", 1) for line in hook.recorded("env").splitlines())
    recorded_env.pop("PWD", None)  # the shell of the fixture adds it
    assert recorded_env == {"PATH": SYSTEM_PATH, "FIXTURE_RECORD_DIR": str(hook.record)}
    assert (rootfs / "nvidia-marker").read_text().startswith(
        "configured by the test fixture nvidia-container-cli")


def test_not_a_gpu_container_never_calls_the_cli(hook):
    for env in ([], ["NVIDIA_VISIBLE_DEVICES="], ["NVIDIA_VISIBLE_DEVICES=void"]):
        hook.write_spec(env)
        proc = hook.run()
        assert (proc.returncode, proc.stderr) == (0, "")
    assert hook.recorded("calls") is None


def test_refused_request_is_one_line_and_exit_1(hook):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0,-1"])
    proc = hook.run()
    assert proc.returncode == 1
    assert proc.stderr == (
        "nvidia-container-runtime-hook: error: NVIDIA_VISIBLE_DEVICES: invalid device id '-1'"
        " (expected all, none, a GPU index like 0, a MIG index like 0:1, or a GPU-/MIG- UUID)\n")
    assert hook.recorded("calls") is None


@pytest.mark.parametrize("stage", ["poststart", "poststop"])
def test_other_stages_do_nothing(hook, stage):
    proc = hook.run(stage, stdin="not json at all")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize("args,message", [
    ([], "missing the hook stage"),
    (["prestart", "extra"], "unexpected argument 'extra'"),
    (["--bogus", "prestart"], "unexpected argument '--bogus'"),
])
def test_usage_errors_exit_2(hook, args, message):
    argv = [sys.executable, "-m", "nvdocker2.hook", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, input="")
    assert proc.returncode == 2
    assert message in proc.stderr and "usage: nvidia-container-runtime-hook" in proc.stderr


@pytest.mark.parametrize("stdin,message", [
    ("", "container state on stdin is not valid JSON"),
    ("{", "container state on stdin is not valid JSON"),
    ("[1]", "container state on stdin is not a JSON object"),
    ('{"pid": 1}', "container state on stdin has no 'bundle'"),
    ('{"pid": 1, "bundle": "rel/bundle"}', "bundle 'rel/bundle' is not an absolute path"),
    ('{"bundle": "/b"}', "'pid' must be a positive integer, got None"),
    ('{"bundle": "/b", "pid": true}', "'pid' must be a positive integer, got True"),
    ('{"bundle": "/b", "pid": -5}', "'pid' must be a positive integer, got -5"),
    ('{"bundle": "/b", "pid": "12"}', "'pid' must be a positive integer, got '12'"),
    pytest.param("[" * 200000, "container state on stdin is not valid JSON", id="deep"),
    pytest.param(" " * (4 * 1024 * 1024 + 10),
                 "container state on stdin is larger than 4194304 bytes", id="huge"),
])
def test_malformed_or_huge_state_refused(hook, stdin, message):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    proc = hook.run(stdin=stdin)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert hook.recorded("calls") is None


def test_old_bundle_path_name_accepted(hook):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=all"])
    state = json.loads(hook.state())
    state["bundlePath"] = state.pop("bundle")
    proc = hook.run(stdin=json.dumps(state))
    assert proc.returncode == 0, proc.stderr
    assert hook.recorded("argv").splitlines()[-1] == str(hook.bundle / "rootfs")


@pytest.mark.parametrize("spec,message", [
    ('{"process": {}, "root": {"path": "r"}}', "missing 'ociVersion'; not an OCI runtime spec"),
    ('{"ociVersion": "1", "process": {}, "root": {}}', "'root.path' must be a non-empty string"),
    ('{"ociVersion": "1", "process": {"env": 5}, "root": {"path": "r"}}',
     "'process.env' must be a list of strings"),
    ("{", "is not valid JSON"),
])
def test_malformed_spec_refused(hook, spec, message):
    (hook.bundle / "config.json").write_text(spec)
    proc = hook.run()
    assert proc.returncode == 1
    assert message in proc.stderr
    assert hook.recorded("calls") is None


def test_huge_spec_refused(hook):
    (hook.bundle / "config.json").write_bytes(b" " * (16 * 1024 * 1024 + 1))
    proc = hook.run()
    assert proc.returncode == 1
    assert "config.json is larger than 16777216 bytes; refusing it" in proc.stderr


def test_relative_and_absolute_rootfs(hook):
    other = hook.root / "elsewhere"
    other.mkdir()
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"], root_path="../elsewhere")
    assert hook.run().returncode == 0
    assert hook.recorded("argv").splitlines()[-1] == str(other)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"], root_path=str(hook.bundle / "rootfs"))
    assert hook.run().returncode == 0
    assert hook.recorded("argv").splitlines()[-1] == str(hook.bundle / "rootfs")


def test_config_from_environment_variable(hook):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    proc = hook.run(config=False, env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(hook.config)})
    assert proc.returncode == 0, proc.stderr
    assert hook.recorded("calls") == "called\n"


def test_cli_is_never_taken_from_the_hooks_own_path(hook, tmp_path):
    if any(os.path.exists(os.path.join(d, "nvidia-container-cli")) for d in SYSTEM_PATH.split(":")):
        pytest.skip("this host has a real nvidia-container-cli on the system PATH")
    hook.config.write_text("# no cli path\n")
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    proc = hook.run(env={"PATH": f"{hook.cli.parent}:/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stderr == (
        f"nvidia-container-runtime-hook: error: nvidia-container-cli not found in {SYSTEM_PATH};"
        f" install libnvidia-container-tools or set [nvidia-container-cli] path in"
        f" {hook.config}\n")
    assert hook.recorded("calls") is None


def test_broken_config_is_one_line(hook):
    hook.config.write_text("[nvidia-container-cli]\nload-kmods = 'yes'\n")
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    proc = hook.run()
    assert proc.returncode == 1
    assert proc.stderr == (
        f"nvidia-container-runtime-hook: error: {hook.config}: key"
        " 'nvidia-container-cli.load-kmods' must be true or false, got str 'yes'\n")
