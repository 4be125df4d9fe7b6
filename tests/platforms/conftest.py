"""Fixtures of the platform matrix (see trees.py for the trees and their daemons).

Which platforms: NVDOCKER2_PLATFORMS, comma-separated suite names (default: all of
trees.SUITES). The .deb: NVDOCKER2_DEB when set (`make matrix` builds it once for every
platform), else `make deb` once per session.

    platform       the suite name of the current parameter ("bookworm", "trixie", "sid")
    deb            Path of the .deb under test
    tree           a fresh tree of that suite, session scope (one per platform), closed at
                   the end
    tree_with_deb  the same tree with the .deb installed (daemon.json left alone)
    tree_dockerd   the tree's dockerd, started on tree_with_deb, stopped after the module
                   (every daemon a module starts in the tree is stopped after it)

A tree that cannot be built or a dockerd that cannot start fails under CI=true with one line
naming the platform and the reason, and skips otherwise; it is never silently skipped in CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import trees  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_open_trees: list[trees.Tree] = []


def selected_platforms() -> list[str]:
    raw = os.environ.get("NVDOCKER2_PLATFORMS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(trees.SUITES)
    unknown = [n for n in names if n not in trees.SUITES]
    if unknown:
        raise pytest.UsageError(
            f"NVDOCKER2_PLATFORMS: unknown suite {', '.join(unknown)} "
            f"(known: {', '.join(trees.SUITES)})")
    return names


def pytest_collection_modifyitems(config, items):
    """Mark the platform tests; deselect those written for one suite (a fixture named after it,
    as the CDI tests' `sid` and `trixie`, or a `suite` fixture parameter, as the Podman tests')
    when that suite is not selected, so a run of one platform (`make matrix` runs each alone)
    neither runs nor skips another's tests."""
    here = Path(__file__).parent
    chosen = set(selected_platforms())
    keep, drop = [], []
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.platforms)
        bound = set(getattr(item, "fixturenames", ())) & set(trees.SUITES)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "suite" in callspec.params:
            bound.add(callspec.params["suite"])
        (drop if bound - chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "platforms: runs in Debian trees with their own dockerd (root, network once)")


def pytest_generate_tests(metafunc):
    if "platform" in metafunc.fixturenames:
        metafunc.parametrize("platform", selected_platforms(), scope="session")


@pytest.fixture(scope="module", autouse=True)
def _daemons_stop_with_their_module():
    """A tree is shared by the modules of a session; each module's daemons stop with it, so
    the next module can start the tree's dockerd on the same default socket and pidfile."""
    yield
    for made in _open_trees:
        made.stop_daemons()


@pytest.fixture(scope="session")
def deb(tmp_path_factory) -> Path:
    given = os.environ.get("NVDOCKER2_DEB")
    if given:
        if not Path(given).is_file():
            trees.unavailable(f"NVDOCKER2_DEB={given}: no such file")
        return Path(given)
    if os.geteuid() != 0:
        trees.unavailable("the platform matrix needs root (make deb, chroot, dockerd)")
    from nvdocker2 import __version__

    dist = tmp_path_factory.mktemp("dist")
    proc = trees._run(["make", "-C", str(REPO), "deb", f"DIST={dist}"], timeout=900)
    assert proc.returncode == 0, f"make deb failed:\n{proc.stdout}\n{proc.stderr}"
    return dist / f"nvdocker2_{__version__}_all.deb"


@pytest.fixture(scope="session")
def tree(platform):
    made = trees.open_tree(platform)
    _open_trees.append(made)
    try:
        yield made
    finally:
        _open_trees.remove(made)
        made.close()


@pytest.fixture(scope="session")
def tree_with_deb(tree, deb):
    tree.install_deb(deb, env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
    return tree


@pytest.fixture(scope="module")
def tree_dockerd(tree_with_deb):
    daemon = trees.start_dockerd(tree_with_deb)
    yield daemon
    daemon.stop()
