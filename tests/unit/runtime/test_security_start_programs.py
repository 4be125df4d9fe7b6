"""The programs the container start path execs as root, planted by another user.

The runtime execs runc (or crun), the hook and the prestart entry the runtime writes exec
nvidia-container-cli, direct mode's hook runs the host's ldconfig. Each of them must be a
program no user but root could have placed or replaced: a file owned by `nobody`, or one in a
directory anyone can write, is refused before anything is exec'd, with one `error:` line, and
the planted program (a TEST FIXTURE that leaves a marker when it runs) never runs. Real
processes, as containerd and runc start them.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.fake_driver import make_bundle
from ..hook_process import Hook

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)

# How another user gets a program onto the start path: it owns the file, or it can write
# the directory the file is in (and so replace the file at will).
PLANTINGS = ["owned by nobody", "in a directory anyone can write"]


def _plant(program: Path, how: str) -> str:
    """Make `program` one that another user could have replaced; return why it is refused."""
    if how == "owned by nobody":
        if os.geteuid() != 0:
            if os.environ.get("CI") == "true":
                pytest.fail("prerequisite missing under CI: root, to give a file to nobody")
            pytest.skip("needs root to give a file to nobody")
        uid = pwd.getpwnam("nobody").pw_uid
        os.chown(program, uid, -1)
        return f"{program} belongs to uid {uid}"
    program.parent.chmod(0o777)  # world-writable, not sticky: anyone may swap the file
    return f"{program.parent} is writable by other users"


def _stand_in(path: Path, marker: Path) -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\n")
    path.chmod(0o755)
    return path


def _runtime(hook: Hook, runc_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({ROOT!r}); from nvdocker2.runtime import main;"
         " sys.exit(main(sys.argv[2:], sys.argv[1]))", str(hook.root / "nvidia-container-runtime"),
         *args],
        capture_output=True, text=True, timeout=60,
        env={"PATH": f"{runc_dir}:/usr/bin:/bin",
             "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(hook.config)})


@pytest.mark.parametrize("how", PLANTINGS)
@pytest.mark.parametrize("args", [["create", "--bundle", "{bundle}", "ctr"], ["state", "ctr"]])
def test_a_runc_another_user_could_replace_is_refused_by_the_runtime(tmp_path, how, args):
    hook = Hook(tmp_path)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    spec_before = (hook.bundle / "config.json").read_bytes()
    marker = tmp_path / "runc-ran"
    runc = _stand_in(tmp_path / "low" / "runc", marker)
    why = _plant(runc, how)
    proc = _runtime(hook, runc.parent, *(a.format(bundle=hook.bundle) for a in args))
    assert (proc.returncode, proc.stderr) == (1, (
        f"nvidia-container-runtime: error: refusing to run {runc}: {why}\n"
        "nvidia-container-runtime: hint: the low-level runtime must belong to root, in"
        " directories only root can write\n"))
    assert not marker.exists()
    assert (hook.bundle / "config.json").read_bytes() == spec_before


def _cli_refusal(hook: Hook, why: str) -> str:
    return (f"nvidia-container-runtime-hook: error: refusing to run {hook.cli}: {why}; it must"
            " belong to root, in directories only root can write\n")


@pytest.mark.parametrize("how", PLANTINGS)
def test_a_cli_another_user_could_replace_is_refused_at_create(tmp_path, how):
    """`create` decides the prestart entry, which execs the cli by this path: it refuses it
    in the hook's words, before runc runs and with config.json untouched."""
    hook = Hook(tmp_path)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    spec_before = (hook.bundle / "config.json").read_bytes()
    marker = tmp_path / "runc-ran"
    runc = _stand_in(tmp_path / "low" / "runc", marker)
    why = _plant(hook.cli, how)
    proc = _runtime(hook, runc.parent, "create", "--bundle", str(hook.bundle), "ctr")
    assert (proc.returncode, proc.stderr) == (1, _cli_refusal(hook, why))
    assert not marker.exists()
    assert (hook.bundle / "config.json").read_bytes() == spec_before


@pytest.mark.parametrize("how", PLANTINGS)
def test_a_cli_another_user_could_replace_is_refused_by_the_hook(tmp_path, how):
    hook = Hook(tmp_path)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    why = _plant(hook.cli, how)
    proc = hook.run()
    assert (proc.returncode, proc.stderr) == (1, _cli_refusal(hook, why))
    assert hook.recorded("argv") is None and hook.recorded("env") is None


@pytest.mark.parametrize("how", PLANTINGS)
def test_an_ldconfig_another_user_could_replace_is_refused_by_the_direct_hook(tmp_path, how):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    marker = tmp_path / "ldconfig-ran"
    ldconfig = _stand_in(tmp_path / "sbin" / "ldconfig", marker)
    why = _plant(ldconfig, how)
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1,
                        "bundle": str(bundle)})
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({ROOT!r}); from nvdocker2.runtime import main;"
         " sys.exit(main(sys.argv[1:], 'nvidia-container-runtime'))",
         "direct-hook", "update-ldcache", "--ldconfig", str(ldconfig)],
        input=state, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stderr) == (1, (
        f"error: direct-hook: cannot run {ldconfig} -r {rootfs}: {why}\n"
        "hint: ldconfig must belong to root, in directories only root can write\n"))
    assert not marker.exists()


def test_the_same_checks_let_root_owned_programs_run(tmp_path):
    """The refusals above are the planting's doing: the same stand-ins, root's, do run."""
    hook = Hook(tmp_path)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    marker = tmp_path / "runc-ran"
    runc = _stand_in(tmp_path / "low" / "runc", marker)
    proc = _runtime(hook, runc.parent, "state", "ctr")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert marker.read_text() == f"{runc} state ctr\n"
    proc = hook.run()
    assert proc.returncode == 0, proc.stderr
    assert hook.recorded("argv") is not None
