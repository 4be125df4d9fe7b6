"""The boot-time unit both packages ship: it runs `nvdocker2 cdi refresh` once, before Docker."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "nvdocker2/data/nvdocker2-cdi-refresh.service"


def test_the_unit_refreshes_the_spec_once_before_docker_starts():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(UNIT.read_text())
    assert unit["Service"]["Type"] == "oneshot"
    assert unit["Service"]["ExecStart"] == "/usr/bin/nvdocker2 cdi refresh"
    assert "docker.service" in unit["Unit"]["Before"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_both_packages_install_the_unit():
    assert "nvdocker2/data/nvdocker2-cdi-refresh.service lib/systemd/system/" in (
        ROOT / "debian/nvdocker2.install").read_text().splitlines()
    spec = (ROOT / "rpm/nvdocker2.spec").read_text()
    assert "/usr/lib/systemd/system/nvdocker2-cdi-refresh.service" in spec.split("%files")[1]
