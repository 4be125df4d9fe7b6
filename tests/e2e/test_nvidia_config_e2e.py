"""GPU containers start on NVIDIA's own config.toml files (tests/data/nvidia-config): the session's
private dockerd with this package's runtime, NVIDIA_CONTAINER_RUNTIME_CONFIG naming one of those
files with its `mode` line set to auto, legacy, cdi, jit-cdi or csv, and only the lines that
point at the TEST FIXTURES changed (held to that by `fixture_lines`):
`[nvidia-container-cli] path` and `environment` at the fixture nvidia-container-cli (legacy);
`root` at the fixture fake driver tree (auto and jit-cdi, which resolve to direct mode there);
`[nvidia-container-runtime.modes.cdi] spec-dirs` at the directory of a spec `nvdocker2 cdi
generate` wrote from the fake driver (cdi; v1.13.5's files have no such table, so it is added
with that one key); `root` at the fixture fake Tegra board and `mount-spec-path` at its
real-format CSV files (csv)."""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest
from cdispec import generate_spec
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver, build_fake_tegra

from nvdocker2.runtime.launcher import write_launchers

DATA = Path(__file__).parent.parent / "data" / "nvidia-config"
FIXTURE_CLI = Path(__file__).parent.parent / "fixtures" / "nvidia-container-cli"
MARKER = "configured by the test fixture nvidia-container-cli for pid "
# One file of each content: identical releases start the same container.
FILES = sorted({p.read_bytes(): p for p in sorted(DATA.glob("*.toml"), reverse=True)
                if "ubuntu" not in p.name}.values())  # ubuntu's ldconfig.real: not on Debian
NVIDIA_SPEC_DIRS = 'spec-dirs = ["/etc/cdi", "/var/run/cdi"]'
NVIDIA_MOUNT_SPECS = 'mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"'
NVIDIA_ROOT = '#root = "/run/nvidia/driver"'
CDI_TABLE = "[nvidia-container-runtime.modes.cdi]"
# What each mode is asked for: a CDI name in cdi mode, the one GPU of the board in csv.
REQUEST = {"cdi": "nvidia.com/gpu=1", "csv": "all"}
GPU_PROBE = ("cat /nvidia-marker 2>/dev/null || echo no-marker;"
             " echo gpu-nodes: $(find /dev -maxdepth 1 -type c -name 'nvidia[0-9]*' | sort);"
             f" [ -e {LIB64_DIR}/libcuda.so.{DRIVER_VERSION} ] && echo libcuda || echo no-libcuda")


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
    driver = build_fake_driver(root / "driver")
    spec_dir = root / "cdi"
    generate_spec(driver.root, root / "bin" / "nvidia-container-runtime", spec_dir / "nvidia.yaml")
    return {"root": root, "cli": cli, "driver": driver, "wrapper": wrapper,
            "spec_dir": spec_dir, "tegra": build_fake_tegra(root / "tegra")}


def nvidia_file_for_test(text: str, mode: str, s: dict) -> str:
    """NVIDIA's file with `mode` and the fixture lines; every other byte as NVIDIA wrote it."""
    out = text.replace('mode = "auto"', f'mode = "{mode}"', 1)
    assert out.count(f'mode = "{mode}"') == 1
    if mode == "legacy":
        out = out.replace("environment = []", f'environment = ["FIXTURE_RECORD_DIR={s["root"]}'
                          f'/record"]\npath = "{s["cli"]}"', 1)
    elif mode == "cdi":
        ours = f'spec-dirs = ["{s["spec_dir"]}"]'
        out = (out.replace(NVIDIA_SPEC_DIRS, ours, 1) if CDI_TABLE in out
               else f"{out}\n{CDI_TABLE}\n{ours}\n")
    elif mode == "csv":
        out = out.replace(NVIDIA_ROOT, f'root = "{s["tegra"].root}"', 1)
        out = out.replace(NVIDIA_MOUNT_SPECS, f'mount-spec-path = "{s["tegra"].spec_dir}"', 1)
    else:
        out = out.replace(NVIDIA_ROOT, f'root = "{s["driver"].root}"', 1)
    return out


def fixture_lines(nvidia: str, ours: str, mode: str, s: dict) -> list[str]:
    """The lines `ours` has that NVIDIA's file has not, but for the mode line: each must point
    at a test fixture (or be the cdi table v1.13.5 lacks)."""
    added = [line[2:] for line in difflib.ndiff(nvidia.splitlines(), ours.splitlines())
             if line.startswith("+ ") and line[2:].strip() not in ("", f'mode = "{mode}"')]
    assert all(str(s["root"]) in line or line == CDI_TABLE for line in added), added
    return added


def csv_probe(tegra) -> tuple[str, list[str]]:
    """A script listing what the CSV files name, and what it prints when each is there: the
    nodes (character devices), the libraries (regular files), the links (with their target)
    and the folders."""
    checks = ([(f"[ -c {n} ]", f"dev {n}") for n in tegra.nodes]
              + [(f"[ -f {f} ] && [ ! -L {f} ]", f"lib {f}") for f in tegra.files]
              + [(f'[ -L {link} ] && [ "$(readlink {link})" = {target} ]', f"sym {link}")
                 for link, target in tegra.links]
              + [(f"[ -d {d} ]", f"dir {d}") for d in tegra.folders])
    script = "; ".join(f"{test} && echo '{said}' || echo 'missing {said}'"
                       for test, said in checks)
    # every entry, /etc/vulkan/icd.d's link too: the busybox image has no /etc/vulkan, and the
    # hook makes that folder as NVIDIA's create-symlinks hook does
    return script, [said for _, said in checks]


@pytest.mark.parametrize("mode", ["auto", "legacy", "cdi", "jit-cdi", "csv"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_gpu_container_starts_on_nvidias_config_toml(dockerd, setup, path, mode):
    nvidia = path.read_text()
    ours = nvidia_file_for_test(nvidia, mode, setup)
    assert fixture_lines(nvidia, ours, mode, setup)
    (setup["root"] / "config.toml").write_text(ours)
    for f in (setup["root"] / "record").iterdir():
        f.unlink()
    dockerd.config_file.write_text(json.dumps(
        {"runtimes": {"nvidia": {"path": str(setup["wrapper"])}}}))
    dockerd.sighup()
    dockerd.wait_info(lambda i: "nvidia" in i.get("Runtimes", {}))
    script, expected = (csv_probe(setup["tegra"]) if mode == "csv" else (GPU_PROBE, None))
    proc = dockerd.docker("run", "--rm", "--network=none", "--runtime=nvidia", "-e",
                          f"NVIDIA_VISIBLE_DEVICES={REQUEST.get(mode, '0')}", dockerd.image,
                          "sh", "-c", script, timeout=120)
    lines = proc.stdout.splitlines()
    if mode == "legacy":  # the fixture cli configured it; no driver node from direct mode
        assert lines[0].startswith(MARKER) and lines[1:] == ["gpu-nodes:", "no-libcuda"]
    elif mode == "cdi":  # the spec's device nvidia.com/gpu=1: its node alone, and the driver
        assert lines == ["no-marker", "gpu-nodes: /dev/nvidia1", "libcuda"]
    elif mode == "csv":  # every entry of the board's CSV files, as its type says
        assert lines == expected
    else:  # direct mode from the fake driver: the node and the library, no cli
        assert lines == ["no-marker", "gpu-nodes: /dev/nvidia0", "libcuda"]
