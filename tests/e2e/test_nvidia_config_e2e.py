"""GPU containers start on NVIDIA's own config.toml files (tests/data/nvidia-config): the session's
private dockerd with this package's runtime, NVIDIA_CONTAINER_RUNTIME_CONFIG naming one of those
files with its `mode` line set to auto, legacy or jit-cdi, and only the lines that point at the
TEST FIXTURES changed: `[nvidia-container-cli] path` and `environment` at the fixture
nvidia-container-cli (legacy), `root` at the fixture fake driver tree (auto and jit-cdi, which
resolve to direct mode there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver

from nvdocker2.runtime.launcher import write_launchers

DATA = Path(__file__).parent.parent / "data" / "nvidia-config"
FIXTURE_CLI = Path(__file__).parent.parent / "fixtures" / "nvidia-container-cli"
MARKER = "configured by the test fixture nvidia-container-cli for pid "
# One file of each content: identical releases start the same container.
FILES = sorted({p.read_bytes(): p for p in sorted(DATA.glob("*.toml"), reverse=True)
                if "ubuntu" not in p.name}.values())  # ubuntu's ldconfig.real: not on Debian


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("nvidia-config")
    (root / "bin").mkdir()
    write_launchers(str(root / "bin"))
    cli = root / "nvidia-container-cli"
    shutil.copy(FIXTURE_CLI, cli)
    (root / "record").mkdir()
    wrapper = root / "nvidia-runtime"
    wrapper.write_text(f'#!/bin/sh\nNVIDIA_CONTAINER_RUNTIME_CONFIG={root}/config.toml'
                       f' exec {root}/bin/nvidia-container-runtime "$@"\n')
    wrapper.chmod(0o755)
    return {"root": root, "cli": cli, "driver": build_fake_driver(root / "driver"),
            "wrapper": wrapper}


def nvidia_file_for_test(text: str, mode: str, s: dict) -> str:
    """NVIDIA's file with `mode` and the fixture lines; every other byte as NVIDIA wrote it."""
    out = text.replace('mode = "auto"', f'mode = "{mode}"', 1)
    assert out.count(f'mode = "{mode}"') == 1
    if mode == "legacy":
        out = out.replace("environment = []", f'environment = ["FIXTURE_RECORD_DIR={s["root"]}'
                          f'/record"]\npath = "{s["cli"]}"', 1)
    else:
        out = out.replace('#root = "/run/nvidia/driver"', f'root = "{s["driver"].root}"', 1)
    assert out != text.replace('mode = "auto"', f'mode = "{mode}"', 1)
    return out


@pytest.mark.parametrize("mode", ["auto", "legacy", "jit-cdi"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_gpu_container_starts_on_nvidias_config_toml(dockerd, setup, path, mode):
    (setup["root"] / "config.toml").write_text(nvidia_file_for_test(path.read_text(), mode, setup))
    for f in (setup["root"] / "record").iterdir():
        f.unlink()
    dockerd.config_file.write_text(json.dumps(
        {"runtimes": {"nvidia": {"path": str(setup["wrapper"])}}}))
    dockerd.sighup()
    dockerd.wait_info(lambda i: "nvidia" in i.get("Runtimes", {}))
    script = ("cat /nvidia-marker 2>/dev/null || echo no-marker;"
              f" [ -c /dev/nvidia0 ] && echo nvidia0 || echo no-nvidia0;"
              f" [ -e {LIB64_DIR}/libcuda.so.{DRIVER_VERSION} ] && echo libcuda || echo no-libcuda")
    proc = dockerd.docker("run", "--rm", "--network=none", "--runtime=nvidia",
                          "-e", "NVIDIA_VISIBLE_DEVICES=0", dockerd.image, "sh", "-c", script,
                          timeout=120)
    lines = proc.stdout.splitlines()
    if mode == "legacy":  # the fixture cli configured it; no driver node from direct mode
        assert lines[0].startswith(MARKER) and lines[1:] == ["no-nvidia0", "no-libcuda"]
    else:  # direct mode from the fake driver: the node and the library, no cli
        assert lines == ["no-marker", "nvidia0", "libcuda"]
