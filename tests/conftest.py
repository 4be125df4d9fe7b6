"""Fixtures every test gets: no test ever reads or writes the host's nvdocker2 state or talks
to the host's dockerd by accident."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("NVDOCKER2_DEBUG", raising=False)
