"""The runtime shim as containerd-shim runs it (docs/reference.md §3): a real process, a stand-in
low-level runtime on PATH that records its argv, a bundle in tmp_path.

Each test runs twice: through the Python entry point (what a console script does) and through
the sh launcher of nvdocker2.runtime.launcher (what the packages install), which must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2.runtime.launcher import write_launchers

HOOK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
SPEC = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=0"]},
        "root": {"path": "rootfs"}, "hooks": {"poststop": [{"path": "/bin/true"}]},
        "x-unknown": [1, {"k": "v"}]}
RECORDING_RUNC = """#!/bin/sh
printf '%s\\n' "$0" "$@" > "${0%/*}/../runc-argv"
echo "fake runc ran"
"""
PY_ENTRY = """#!/bin/sh
echo python >> "${0%/*}/../python-started"
exec {python} -c 'import sys; from nvdocker2.runtime import main; sys.exit(main(sys.argv[2:], sys.argv[1]))' "$0" "$@"
"""


class Setup:
    def __init__(self, root: Path, entry: str):
        self.root = root
        self.bin = root / "bin"
        self.low = root / "low"
        self.bin.mkdir()
        self.low.mkdir()
        self.runc = self.low / "runc"
        self.runc.write_text(RECORDING_RUNC)
        self.runc.chmod(0o755)
        if entry == "launcher":
            # A python that says it was started, so tests can tell the fast path from the slow.
            counting = root / "python3"
            counting.write_text(
                f'#!/bin/sh\necho python >> "{root}/python-started"\nexec {sys.executable} "$@"\n')
            counting.chmod(0o755)
            write_launchers(str(self.bin), python=str(counting))
        else:
            runtime = self.bin / "nvidia-container-runtime"
            runtime.write_text(PY_ENTRY.replace("{python}", sys.executable))
            runtime.chmod(0o755)
            hook = self.bin / "nvidia-container-runtime-hook"
            hook.write_text("#!/bin/sh\nexit 0\n")
            hook.chmod(0o755)
        self.runtime = self.bin / "nvidia-container-runtime"
        self.hook = self.bin / "nvidia-container-runtime-hook"
        self.bundle = root / "bundle"
        self.bundle.mkdir()
        self.spec_file = self.bundle / "config.json"
        self.spec_file.write_text(json.dumps(SPEC))
        self.config = root / "config.toml"

    def run(self, *args, cwd=None, env_extra=None, path=None):
        env = {"PATH": path if path is not None else f"{self.low}:/usr/bin:/bin"}
        if self.config.exists():
            env["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = str(self.config)
        env.update(env_extra or {})
        return subprocess.run([str(self.runtime), *args], capture_output=True, text=True,
                              env=env, cwd=cwd or self.root, timeout=60)

    def runc_argv(self):
        f = self.root / "runc-argv"
        return f.read_text().splitlines() if f.exists() else None

    def python_started(self):
        return (self.root / "python-started").exists()

    def spec(self):
        return json.loads(self.spec_file.read_bytes())


@pytest.fixture(params=["python", "launcher"])
def setup(request, tmp_path):
    return Setup(tmp_path, request.param)


SHIM_ARGS = ["--root", "/run/r", "--log", "/run/log.json", "--log-format", "json"]


def our_hook(setup, config_file=None):
    args = ["nvidia-container-runtime-hook"]
    if config_file:
        args += ["--config", str(config_file)]
    return {"path": str(setup.hook), "args": [*args, "prestart"], "env": HOOK_ENV}


def test_create_adds_hook_and_execs_runc_with_untouched_argv(setup):
    argv = [*SHIM_ARGS, "create", "--bundle", str(setup.bundle), "--pid-file", "/p", "ctr"]
    proc = setup.run(*argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "fake runc ran\n"
    assert setup.runc_argv() == [str(setup.runc), *argv]
    spec = setup.spec()
    assert spec["hooks"]["prestart"] == [our_hook(setup)]
    del spec["hooks"]["prestart"]
    assert spec == SPEC


def test_second_create_leaves_the_file_untouched(setup):
    setup.run("create", "-b", str(setup.bundle), "ctr")
    before = setup.spec_file.read_bytes()
    inode = setup.spec_file.stat().st_ino
    proc = setup.run("create", "-b", str(setup.bundle), "ctr")
    assert proc.returncode == 0
    assert setup.spec_file.read_bytes() == before
    assert setup.spec_file.stat().st_ino == inode


def test_bundle_defaults_to_cwd_and_a_bundle_named_create(setup):
    proc = setup.run("create", "ctr", cwd=setup.bundle)
    assert proc.returncode == 0, proc.stderr
    assert setup.spec()["hooks"]["prestart"] == [our_hook(setup)]
    named = setup.root / "create"
    named.mkdir()
    (named / "config.json").write_text(json.dumps(SPEC))
    proc = setup.run("create", "--bundle", "create", "ctr", cwd=setup.root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((named / "config.json").read_text())["hooks"]["prestart"] == [
        our_hook(setup)]


def test_config_from_env_is_passed_to_the_hook(setup):
    setup.config.write_text("# nothing set\n")
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert setup.spec()["hooks"]["prestart"] == [our_hook(setup, setup.config)]


@pytest.mark.parametrize("args", [
    ["state", "ctr"], [*SHIM_ARGS, "start", "ctr"], ["--log", "create", "delete", "ctr"],
    ["kill", "create", "9"], ["--version"],
])
def test_other_subcommands_pass_through_untouched(setup, args):
    before = setup.spec_file.read_bytes()
    proc = setup.run(*args, cwd=setup.bundle)
    assert proc.returncode == 0, proc.stderr
    assert setup.runc_argv() == [str(setup.runc), *args]
    assert setup.spec_file.read_bytes() == before


def test_launcher_passes_through_without_python(tmp_path):
    setup = Setup(tmp_path, "launcher")
    setup.config.write_text("#runtimes = ['x']\n[nvidia-container-cli]\npath = '/opt/cli'\n")
    assert setup.run("state", "ctr").returncode == 0
    assert setup.runc_argv() == [str(setup.runc), "state", "ctr"]
    assert not setup.python_started()
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert setup.python_started()


def test_configured_runtimes_absolute_and_never_itself(setup):
    (setup.root / "alt").mkdir()
    other = setup.root / "alt" / "other-runc"
    other.write_text(RECORDING_RUNC)
    other.chmod(0o755)
    setup.config.write_text(f'[nvidia-container-runtime]\nruntimes = ["/nonexistent/crun",'
                            f' "nvidia-container-runtime", "{other}"]\n')
    proc = setup.run("state", "ctr", path=f"{setup.bin}:{setup.low}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert setup.runc_argv() == [str(other), "state", "ctr"]


def test_no_low_level_runtime_is_one_error_line(setup):
    setup.runc.unlink()
    for args in (["state", "ctr"], ["create", "--bundle", str(setup.bundle), "ctr"]):
        proc = setup.run(*args, path=f"{setup.low}:/nonexistent")
        assert proc.returncode == 1
        assert proc.stderr == (
            "nvidia-container-runtime: error: no low-level runtime found: none of docker-runc,"
            " runc, crun is an executable on PATH (or an absolute path); install runc or set"
            " [nvidia-container-runtime] runtimes\n")
    assert "hooks" not in setup.spec() or "prestart" not in setup.spec()["hooks"]


def test_malformed_spec_fails_create_and_runc_never_runs(setup):
    setup.spec_file.write_text('{"ociVersion": ')
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        f"nvidia-container-runtime: error: {setup.spec_file} is not valid JSON: ")
    assert proc.stderr.count("\n") == 1
    assert setup.runc_argv() is None


def test_malformed_config_fails_create_but_not_cleanup(setup):
    setup.config.write_text("[nvidia-container-runtime]\nruntimes = [\n")
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"nvidia-container-runtime: error: {setup.config}: invalid TOML")
    assert setup.runc_argv() is None
    proc = setup.run("delete", "ctr")
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "using the default runtimes" in proc.stderr
    assert setup.runc_argv() == [str(setup.runc), "delete", "ctr"]


def test_missing_hook_beside_the_runtime_is_an_error(setup):
    setup.hook.unlink()
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    assert "nvidia-container-runtime-hook not found beside" in proc.stderr
    setup.config.write_text('[nvidia-container-runtime-hook]\npath = "/opt/hook"\n')
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.spec()["hooks"]["prestart"][0]["path"] == "/opt/hook"


def test_debug_log_when_configured(setup):
    log = setup.root / "runtime.log"
    setup.config.write_text(
        f'[nvidia-container-runtime]\ndebug = "{log}"\nlog-level = "debug"\n')
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    setup.run("state", "ctr")
    text = log.read_text()
    assert f"{setup.spec_file}: updated" in text
    assert f"exec {setup.runc} create --bundle {setup.bundle} ctr" in text
    assert f"exec {setup.runc} state ctr" in text


def test_mode_of_config_json_is_kept(setup):
    os.chmod(setup.spec_file, 0o600)
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert setup.spec_file.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(setup.bundle)) == ["config.json"]


# -- direct mode (reference §7): the runtime edits the spec itself; runc runs it as a hook ---------

def _direct_config(setup, driver_root):
    setup.config.write_text(
        f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{driver_root}"\n')
    (setup.bundle / "rootfs" / "usr" / "lib").mkdir(parents=True)


def test_direct_mode_edits_the_spec_and_execs_runc(setup):
    from fixtures.fake_driver import build_fake_driver

    driver = build_fake_driver(setup.root / "driver")
    _direct_config(setup, driver.root)
    argv = ["create", "--bundle", str(setup.bundle), "ctr"]
    proc = setup.run(*argv)
    assert proc.returncode == 0, proc.stderr
    assert setup.runc_argv() == [str(setup.runc), *argv]
    spec = setup.spec()
    assert {"/dev/nvidia0", "/dev/nvidiactl"} <= {d["path"] for d in spec["linux"]["devices"]}
    hook = spec["hooks"]["createContainer"][-1]
    assert hook["path"] == str(setup.runtime)
    assert hook["args"][:3] == ["nvidia-container-runtime", "direct-hook", "update-ldcache"]
    assert "prestart" not in spec["hooks"]


def test_direct_mode_without_gpu_request_leaves_the_spec(setup):
    _direct_config(setup, setup.root / "no-driver")
    setup.spec_file.write_text(json.dumps({**SPEC, "process": {"args": ["sh"], "env": []}}))
    before = setup.spec_file.read_bytes()
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.spec_file.read_bytes() == before


def test_direct_mode_refusal_is_an_error_and_hint_and_nothing_runs(setup):
    (setup.root / "no-driver").mkdir()
    _direct_config(setup, setup.root / "no-driver")
    before = setup.spec_file.read_bytes()
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) in (1, 2) and lines[0].startswith("nvidia-container-runtime: error: ")
    assert all(line.startswith("nvidia-container-runtime: hint: ") for line in lines[1:])
    assert setup.runc_argv() is None
    assert setup.spec_file.read_bytes() == before


def test_direct_hook_role_is_dispatched_not_passed_to_runc(setup):
    proc = setup.run("direct-hook", "frobnicate", "x")
    assert proc.returncode == 1
    assert "unknown direct-hook action ['frobnicate']" in proc.stderr
    assert setup.runc_argv() is None
