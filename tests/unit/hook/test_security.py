"""The prestart hook against values an image controls (its env in config.json): nothing it
writes can become an option or an operand of nvidia-container-cli, and oversized requests end
in one error line. A real hook process, the TEST FIXTURE nvidia-container-cli recording argv."""

from __future__ import annotations

import os

import pytest

from ..hook_process import Hook

OPTIONS_WITH_VALUE = ("--root=", "--debug=", "--user=", "--ldconfig=", "--device=",
                      "--mig-config=", "--mig-monitor=", "--require=", "--pid=")
BARE_OPTIONS = ("--load-kmods", "--no-cgroups", "--compute", "--utility", "--video",
                "--graphics", "--display", "--compat32", "--ngx")


def _assert_only_our_options(argv: list[str], hook: Hook) -> None:
    assert argv[0] == str(hook.cli) and argv[-1] == str(hook.bundle / "rootfs")
    assert argv.count("configure") == 1
    for arg in argv[1:-1]:
        assert arg == "configure" or arg in BARE_OPTIONS or arg.startswith(OPTIONS_WITH_VALUE), arg


@pytest.mark.parametrize("env", [
    ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_A=-h", "NVIDIA_REQUIRE_B=--root=/ configure /",
     "NVIDIA_REQUIRE_C=cuda>=11.0 brand=tesla", "NVIDIA_REQUIRE_D= --pid=1 "],
    ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_=--device=all", "NVIDIA_REQUIRE_X==x"],
    ["CUDA_VERSION=11.8.0", "NVIDIA_REQUIRE_Z=--mig-config=0"],
    ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute, utility ,compute"],
], ids=["dashes", "empty-suffix", "legacy", "caps"])
def test_requirement_values_stay_inside_their_require_element(hook, env):
    hook.write_spec(env)
    proc = hook.run()
    assert proc.returncode == 0, proc.stderr
    argv = hook.recorded("argv").splitlines()
    _assert_only_our_options(argv, hook)
    requires = [a for a in argv if a.startswith("--require=")]
    expected = sorted(e.split("=", 1) for e in env if e.startswith("NVIDIA_REQUIRE_"))
    assert requires[: len(expected)] == [f"--require={v.strip()}" for _, v in expected]


@pytest.mark.parametrize("env,message", [
    (["NVIDIA_VISIBLE_DEVICES=-1"], "invalid device id '-1'"),
    (["NVIDIA_VISIBLE_DEVICES=0,--root=/"], "invalid device id '--root=/'"),
    (["NVIDIA_VISIBLE_DEVICES=GPU--x"], "invalid device id 'GPU--x'"),
    (["NVIDIA_VISIBLE_DEVICES=0 1"], "invalid device id '0 1'"),
    (["NVIDIA_VISIBLE_DEVICES=\u0661"], "invalid device id"),  # an Arabic-Indic digit
    (["NVIDIA_VISIBLE_DEVICES=0:-1"], "invalid device id '0:-1'"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=cuda>=11\n--root=/"],
     "NVIDIA_REQUIRE_X: requirement too long or has control characters"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=a\x00b"],
     "NVIDIA_REQUIRE_X: requirement too long or has control characters"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
     "NVIDIA_MIG_CONFIG_DEVICES is only allowed in privileged containers"),
    (["NVIDIA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(10000))],
     "too many device ids (10000, at most 1024)"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,--root=/"],
     "unknown capability '--root=/'"),
])
def test_hostile_values_are_refused_in_one_line(hook, env, message):
    hook.write_spec(env)
    proc = hook.run()
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert hook.recorded("argv") is None


def test_mig_values_in_a_privileged_container_stay_inside_their_element(hook):
    hook.write_spec([], process={"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=0",
                             "NVIDIA_MIG_CONFIG_DEVICES=0:1,1", "NVIDIA_MIG_MONITOR_DEVICES=all"],
                             "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}})
    proc = hook.run()
    assert proc.returncode == 0, proc.stderr
    argv = hook.recorded("argv").splitlines()
    _assert_only_our_options(argv, hook)
    assert "--mig-config=0:1,1" in argv and "--mig-monitor=all" in argv


def test_requirements_too_many_for_one_argv_are_one_error_line(hook):
    """About 14 MB of requirements: the kernel refuses the exec (E2BIG) and the hook says so."""
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=all"]
                    + [f"NVIDIA_REQUIRE_{i}=" + "c" * 4000 for i in range(3500)])
    proc = hook.run()
    assert proc.returncode == 1
    assert proc.stderr == f"nvidia-container-runtime-hook: error: cannot run {hook.cli}:" \
                          " Argument list too long\n"


def test_a_huge_env_list_is_bounded(hook):
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"] + [f"X{i}=y" for i in range(300_000)])
    proc = hook.run()
    assert proc.returncode == 0, proc.stderr
    assert hook.recorded("argv").splitlines()[-2] == f"--pid={os.getpid()}"
