"""Fixtures of the Docker engine's tests."""

from __future__ import annotations

import pytest

from ...dockerd_fixtures import running_engine
from .test_cdi import Host


@pytest.fixture
def host(tmp_path):
    """CDI mode's host: the fake driver tree and a fake Engine API (test_cdi.py's Host)."""
    with running_engine(tmp_path) as engine:
        yield Host(tmp_path, engine)
