"""The runtime shim as containerd-shim runs it (docs/reference.md §3): a real process, a stand-in
low-level runtime on PATH that records its argv, a bundle in tmp_path.

Each test runs twice: through the Python entry point (what a console script does) and through
the sh launcher of nvdocker2.runtime.launcher (what the packages install), which must agree.
The TEST FIXTURE nvidia-container-cli (tests/fixtures) is the cli that config.toml names, so
that the prestart hook `create` writes can be run as runc runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2.runtime.launcher import write_launchers
from nvdocker2.runtime.prestart import SCRIPT

FIXTURE_CLI = Path(__file__).parents[2] / "fixtures" / "nvidia-container-cli"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
"""  # noqa: E501 - the launcher's one exec line, as sh reads it


class Setup:
    def __init__(self, root: Path, entry: str):
        self.root = root
        self.entry = entry
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
        self.cli = root / "cli" / "nvidia-container-cli"
        self.cli.parent.mkdir()
        self.cli.write_bytes(FIXTURE_CLI.read_bytes())
        self.cli.chmod(0o755)
        self.record = root / "record"
        self.record.mkdir()
        self.write_config("")

    def write_config(self, text: str) -> None:
        """config.toml: `text`, then the table naming the fixture cli."""
        self.config.write_text(
            f'{text}\n[nvidia-container-cli]\npath = "{self.cli}"\n'
            f'environment = ["FIXTURE_RECORD_DIR={self.record}"]\n')

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


def our_hook(setup, bundle=None, middle=("--device=0", "--compute", "--utility")):
    """The prestart entry `create` writes: nvidia-container-cli's finished command line
    behind the pid-reading sh, with the cli's whole environment."""
    return {"path": "/bin/sh",
            "args": ["sh", "-c", SCRIPT,
                     "nvidia-container-runtime-hook", str((bundle or setup.bundle) / "rootfs"),
                     str(setup.cli), "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig",
                     *middle],
            "env": [f"PATH={SYSTEM_PATH}", f"FIXTURE_RECORD_DIR={setup.record}"]}


def run_as_runc_does(entry, state: str) -> subprocess.CompletedProcess:
    """A prestart hook as runc runs it: path, args (argv[0] included), env only, state on
    stdin."""
    return subprocess.run(entry["args"], executable=entry["path"], env=dict(
        e.split("=", 1) for e in entry.get("env", [])), input=state, capture_output=True,
        text=True, timeout=60)


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
        our_hook(setup, named)]


def test_the_hook_written_at_create_runs_the_cli_with_the_pid_from_the_state(setup):
    (setup.bundle / "rootfs").mkdir()
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    entry = setup.spec()["hooks"]["prestart"][0]
    state = json.dumps({"ociVersion": "1.0.2", "id": "ctr", "status": "created",
                        "pid": os.getpid(), "bundle": str(setup.bundle),
                        "annotations": {"a\"pid": "7"}})
    proc = run_as_runc_does(entry, state)
    assert (proc.returncode, proc.stderr) == (0, "")
    rootfs = str(setup.bundle / "rootfs")
    assert (setup.record / "argv").read_text().splitlines() == [
        str(setup.cli), "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig", "--device=0",
        "--compute", "--utility", f"--pid={os.getpid()}", rootfs]
    env = dict(line.split("=", 1) for line in (setup.record / "env").read_text().splitlines())
    env.pop("PWD", None)
    assert env == {"PATH": SYSTEM_PATH, "FIXTURE_RECORD_DIR": str(setup.record)}
    assert (setup.bundle / "rootfs" / "nvidia-marker").read_text() == (
        f"configured by the test fixture nvidia-container-cli for pid {os.getpid()}\n")


@pytest.mark.parametrize("state,message", [
    ('{"ociVersion":"1.0.2","id":"ctr","status":"created"}',
     "container state on stdin has no 'pid'"),
    ('{"id":"x","pid":"1"}', "container state: 'pid' must be a positive integer"),
    ('{"id":"x","pid":0}', "container state: 'pid' must be a positive integer"),
    ('{"id":"x","pid":-1}', "container state: 'pid' must be a positive integer"),
    ('{"id":"x","pid":1.5}', "container state: 'pid' must be a positive integer"),
    ('{"annotations":{"a\\"pid":"1"},"pid":1}',
     "container state: 'pid' must be a positive integer"),
    ("", "container state on stdin has no 'pid'"),
])
def test_the_hook_written_at_create_refuses_a_state_without_a_pid(setup, state, message):
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    proc = run_as_runc_does(setup.spec()["hooks"]["prestart"][0], state)
    assert proc.returncode == 1
    assert proc.stderr == f"nvidia-container-runtime-hook: error: {message}\n"
    assert not (setup.record / "argv").exists()


