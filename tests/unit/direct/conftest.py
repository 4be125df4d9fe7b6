"""Fixtures of the direct mode tests."""

from __future__ import annotations

import pytest
from fixtures.fake_driver import make_bundle


@pytest.fixture
def bundle(tmp_path):
    """(bundle path, rootfs, spec) of a small bundle in tmp_path."""
    return make_bundle(tmp_path)
