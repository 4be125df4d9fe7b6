"""The package takeover from NVIDIA's packages (tests/packaging/takeover.py) on Debian 13 and
sid, whose dpkg and apt are newer than Debian 12's (tests/packaging/test_takeover.py): each
case in a fresh tree of the suite (trees.py) without our .deb, then our .deb over the
stand-ins and our upgrade over ours, as on Debian 12.

The upgrade .deb (version pkgtest.UPGRADE_VERSION): NVDOCKER2_DEB_UPGRADE when set, else
`make deb DEB_VERSION=...` once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trees
from pkgtest import REPO, UPGRADE_VERSION
from takeover import take_over


@pytest.fixture(scope="session")
def deb_upgrade(deb, tmp_path_factory) -> Path:
    given = os.environ.get("NVDOCKER2_DEB_UPGRADE")
    if given:
        if not Path(given).is_file():
            trees.unavailable(f"NVDOCKER2_DEB_UPGRADE={given}: no such file")
        return Path(given)
    dist = tmp_path_factory.mktemp("dist-upgrade")
    proc = trees._run(["make", "-C", str(REPO), "deb", f"DEB_VERSION={UPGRADE_VERSION}",
                       f"DIST={dist}"], timeout=900)
    assert proc.returncode == 0, f"make deb failed:\n{proc.stdout}\n{proc.stderr}"
    return dist / f"nvdocker2_{UPGRADE_VERSION}_all.deb"


@pytest.mark.parametrize("generated", [False, True], ids=["conffile", "postinst-written"])
@pytest.mark.parametrize("suite", [n for n in trees.SUITES if n != "bookworm"])
def test_our_deb_replaces_nvidias_packages_and_keeps_the_admins_config_toml(
        suite, deb, deb_upgrade, tmp_path, generated):
    tree = trees.open_tree(suite)  # a suite not selected is deselected (conftest.py)
    try:
        take_over(tree, deb, deb_upgrade, tmp_path, generated)
    finally:
        tree.close()
