"""How the test command splits the suite: `make check` runs tests/unit's tests not marked slow
in shares (`--shard I/N`, tests/conftest.py) and scripts/test.sh's last run takes the rest
(`-m "not unit or slow"`). Together they must be every test, each once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# A file with tests marked slow and not, and a parametrized one.
FILE = "tests/unit/agent/test_agent.py"


def _collect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         FILE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _ids(*args: str) -> list[str]:
    done = _collect(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith(FILE + "::")]


def test_the_shares_and_the_last_run_are_every_test_once():
    every = _ids()
    shares = [_ids("-m", "not slow", "--shard", f"{i}/3") for i in range(3)]
    rest = _ids("-m", "not unit or slow")
    assert rest and all(shares), (shares, rest)
    assert sorted(sum(shares, []) + rest) == sorted(every)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_a_shard_that_is_not_one_of_n_is_a_usage_error():
    for value in ("2/2", "-1/2", "1", "a/b"):
        done = _collect(f"--shard={value}")
        assert done.returncode == 4, (value, done.stdout, done.stderr)
        assert f"--shard {value!r}" in done.stderr, done.stderr
