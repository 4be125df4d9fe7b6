"""Fixtures of the doctor's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_checks import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    """A healthy fake host root (test_checks.py's FakeHost) in tmp_path/root."""
    return FakeHost(tmp_path / "root")
