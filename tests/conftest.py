"""Fixtures every test gets: no test ever reads or writes the host's nvdocker2 state or talks
to the host's dockerd by accident."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).parent / "unit"


def pytest_addoption(parser):
    parser.addoption(
        "--shard", metavar="I/N", default=None,
        help="run only the I-th of N equal shares of the collected tests (0 <= I < N), dealt "
             "in collection order: `make check` runs N of these side by side")


def _shard(value: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {value!r}: expected I/N, like 0/2") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"--shard {value!r}: I must be at least 0 and below N")
    return index, count


def pytest_collection_modifyitems(config, items):
    """Mark tests/unit's tests `unit` (scripts/test.sh leaves out of its last run what
    `make check` ran, by `-m "not unit or slow"`); with --shard keep one share of them."""
    for item in items:
        if UNIT in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)
    value = config.getoption("--shard")
    if value is None:
        return
    index, count = _shard(value)
    kept = [item for n, item in enumerate(items) if n % count == index]
    config.hook.pytest_deselected(items=[item for n, item in enumerate(items)
                                         if n % count != index])
    items[:] = kept


def pytest_configure(config):
    """The tests drive stand-ins and fault hooks through variables that nvdocker2 reads only
    under the test suite's switch (nvdocker2/host/testing.py): without it they would test
    nothing, so say how to get it."""
    from nvdocker2.host import run

    if not run.hooks_on():
        sys.stderr.write(
            f"warning: no test switch at {sys.prefix}/{run.HOOKS_SWITCH}: the test hooks are off "
            "(run the tests from the venv scripts/setup.sh tests makes)\n")


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", raising=False)
    monkeypatch.delenv("NVDOCKER2_DEBUG", raising=False)
