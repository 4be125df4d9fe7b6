"""Fixtures of dockerd's tests: a fake Engine API, a dockerd of a name and pidfile."""

from __future__ import annotations

import pytest

from ....dockerd_fixtures import named_dockerd_in, running_engine


@pytest.fixture
def engine(tmp_path):
    """The TEST FIXTURE FakeEngine answering on a unix socket in tmp_path."""
    with running_engine(tmp_path) as fake:
        yield fake


@pytest.fixture
def named_dockerd(tmp_path):
    """A process named dockerd with its pidfile, stopped afterwards."""
    with named_dockerd_in(tmp_path) as d:
        yield d
