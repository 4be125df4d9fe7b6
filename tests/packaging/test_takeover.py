"""The .deb takes a host over from NVIDIA's packages, in the packaging tests' Debian 12
chroot (the check and its stand-in packages: tests/packaging/takeover.py)."""

from __future__ import annotations

import pytest
from takeover import take_over


@pytest.mark.parametrize("generated", [False, True], ids=["conffile", "postinst-written"])
def test_our_deb_replaces_nvidias_packages_and_keeps_the_admins_config_toml(
        packages, chroot, tmp_path, generated):
    take_over(chroot, packages.deb, packages.deb_upgrade, tmp_path, generated)
