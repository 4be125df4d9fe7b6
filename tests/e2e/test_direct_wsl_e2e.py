"""Direct mode on WSL2 end to end: a private dockerd whose `nvidia` runtime runs in
`mode = "direct"` with the driver root at the TEST FIXTURE fake WSL2 tree
(tests/fixtures/fake_driver.py `build_fake_wsl`: a real /dev/dxg node made with mknod, 10:63,
tiny ELF libraries in /usr/lib/wsl/lib and a fake driver store). No nvidia-container-cli."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import WSL_STORE, build_fake_wsl
from privatedockerd import PrivateDockerd

from nvdocker2.runtime.launcher import write_launchers


@pytest.fixture(scope="module")
def wsl(tmp_path_factory, e2e_prerequisites):
    root = tmp_path_factory.mktemp("wsl")
    fake = build_fake_wsl(root / "driver")
    (root / "bin").mkdir()
    write_launchers(str(root / "bin"))
    toml = root / "config.toml"
    toml.write_text(f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{fake.root}"\n'
                    '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(toml))
    config = {"runtimes": {"nvidia": {"path": str(root / "bin/nvidia-container-runtime")}}}
    daemon = PrivateDockerd(config=json.dumps(config).encode(), env=env)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


def _run(daemon, env, script, check=True):
    return daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", "-e", env,
                         daemon.image, "sh", "-c", script, check=check, timeout=120)


def test_all_gives_dxg_the_driver_store_and_libcuda_in_the_ld_cache(wsl):
    out = _run(wsl, "NVIDIA_VISIBLE_DEVICES=all",
               "stat -c '%F %t:%T' /dev/dxg; ls /usr/lib/wsl/lib;"
               " if [ -d /usr/bin ]; then readlink /usr/bin/nvidia-smi; else echo no /usr/bin; fi;"
               f" ls {WSL_STORE}/libcuda.so.1.1;"
               " tr '\\0' '\\n' < /etc/ld.so.cache | grep -E 'lib(cuda|dxcore)[.]so([.]1)?$'"
               ).stdout.splitlines()
    assert out[0] == "character special file a:3f"
    assert out[1] == "libdxcore.so"
    # The link is made where the image has /usr/bin (the test image may not: it starts anyway).
    assert out[2] in (f"{WSL_STORE}/nvidia-smi", "no /usr/bin")
    assert out[3] == f"{WSL_STORE}/libcuda.so.1.1"
    assert sorted(out[4:]) == [f"{WSL_STORE}/libcuda.so.1", "/usr/lib/wsl/lib/libdxcore.so"]


def test_a_gpu_index_fails_docker_run_with_the_message(wsl):
    proc = _run(wsl, "NVIDIA_VISIBLE_DEVICES=0", "true", check=False)
    assert proc.returncode != 0
    assert "GPU '0' cannot be chosen on WSL2" in proc.stderr
