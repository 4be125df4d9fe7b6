"""The runtime shim's `create` against hostile or broken input: one error line, never a
traceback, runc never started with a half-edited bundle. A real process each time, with a
stand-in runc that records that it ran; the driver tree is the TEST FIXTURE fake driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.fake_driver import build_fake_driver

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)


@pytest.fixture
def shim(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "runc").write_text(f"#!/bin/sh\ntouch {tmp_path}/runc-ran\n")
    (bin_ / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    config = tmp_path / "config.toml"
    config.write_text("")

    def run(*args, env=None):
        return subprocess.run(
            [sys.executable, "-I", "-S", "-c",
             f"import sys; sys.path.append({ROOT!r}); from nvdocker2.runtime import main;"
             " sys.exit(main(sys.argv[2:], sys.argv[1]))",
             str(bin_ / "nvidia-container-runtime"), *args],
            capture_output=True, text=True, timeout=60,
            env={"PATH": f"{bin_}:/usr/bin:/bin", "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(config),
                 **(env or {})})

    run.tmp, run.bundle, run.config = tmp_path, bundle, config
    return run


def _nested_spec(depth: int) -> str:
    spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    return json.dumps(spec)[:-1] + ', "x-deep": ' + "[" * depth + "]" * depth + "}"


def _one_error(proc, prog="nvidia-container-runtime"):
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith(f"{prog}: error: ")
    assert len(lines) <= 2
    return lines[0]


@pytest.mark.parametrize("depth", [600, 990])
def test_direct_mode_deeply_nested_config_json_is_one_error_line(shim, depth):
    driver = build_fake_driver(shim.tmp / "driver")
    shim.config.write_text(
        f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{driver.root}"\n')
    text = _nested_spec(depth)
    (shim.bundle / "config.json").write_text(text)
    line = _one_error(shim("create", "--bundle", str(shim.bundle), "ctr"))
    assert "nests too deeply" in line
    assert (shim.bundle / "config.json").read_text() == text
    assert not (shim.tmp / "runc-ran").exists()


def test_legacy_mode_deeply_nested_config_json_is_one_error_line(shim):
    (shim.bundle / "config.json").write_text(_nested_spec(5000))
    line = _one_error(shim("create", "--bundle", str(shim.bundle), "ctr"))
    assert "is not valid JSON: maximum recursion depth exceeded" in line
    assert not (shim.tmp / "runc-ran").exists()


def test_a_planted_temp_file_symlink_is_not_followed(tmp_path):
    """A symlink (or file) already at the shim's temp name is replaced, never written through."""
    from nvdocker2.runtime.spec import read_spec, write_spec

    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    path = bundle / "config.json"
    path.write_text('{"ociVersion": "1.0.2"}')
    path.chmod(0o640)
    tmp = bundle / f".config.json.nvidia.{os.getpid()}.tmp"
    tmp.symlink_to(victim)
    write_spec(str(path), {"ociVersion": "1.0.2", "hooks": {}})
    assert victim.read_text() == "host file\n"
    assert read_spec(str(path)) == {"ociVersion": "1.0.2", "hooks": {}}
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]
    assert path.stat().st_mode & 0o7777 == 0o640
