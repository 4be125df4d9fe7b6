"""Fixtures every test gets: no test ever reads or writes the host's nvdocker2 state or talks
to the host's dockerd by accident."""

from __future__ import annotations

import sys

import pytest


def pytest_configure(config):
    """The tests drive stand-ins and fault hooks through variables that nvdocker2 reads only
    under the test suite's switch (nvdocker2/host/testing.py): without it they would test
    nothing, so say how to get it."""
    from nvdocker2.host import testing

    if not testing.hooks_on():
        sys.stderr.write(
            f"warning: no test switch at {sys.prefix}/{testing.SWITCH}: the test hooks are off "
            "(run the tests from the venv scripts/setup.sh tests makes)\n")


def pytest_collection_modifyitems(items):
    """Every test under tests/unit is marked `unit`: scripts/test.sh's last run leaves out the
    ones `make check` has already passed (`-m "not unit or slow"`)."""
    for item in items:
        if "/tests/unit/" in str(item.fspath):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("NVDOCKER2_DEBUG", raising=False)
