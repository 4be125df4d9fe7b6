"""Fixtures of the agent's tests."""

from __future__ import annotations

import pytest

from ..agent_proc import ORIGINAL


@pytest.fixture
def host(tmp_path):
    """A host root with /etc/docker/daemon.json holding ORIGINAL (test_toolkit.py overrides
    it with a node root that also has a Python)."""
    root = tmp_path / "host"
    (root / "etc" / "docker").mkdir(parents=True)
    root.chmod(0o755)
    cfg = root / "etc" / "docker" / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    return root
