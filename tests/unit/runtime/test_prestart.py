"""The hook's decision made at `create` (nvdocker2.runtime.prestart), against the hook itself.

For the same bundle and config.toml, the runtime's `create` must refuse what the hook refuses,
with the hook's very line, before runc runs and with config.json untouched; add nothing where
the hook does nothing; and otherwise write a prestart entry that, run as runc runs a hook, calls
nvidia-container-cli with the same command line and environment as the hook does. Real
processes; the TEST FIXTURE nvidia-container-cli records its argv and environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ..hook_process import Hook

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)
PRIVILEGED = {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}

CASES = [
    (["NVIDIA_VISIBLE_DEVICES=0,1"], {}),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all",
      "NVIDIA_REQUIRE_A=-h", "NVIDIA_REQUIRE_B=--root=/ configure /"], {}),
    (["CUDA_VERSION=11.8.0"], {}),
    (["CUDA_VERSION=eleven"], {}),
    (["NVIDIA_VISIBLE_DEVICES=void"], {}),
    (["NVIDIA_VISIBLE_DEVICES="], {}),
    ([], {}),
    (["NVIDIA_VISIBLE_DEVICES=-1"], {}),
    (["NVIDIA_VISIBLE_DEVICES=0,--root=/"], {}),
    (["NVIDIA_VISIBLE_DEVICES=0 1"], {}),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=cuda>=11\n--root=/"], {}),
    (["NVIDIA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(2000))], {}),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,--root=/"], {}),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"], {}),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0:1",
      "NVIDIA_MIG_MONITOR_DEVICES=all"], PRIVILEGED),
    (["NVIDIA_VISIBLE_DEVICES=all"]
     + [f"NVIDIA_REQUIRE_{i}=" + "c" * 4000 for i in range(600)], {}),
]


def _recording_runc(tmp_path: Path) -> Path:
    """A directory holding a stand-in runc that leaves tmp_path/runc-ran."""
    runc_dir = tmp_path / "low"
    runc_dir.mkdir()
    (runc_dir / "runc").write_text(f"#!/bin/sh\ntouch {tmp_path}/runc-ran\n")
    (runc_dir / "runc").chmod(0o755)
    return runc_dir


def _create(hook: Hook, runc_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({ROOT!r}); from nvdocker2.runtime import main;"
         " sys.exit(main(sys.argv[2:], sys.argv[1]))", str(hook.root / "nvidia-container-runtime"),
         "create", "--bundle", str(hook.bundle), "ctr"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": f"{runc_dir}:/usr/bin:/bin",
             "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(hook.config)})


def _recorded(hook: Hook) -> tuple[str | None, str | None]:
    out = []
    for name in ("argv", "env"):
        f = hook.record / name
        text = f.read_text() if f.exists() else None
        if name == "env" and text is not None:
            text = "\n".join(line for line in text.splitlines() if not line.startswith("PWD="))
        out.append(text)
        if f.exists():
            f.unlink()
    return out[0], out[1]


@pytest.mark.parametrize("env,process", CASES, ids=range(len(CASES)))
def test_create_decides_as_the_hook_does(tmp_path, env, process):
    hook = Hook(tmp_path)
    runc_dir = _recording_runc(tmp_path)
    hook.write_spec(env, process={"args": ["sh"], "env": env, **process})
    spec_file = hook.bundle / "config.json"
    before = spec_file.read_bytes()

    by_hook = hook.run()
    hook_argv, hook_env = _recorded(hook)
    by_runtime = _create(hook, runc_dir)

    if by_hook.returncode != 0:
        assert by_hook.stderr.startswith("nvidia-container-runtime-hook: error: ")
        assert (by_runtime.returncode, by_runtime.stderr) == (1, by_hook.stderr)
        assert not (tmp_path / "runc-ran").exists()
        assert spec_file.read_bytes() == before
        return
    assert (by_runtime.returncode, by_runtime.stderr) == (0, ""), by_runtime.stderr
    assert (tmp_path / "runc-ran").exists()
    if hook_argv is None:
        assert spec_file.read_bytes() == before
        return
    entry = json.loads(spec_file.read_bytes())["hooks"]["prestart"][-1]
    proc = subprocess.run(entry["args"], executable=entry["path"],
                          env=dict(e.split("=", 1) for e in entry["env"]), input=hook.state(),
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert _recorded(hook) == (hook_argv, hook_env)


def test_a_command_line_too_long_for_the_kernel_fails_create_as_it_fails_the_hook(tmp_path):
    """About 14 MB of requirements: the hook's exec of the cli fails with E2BIG; `create`
    refuses the same request with the same line, before runc runs."""
    hook = Hook(tmp_path)
    runc_dir = _recording_runc(tmp_path)
    hook.write_spec(["NVIDIA_VISIBLE_DEVICES=all"]
                    + [f"NVIDIA_REQUIRE_{i}=" + "c" * 4000 for i in range(3500)])
    by_hook = hook.run()
    by_runtime = _create(hook, runc_dir)
    assert by_hook.stderr == f"nvidia-container-runtime-hook: error: cannot run {hook.cli}:" \
                             " Argument list too long\n"
    assert (by_runtime.returncode, by_runtime.stderr) == (1, by_hook.stderr)
    assert not (tmp_path / "runc-ran").exists()


@pytest.mark.parametrize("spec,message", [
    ({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, "missing 'process'"),
    ({"ociVersion": "1.0.2", "process": {"env": []}}, "missing 'root'"),
    ({"ociVersion": "1.0.2", "process": {"env": []}, "root": {"path": ""}},
     "'root.path' must be a non-empty string"),
    ({"ociVersion": "1.0.2", "process": {"env": "x"}, "root": {"path": "r"}},
     "'process.env' must be a list of strings"),
])
def test_a_spec_the_hook_cannot_use_fails_create_in_its_words(tmp_path, spec, message):
    hook = Hook(tmp_path)
    runc_dir = _recording_runc(tmp_path)
    (hook.bundle / "config.json").write_text(json.dumps(spec))
    by_hook = hook.run()
    by_runtime = _create(hook, runc_dir)
    assert message in by_hook.stderr and by_hook.returncode == 1
    assert (by_runtime.returncode, by_runtime.stderr) == (1, by_hook.stderr)
    assert not (tmp_path / "runc-ran").exists()
    assert sorted(os.listdir(hook.bundle)) == ["config.json", "rootfs"]
