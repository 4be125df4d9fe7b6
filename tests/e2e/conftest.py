"""Fixtures for end-to-end tests on a private dockerd (see privatedockerd.py).

Without root, dockerd, containerd, runc or busybox-static these tests skip, except under
CI=true, where a missing prerequisite is a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from prereq import require  # noqa: E402
from privatedockerd import PrivateDockerd, missing_prerequisites, remove_rootfs_tar  # noqa: E402


def _require_prerequisites() -> None:
    require("private dockerd", missing_prerequisites())


def pytest_sessionfinish(session, exitstatus):
    remove_rootfs_tar()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def e2e_prerequisites():
    """Skip (fail under CI=true) when a private dockerd cannot run here; for module fixtures
    that start their own daemon."""
    _require_prerequisites()


@pytest.fixture(scope="session")
def podman_prerequisites():
    """Skip (fail under CI=true) when a private Podman cannot run here (privatepodman.py)."""
    import privatepodman

    require("private podman", privatepodman.missing_prerequisites())


@pytest.fixture(scope="session")
def private_dockerd():
    """One private dockerd for the whole test session."""
    _require_prerequisites()
    daemon = PrivateDockerd()
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


@pytest.fixture
def dockerd(private_dockerd):
    """The session's private dockerd, reset to a fresh state before the test."""
    private_dockerd.reset()
    yield private_dockerd


@pytest.fixture
def make_dockerd():
    """Start extra private daemons with their own flags, config or PATH; stopped after."""
    _require_prerequisites()
    started: list[PrivateDockerd] = []

    def make(extra_args=(), config: bytes = b"{}\n", env=None, path_prepend=(), start=True):
        daemon = PrivateDockerd(extra_args, config=config, env=env, path_prepend=path_prepend)
        started.append(daemon)
        if start:
            daemon.start()
        return daemon

    yield make
    for daemon in started:
        daemon.cleanup()
