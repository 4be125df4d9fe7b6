"""The runtime's CDI mode through the session's private dockerd (`--runtime=nvidia`): a spec
that `nvdocker2 cdi generate` wrote for the fake driver, in a spec directory config.toml's
`spec-dirs` names, gives exactly the device a CDI name asks for; an unknown name is refused
before the container starts. (dockerd 20.10 has no `--annotation`: annotations are tested
through `create` on a bundle, tests/unit/runtime/test_cdi.py, and through Docker 26.1 and 28.5
in the platform matrix, tests/platforms/test_runtime_cdi_platform.py.)"""

from __future__ import annotations

import json

import pytest
from cdispec import generate_spec
from fixtures.fake_driver import build_fake_driver

from nvdocker2.runtime.launcher import write_launchers


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime-cdi")
    (root / "bin").mkdir()
    write_launchers(str(root / "bin"))
    driver = build_fake_driver(root / "driver")
    spec_dir = root / "cdi"
    generate_spec(driver.root, root / "bin" / "nvidia-container-runtime", spec_dir / "nvidia.yaml")
    (root / "config.toml").write_text(
        '[nvidia-container-runtime]\nmode = "cdi"\n'
        f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{root}/none", "{spec_dir}"]\n')
    wrapper = root / "nvidia-runtime"
    wrapper.write_text(f'#!/bin/sh\nNVIDIA_CONTAINER_RUNTIME_CONFIG={root}/config.toml'
                       f' exec {root}/bin/nvidia-container-runtime "$@"\n')
    wrapper.chmod(0o755)
    return {"root": root, "wrapper": wrapper, "spec_dir": spec_dir}


@pytest.fixture
def nvidia(dockerd, setup):
    dockerd.config_file.write_text(json.dumps(
        {"runtimes": {"nvidia": {"path": str(setup["wrapper"])}}}))
    dockerd.sighup()
    dockerd.wait_info(lambda i: "nvidia" in i.get("Runtimes", {}))
    return dockerd


def test_a_cdi_name_gives_exactly_its_gpu(nvidia):
    proc = nvidia.docker("run", "--rm", "--network=none", "--runtime=nvidia", "-e",
                         "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1", nvidia.image, "sh", "-c",
                         "ls /dev | grep -E '^nvidia[0-9]+$'; echo $NVIDIA_VISIBLE_DEVICES",
                         timeout=120)
    assert proc.stdout.splitlines() == ["nvidia1", "void"]


def test_an_unknown_cdi_name_is_refused_before_the_container_starts(nvidia, setup):
    proc = nvidia.docker("run", "--rm", "--network=none", "--runtime=nvidia", "-e",
                         "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9", nvidia.image, "echo", "ran",
                         timeout=120, check=False)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert (f"unresolvable CDI device 'nvidia.com/gpu=9' (NVIDIA_VISIBLE_DEVICES): no CDI spec"
            f" in {setup['root']}/none, {setup['spec_dir']} defines it") in proc.stderr
