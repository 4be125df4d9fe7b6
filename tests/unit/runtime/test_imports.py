"""The runtime and the hook run on every container start: they import the standard library
and nvdocker2's own runtime modules only (reference §1); a pass-through imports almost nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)
MODULES = ["nvdocker2.runtime", "nvdocker2.runtime.args", "nvdocker2.runtime.spec",
           "nvdocker2.oneline", "nvdocker2.device_ids",
           "nvdocker2.runtime.jsonio", "nvdocker2.runtime.prestart",
           "nvdocker2.runtime.launcher", "nvdocker2.hook", "nvdocker2.hook.request",
           "nvdocker2.hook.cli_argv", "nvdocker2.toolkit_config",
           "nvdocker2.toolkit_schema",
           # the doors to the host, stdlib-only
           "nvdocker2.host", "nvdocker2.host.files", "nvdocker2.host.run"]
ALLOWED_NVDOCKER2 = {"nvdocker2", *MODULES}


def _python(code: str, *args: str, env=None):
    return subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c",
         f"import sys; sys.path.append({ROOT!r}); {code}", *args],
        capture_output=True, text=True, timeout=60, env=env)


def _imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "imported package" not in line}


def test_runtime_and_hook_import_only_stdlib_and_their_own_modules():
    proc = _python("import " + ", ".join(MODULES) + "; print('\\n'.join(sorted(sys.modules)))")
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    for banned in ("typer", "rich", "jsonschema", "filelock", "click", "packaging",
                   "nvdocker2.cli", "nvdocker2.errors"):
        assert banned not in loaded
    if sys.version_info >= (3, 10):
        foreign = {m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names
                   and m not in ALLOWED_NVDOCKER2 and not m.startswith("_")}
        assert foreign == set()


def test_passthrough_imports_no_json_no_toml_no_dataclasses(tmp_path):
    runc = tmp_path / "runc"
    runc.write_text("#!/bin/sh\nexit 0\n")
    runc.chmod(0o755)
    env = {"PATH": str(tmp_path), "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(tmp_path / "c.toml")}
    (tmp_path / "c.toml").write_text("# defaults\n[nvidia-container-cli]\npath = '/x'\n")
    proc = _python("from nvdocker2.runtime import main; main(sys.argv[2:], sys.argv[1])",
                   str(tmp_path / "self"), "--root", "/r", "state", "ctr", env=env)
    assert proc.returncode == 0, proc.stderr
    imported = _imported(proc.stderr)
    assert "nvdocker2.runtime.args" in imported
    assert not imported & {"json", "tomllib", "tomli", "dataclasses", "typing", "re",
                           "nvdocker2.toolkit_config"}


def test_invalid_json_in_a_fresh_process_is_a_value_error():
    proc = _python("from nvdocker2.runtime import jsonio\n"
                   "for t in ('{', '[1,]', '{} x', ''):\n"
                   "    try: jsonio.loads(t)\n"
                   "    except ValueError as e: print(type(e).__name__, e)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "JSONDecodeError Expecting property name enclosed in double quotes: line 1 column 2"
        " (char 1)",
        "JSONDecodeError Expecting value: line 1 column 4 (char 3)",
        "JSONDecodeError Extra data: line 1 column 4 (char 3)",
        "JSONDecodeError Expecting value: line 1 column 1 (char 0)",
    ]


def test_hook_poststop_reads_no_config(tmp_path):
    proc = _python("from nvdocker2.hook import main; sys.exit(main(['poststop']))",
                   env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": os.devnull})
    assert proc.returncode == 0
    assert not _imported(proc.stderr) & {"json", "tomllib", "nvdocker2.toolkit_config"}


def test_gpu_prestart_and_create_skip_the_costly_imports(tmp_path):
    """The hook's prestart and the runtime's create import neither json (and its re) nor
    typing, dataclasses or tomllib for a plain config.toml: each costs milliseconds per
    container start."""
    costly = {"json", "re", "typing", "dataclasses", "tomllib", "tomli", "inspect"}
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(
        '{"ociVersion": "1.0.2", "root": {"path": "rootfs"},'
        ' "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}')
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-cli]\npath = "/bin/true"\nenvironment = ["A=1"]\n')
    state = f'{{"bundle": "{bundle}", "pid": {os.getpid()}}}'
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c",
         f"import sys; sys.path.append({ROOT!r}); from nvdocker2.hook import main; "
         f"sys.exit(main(['--config', {str(config)!r}, 'prestart']))"],
        input=state, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    imported = _imported(proc.stderr)
    assert "nvdocker2.hook.request" in imported
    assert not imported & costly

    runc = tmp_path / "runc"
    runc.write_text("#!/bin/sh\nexit 0\n")
    runc.chmod(0o755)
    hook = tmp_path / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    proc = _python("from nvdocker2.runtime import main; main(sys.argv[2:], sys.argv[1])",
                   str(tmp_path / "nvidia-container-runtime"), "create", "--bundle",
                   str(bundle), "ctr",
                   env={"PATH": str(tmp_path), "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    imported = _imported(proc.stderr)
    assert "nvdocker2.runtime.spec" in imported
    assert not imported & costly
    assert "nvidia-container-runtime-hook" in (bundle / "config.json").read_text()
