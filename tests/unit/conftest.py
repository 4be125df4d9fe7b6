"""Fixtures the tests of several folders share (each folder's conftest.py has its own)."""

from __future__ import annotations

import pytest
from fixtures.fake_driver import build_fake_driver


@pytest.fixture
def driver(tmp_path):
    """The TEST FIXTURE fake driver tree (tests/fixtures/fake_driver.py) in tmp_path/driver;
    a test module that needs more devices overrides it, starting from this one."""
    return build_fake_driver(tmp_path / "driver")
