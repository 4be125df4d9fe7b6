"""Fixtures of the packaging tests: the built packages, and throwaway Debian 12 chroots to
install them into for real, so this machine's /etc/docker, /usr/bin and dpkg database are never
touched.

The chroot is a debootstrap minbase of bookworm with Debian's python3 libraries, cached as a
tarball under /var/cache/nvdocker2-tests: the first run downloads it (about a minute), later
runs unpack it in seconds. Nothing is mounted inside it: no /proc, so nothing in it can see or
signal a dockerd of this machine. Select these tests with `-m packaging`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pkgtest import (
    CACHE,
    INCLUDE,
    MIRROR,
    RECIPE,
    REPO,
    SUITE,
    UPGRADE_VERSION,
    Chroot,
    bootstrap,
    missing,
    run,
)

from nvdocker2 import __version__


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "packaging: builds the .deb and .rpm and installs them in a chroot (root)"
    )


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.packaging)


@pytest.fixture(scope="session")
def root_user():
    if os.geteuid() != 0:
        missing("needs root (build dependencies, chroot)")


@dataclass(frozen=True)
class Packages:
    deb: Path
    deb_upgrade: Path
    rpm: Path
    rpm_upgrade: Path
    build_seconds: float
    checkout_before: str
    checkout_after: str


@pytest.fixture(scope="session")
def packages(root_user, tmp_path_factory) -> Packages:
    """`make deb` and `make rpm`, each also at version …+pkgtest1, into a temporary dist."""
    dist = tmp_path_factory.mktemp("dist")
    status = ["git", "-C", str(REPO), "status", "--porcelain", "--ignored"]
    before = run(status).stdout
    started = time.monotonic()
    builds = (
        ["deb"],
        ["deb", f"DEB_VERSION={UPGRADE_VERSION}"],
        ["rpm"],
        ["rpm", f"RPM_VERSION={UPGRADE_VERSION}"],
    )
    for args in builds:
        proc = run(["make", "-C", str(REPO), *args, f"DIST={dist}"])
        assert proc.returncode == 0, f"make {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    built = Packages(
        deb=dist / f"nvdocker2_{__version__}_all.deb",
        deb_upgrade=dist / f"nvdocker2_{UPGRADE_VERSION}_all.deb",
        rpm=next(dist.glob(f"nvdocker2-{__version__}-*.noarch.rpm")),
        rpm_upgrade=next(dist.glob(f"nvdocker2-{UPGRADE_VERSION}-*.noarch.rpm")),
        build_seconds=time.monotonic() - started,
        checkout_before=before,
        checkout_after=run(status).stdout,
    )
    for path in (built.deb, built.deb_upgrade, built.rpm, built.rpm_upgrade):
        assert path.is_file(), f"{path} was not built"
    return built


@pytest.fixture(scope="session")
def chroot_tarball(root_user) -> Path:
    key = hashlib.sha256(" ".join([RECIPE, SUITE, MIRROR, *INCLUDE]).encode()).hexdigest()[:12]
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{SUITE}-minbase-{key}.tar"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.is_file():
            bootstrap(tarball)
        # Tarballs of an older recipe or include list are never used again.
        for stale in CACHE.glob(f"{SUITE}-minbase-*.tar"):
            if stale != tarball:
                stale.unlink()
    return tarball


@pytest.fixture
def chroot(chroot_tarball, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "-xf", str(chroot_tarball)], check=True)
    yield Chroot(root)
    # Nothing is mounted in it; make sure before deleting the tree.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    assert not [m for m in mounts if m.startswith(str(root))], "something is mounted in the chroot"
    shutil.rmtree(root, ignore_errors=True)
