"""Fixtures of the hook's tests."""

from __future__ import annotations

import pytest

from ..hook_process import Hook


@pytest.fixture
def hook(tmp_path):
    """The hook as runc runs it, on a bundle in tmp_path (hook_process.Hook)."""
    return Hook(tmp_path)
