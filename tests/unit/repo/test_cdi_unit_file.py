"""The boot-time unit both packages ship: it runs `nvdocker2 cdi refresh` once, before Docker."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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


DEVICES_UNIT = ROOT / "nvdocker2/data/nvdocker2-devices.service"
DEVICES_RULE = ROOT / "nvdocker2/data/70-nvdocker2-devices.rules"


def test_the_devices_unit_makes_nodes_then_links_before_the_spec_and_docker():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(DEVICES_UNIT.read_text())
    assert unit["Service"]["Type"] == "oneshot"
    lines = [line.split("=", 1)[1] for line in DEVICES_UNIT.read_text().splitlines()
             if line.startswith("ExecStart=")]
    assert lines == ["/usr/bin/nvdocker2 system create-device-nodes",
                     "/usr/bin/nvdocker2 system create-dev-char-symlinks"]
    before = unit["Unit"]["Before"].split()
    assert {"nvdocker2-cdi-refresh.service", "docker.service", "containerd.service"} <= set(
        before)
    assert "systemd-modules-load.service" in unit["Unit"]["After"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_devices_udev_rule_starts_the_unit_without_blocking_on_module_loads():
    rules = [line for line in DEVICES_RULE.read_text().splitlines()
             if line and not line.startswith("#")]
    assert rules == ['ACTION=="add", SUBSYSTEM=="module", '
                     'KERNEL=="nvidia|nvidia_uvm|nvidia_modeset", '
                     'RUN+="/bin/systemctl --no-block start nvdocker2-devices.service"']


def test_both_packages_install_the_devices_unit_and_rule():
    install = (ROOT / "debian/nvdocker2.install").read_text().splitlines()
    assert "nvdocker2/data/nvdocker2-devices.service lib/systemd/system/" in install
    assert "nvdocker2/data/70-nvdocker2-devices.rules lib/udev/rules.d/" in install
    files = (ROOT / "rpm/nvdocker2.spec").read_text().split("%files")[1]
    assert "/usr/lib/systemd/system/nvdocker2-devices.service" in files
    assert "/usr/lib/udev/rules.d/70-nvdocker2-devices.rules" in files
