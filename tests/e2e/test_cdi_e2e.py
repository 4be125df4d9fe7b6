"""CDI mode end to end (reference §9) on this machine's own dockerd: Docker 20.10 has no CDI, so
`install --mode cdi` is refused before anything is written. CDI mode on Docker 26.1 and 28.5
runs in the Debian 13 and sid trees (test_cdi_trees_e2e.py)."""

from __future__ import annotations

from dockerd_cli import RUNTIME, nvdocker2


def test_docker_20_10_refuses_cdi_mode_with_exit_2_and_writes_nothing(dockerd, tmp_path):
    version = dockerd.info()["ServerVersion"]
    assert version.startswith("20.10.")
    before = dockerd.config_file.read_bytes()
    spec_dir = tmp_path / "cdi"
    out = nvdocker2(dockerd, "install", "--mode", "cdi", "--runtime-path", RUNTIME,
                    "--allow-missing-runtime", "--cdi-spec-dir", str(spec_dir))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: CDI mode needs Docker 25.0 or later; this dockerd is {version} (from /info)",
        "hint: CDI works on Docker 25.0 to 28.1 (with features.cdi, which install sets) or 28.2 "
        "and later; on this Docker use the runtime: nvdocker2 install (without --mode cdi)",
    ]
    assert out.stdout == ""
    assert dockerd.config_file.read_bytes() == before
    assert not spec_dir.exists()
    assert not dockerd.info().get("CDISpecDirs")