def test_no_gpu_request_no_hook(setup):
    setup.spec_file.write_text(json.dumps({**SPEC, "process": {"args": ["sh"], "env": []}}))
    before = setup.spec_file.read_bytes()
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.spec_file.read_bytes() == before
    assert setup.runc_argv() == [str(setup.runc), "create", "--bundle", str(setup.bundle), "ctr"]


def test_a_refused_request_fails_create_in_the_hooks_words(setup):
    setup.spec_file.write_text(json.dumps(
        {**SPEC, "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=0,--root=/"]}}))
    before = setup.spec_file.read_bytes()
    log = setup.root / "log.json"
    proc = setup.run("--log", str(log), "--log-format", "json", "create", "--bundle",
                     str(setup.bundle), "ctr")
    assert proc.returncode == 1
    line = ("nvidia-container-runtime-hook: error: NVIDIA_VISIBLE_DEVICES: invalid device id"
            " '--root=/' (expected all, none, a GPU index like 0, a MIG index like 0:1, or a"
            " GPU-/MIG- UUID)")
    assert proc.stderr == line + "\n"
    assert json.loads(log.read_text())["msg"] == line
    assert setup.runc_argv() is None
    assert setup.spec_file.read_bytes() == before


def test_a_missing_cli_fails_create_in_the_hooks_words(setup):
    setup.cli.unlink()
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"nvidia-container-runtime-hook: error: [nvidia-container-cli] path = '{setup.cli}' in"
        f" {setup.config} is not an executable file\n")
    assert setup.runc_argv() is None


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


def test_version_without_a_low_level_runtime_is_ours_and_says_so(setup, tmp_path):
    from nvdocker2 import __version__

    empty = tmp_path / "empty"
    empty.mkdir()
    proc = setup.run("--version", path=str(empty))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == [
        f"nvidia-container-runtime version {__version__} (nvdocker2)",
        "no low-level runtime found: none of docker-runc, runc, crun is an executable on PATH "
        "(or an absolute path); install runc or set [nvidia-container-runtime] runtimes"]
    proc = setup.run("--version")  # with runc: ours, a blank line, then runc's own
    assert proc.returncode == 0 and proc.stdout == (
        f"nvidia-container-runtime version {__version__} (nvdocker2)\n\nfake runc ran\n")
    assert setup.runc_argv() == [str(setup.runc), "--version"]


def test_launcher_passes_through_without_python(tmp_path):
    setup = Setup(tmp_path, "launcher")
    setup.config.write_text("#runtimes = ['x']\n[nvidia-container-cli]\npath = '/opt/cli'\n")
    assert setup.run("state", "ctr").returncode == 0
    assert setup.runc_argv() == [str(setup.runc), "state", "ctr"]
    assert not setup.python_started()
    setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert setup.python_started()


def test_launcher_reads_config_toml_only_up_to_the_end_of_the_runtimes_table(tmp_path):
    """Keys of the cli's table below [nvidia-container-runtime] cannot change a pass-through:
    the launcher stops reading there and starts no Python."""
    setup = Setup(tmp_path, "launcher")
    packaged = (Path(__file__).parents[3] / "nvdocker2" / "data" / "config.toml")
    setup.config.write_text(packaged.read_text().replace(
        '#debug = "/var/log/nvidia-container-toolkit.log"',
        'debug = "/var/log/nvidia-container-toolkit.log"'))
    assert setup.run("state", "ctr").returncode == 0
    assert setup.runc_argv() == [str(setup.runc), "state", "ctr"]
    assert not setup.python_started()


