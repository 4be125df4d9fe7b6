"""`nvdocker2 cdi generate` and `nvdocker2 install --mode`, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

SCHEMA = json.loads((Path(__file__).parents[2] / "fixtures/cdi_schema.json").read_text())


def nvdocker2(*args, env=None):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "nvdocker2", *args], capture_output=True,
                          text=True, env=full, timeout=60)


REPO = Path(__file__).parents[3]


def test_the_fake_driver_fixture_builds_a_tree_from_its_command_line(tmp_path):
    root = tmp_path / "gpus"
    argv = [sys.executable, "-m", "tests.fixtures.fake_driver", str(root), "--gpus", "3"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"fake driver 535.104.05 (test fixture) at {root}"
    out = tmp_path / "nvidia.json"
    g = nvdocker2("cdi", "generate", "--driver-root", str(root), "--output", str(out),
                  "--runtime-path", "/usr/bin/nvidia-container-runtime")
    assert g.returncode == 0, g.stderr
    names = [d["name"] for d in json.loads(out.read_text())["devices"]]
    assert names[::2] == ["0", "1", "2", "all"]
    again = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert again.returncode == 2 and again.stderr.splitlines() == [
        f"error: {root} exists and is not an empty directory",
        "hint: name a new directory; the tree is built only where nothing is"]
    helped = subprocess.run([*argv[:3], "--help"], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert helped.returncode == 0 and "TEST FIXTURE, never shipped" in helped.stdout


def test_cdi_generate_writes_a_valid_spec(driver, tmp_path):
    out = tmp_path / "cdi" / "nvidia.json"
    r = nvdocker2("cdi", "generate", "--driver-root", str(driver.root), "--output", str(out),
                  "--runtime-path", "/usr/bin/nvidia-container-runtime")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"wrote {out}: 2 GPU(s), 7 driver files, driver root {driver.root}\n")
    spec = json.loads(out.read_text())
    jsonschema.validate(spec, SCHEMA)
    assert [d["name"] for d in spec["devices"]][-1] == "all"
    assert spec["containerEdits"]["hooks"][0]["path"] == "/usr/bin/nvidia-container-runtime"
    assert sorted(p.name for p in out.parent.iterdir()) == ["nvidia.json"]


def test_cdi_generate_yaml_takes_driver_root_from_config_toml(driver, tmp_path):
    toml = tmp_path / "config.toml"
    toml.write_text(f'[nvidia-container-runtime]\ndriver-root = "{driver.root}"\n')
    out = tmp_path / "nvidia.yaml"
    r = nvdocker2("cdi", "generate", "--output", str(out), "--json",
                  env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"output": str(out), "gpus": 2, "mounts": 7,
                                    "driver_root": str(driver.root), "wsl": False}
    assert out.read_text().startswith('cdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\n')


def test_cdi_generate_without_a_driver_exits_3_with_one_error_and_one_hint(tmp_path):
    out = tmp_path / "nvidia.yaml"
    r = nvdocker2("cdi", "generate", "--driver-root", str(tmp_path), "--output", str(out))
    assert r.returncode == 3
    lines = r.stderr.splitlines()
    assert lines[0] == (
        f"error: no NVIDIA driver found: {tmp_path}/proc/driver/nvidia/gpus does not exist")
    assert lines[1].startswith("hint: load the NVIDIA kernel module")
    assert len(lines) == 2
    assert not out.exists()


def test_install_mode_direct_sets_the_mode_and_keeps_config_toml(tmp_path):
    toml = tmp_path / "config.toml"
    original = ('# managed by ops\n[nvidia-container-runtime]\nlog-level = "info"\n\n'
                '[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n')
    toml.write_text(original)
    daemon = tmp_path / "daemon.json"
    env = {"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)}
    r = nvdocker2("install", "--config", str(daemon), "--reload", "none", "--no-verify",
                  "--runtime-path", "/usr/bin/nvidia-container-runtime", "--allow-missing-runtime",
                  "--mode", "direct",
                  env=env)
    assert r.returncode == 0, r.stderr
    assert toml.read_text() == original.replace(
        'log-level = "info"\n', 'log-level = "info"\nmode = "direct"\n')
    assert f'added {toml}: [nvidia-container-runtime] mode: "direct"' in r.stdout
    assert json.loads(daemon.read_text())["runtimes"]["nvidia"] == {
        "path": "/usr/bin/nvidia-container-runtime"}

    r = nvdocker2("install", "--config", str(daemon), "--reload", "none", "--no-verify",
                  "--runtime-path", "/usr/bin/nvidia-container-runtime", "--allow-missing-runtime",
                  "--mode", "legacy",
                  "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    assert '-mode = "direct"\n+mode = "legacy"\n' in r.stdout
    assert 'mode = "direct"' in toml.read_text()


def test_install_mode_refuses_a_config_toml_it_cannot_edit_safely(tmp_path):
    toml = tmp_path / "config.toml"
    toml.write_text("[nvidia-container-runtime\n")
    r = nvdocker2("install", "--config", str(tmp_path / "daemon.json"), "--reload", "none",
                  "--no-verify", "--mode", "direct",
                  env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].startswith(f"error: {toml}: invalid TOML")
    assert toml.read_text() == "[nvidia-container-runtime\n"


def test_cdi_generate_refuses_a_broken_config_toml(tmp_path):
    toml = tmp_path / "config.toml"
    toml.write_text('[nvidia-container-runtime]\nmode = 1\n')
    r = nvdocker2("cdi", "generate", "--output", str(tmp_path / "x.yaml"),
                  env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].startswith(
        f"error: {toml}: key 'nvidia-container-runtime.mode' must be")
