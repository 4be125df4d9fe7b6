"""Helpers for the dockerd unit tests (test_dockerd_*.py build their fixtures from them)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class NamedDockerd:
    """A real process whose /proc/PID/comm is "dockerd" (a symlink to this Python), counting
    the SIGHUPs it gets in `hups`. Stands for a dockerd only where its name and pid matter."""

    def __init__(self, tmp_path: Path, stderr=None) -> None:
        self.hups = tmp_path / "hups"
        link = tmp_path / "dockerd"
        link.symlink_to(os.path.realpath(sys.executable))
        code = (
            "import signal, sys, time\n"
            "signal.signal(signal.SIGHUP, lambda *a: open(sys.argv[1], 'a').write('hup\\n'))\n"
            "print('ready', flush=True)\n"
            "while True: time.sleep(1)\n"
        )
        self.proc = subprocess.Popen(
            [str(link), "-c", code, str(self.hups)], stdout=subprocess.PIPE, stderr=stderr
        )
        assert self.proc.stdout.readline() == b"ready\n"
        self.pid = self.proc.pid
        self.pidfile = tmp_path / "docker.pid"
        self.pidfile.write_text(f"{self.pid}\n")

    def hup_count(self, wait: float = 0.0) -> int:
        deadline = time.monotonic() + wait
        while True:
            count = len(self.hups.read_text().splitlines()) if self.hups.exists() else 0
            if count or time.monotonic() >= deadline:
                return count
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextlib.contextmanager
def running_engine(tmp_path: Path) -> Iterator:
    """A FakeEngine serving on tmp_path/api.sock for the duration of the block."""
    from .fake_engine import FakeEngine

    fake = FakeEngine(tmp_path / "api.sock").start()
    try:
        yield fake
    finally:
        fake.stop()


@contextlib.contextmanager
def named_dockerd_in(tmp_path: Path) -> Iterator[NamedDockerd]:
    d = NamedDockerd(tmp_path)
    try:
        yield d
    finally:
        d.stop()