@pytest.mark.parametrize("text", [
    # the runtime's table after the cli's: read to the end
    '[nvidia-container-cli]\npath = "/x"\n\n[nvidia-container-runtime]\nruntimes = ["{alt}"]\n',
    # a multi-line string could hold a line that looks like a table: Python decides
    '[nvidia-container-runtime]\nnote = """\n[nvidia-container-cli]\n"""\nruntimes = ["{alt}"]\n',
    "[nvidia-container-runtime]\nnote = '''\n[nvidia-container-cli]\n'''\nruntimes = ['{alt}']\n",
    # dotted keys at the top level, before any table
    'nvidia-container-runtime.runtimes = ["{alt}"]\n[nvidia-container-cli]\n',
])
def test_launcher_sends_every_config_that_sets_runtimes_to_python(tmp_path, text):
    setup = Setup(tmp_path, "launcher")
    (setup.root / "alt").mkdir()
    alt = setup.root / "alt" / "other-runc"
    alt.write_text(RECORDING_RUNC)
    alt.chmod(0o755)
    setup.config.write_text(text.replace("{alt}", str(alt)))
    proc = setup.run("state", "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.python_started()
    assert setup.runc_argv() == [str(alt), "state", "ctr"]


def test_a_bundle_created_under_a_plain_config_passes_through_without_reading_it(setup):
    """`create` marks the bundle; the calls containerd makes from it later skip config.toml
    (the launcher starts no Python), calls from elsewhere still read it."""
    (setup.root / "alt").mkdir()
    other = setup.root / "alt" / "other-runc"
    other.write_text(RECORDING_RUNC)
    other.chmod(0o755)
    assert setup.run("create", "--bundle", str(setup.bundle), "ctr").returncode == 0
    mark = setup.bundle / ".nvidia-container-runtime-plain"
    assert mark.is_file()
    setup.write_config(f'[nvidia-container-runtime]\nruntimes = ["{other}"]')
    for f in (setup.root / "python-started", setup.root / "runc-argv"):
        f.unlink(missing_ok=True)
    proc = setup.run("delete", "ctr", cwd=setup.bundle)
    assert proc.returncode == 0, proc.stderr
    assert setup.runc_argv() == [str(setup.runc), "delete", "ctr"]
    assert setup.entry == "python" or not setup.python_started()
    assert setup.run("delete", "ctr").returncode == 0
    assert setup.runc_argv() == [str(other), "delete", "ctr"]
    # a create under a config that sets runtimes takes the mark away
    assert setup.run("create", "--bundle", str(setup.bundle), "ctr").returncode == 0
    assert not mark.exists()


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


def test_a_configured_hook_program_is_the_prestart_hook(setup):
    """The hook beside the runtime is not needed by `create`; a hook program named in
    config.toml is run at prestart instead and decides there, with the config passed on."""
    setup.hook.unlink()
    setup.write_config('[nvidia-container-runtime-hook]\npath = "/opt/hook"')
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.spec()["hooks"]["prestart"] == [
        {"path": "/opt/hook", "args": ["hook", "--config", str(setup.config), "prestart"],
         "env": HOOK_ENV}]


def test_debug_log_when_configured(setup):
    log = setup.root / "runtime.log"
    setup.write_config(f'[nvidia-container-runtime]\ndebug = "{log}"\nlog-level = "debug"')
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
    assert sorted(os.listdir(setup.bundle)) == [".nvidia-container-runtime-plain", "config.json"]


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


def test_unknown_keys_are_warnings_in_the_log_and_auto_says_what_it_resolved_to(setup):
    log = setup.root / "runtime.log"
    tegra = setup.root / "tegra"
    (tegra / "etc").mkdir(parents=True)
    (tegra / "etc" / "nv_tegra_release").write_text("# R36 (release)\n")
    setup.config.write_text(
        f'colour = "blue"\n[nvidia-container-runtime]\nmode = "auto"\ndebug = "{log}"\n'
        f'[nvidia-container-runtime.modes.csv]\nmount-spec-path = "{tegra}/csv"\n'
        f'[nvidia-container-cli]\npath = "{setup.cli}"\nroot = "{tegra}"\n'
        f'environment = ["FIXTURE_RECORD_DIR={setup.record}"]\n')
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    lines = [line.split(": ", 1)[1] for line in log.read_text().splitlines()]
    assert f"warning: {setup.config}: key 'colour' is not one any NVIDIA release knows; ignored" \
        in lines
    assert f"mode: auto resolves to csv: a Tegra board without a GPU in {tegra}/proc/driver/" \
        "nvidia/gpus: NVIDIA's auto says csv: the mount-spec CSV files" in lines
    spec = setup.spec()
    assert not spec.get("hooks", {}).get("prestart")  # csv mode, not libnvidia-container
    assert spec["mounts"][-1]["destination"] == "/etc/nv_tegra_release"
