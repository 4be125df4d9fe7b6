"""A `nvdocker2 agent` started as its own process on real files, for the agent's tests: its
stderr (the event lines) is kept in a file; it is signalled and waited for by pid."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# The daemon.json of the agent tests' host root (agent/conftest.py): a non-runc default set
# before, odd spacing and a key order install must keep.
ORIGINAL = (b'{\n    "log-level":   "warn",\n    "default-runtime": "crun",\n'
            b'    "runtimes": {"crun": {"path": "/usr/bin/crun"}}\n}\n')


class AgentProc:
    def __init__(self, args: list[str], log: Path, env: dict | None = None,
                 nofile: int | None = None) -> None:
        """The agent leads a process group of its own, as in a terminal (see `stop`); with
        `nofile`, it may open that many descriptors (systemd's default is 1024)."""
        self.log = log
        self._err = open(log, "ab")

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.p = subprocess.Popen([sys.executable, "-m", "nvdocker2", "agent", *args],
                                  stdout=subprocess.DEVNULL, stderr=self._err,
                                  env=dict(os.environ, **(env or {})),
                                  start_new_session=True,
                                  preexec_fn=None if nofile is None else limit)

    @property
    def port(self) -> int:
        """The /healthz port the agent said it serves."""
        m = re.search(r"http://127\.0\.0\.1:(\d+)", self.wait_for("/healthz on"))
        assert m
        return int(m.group(1))

    @property
    def pid(self) -> int:
        return self.p.pid

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def events(self, word: str) -> list[str]:
        return [line for line in self.lines() if word in line]

    def wait_for(self, word: str, timeout: float = 60, count: int = 1) -> str:
        """The `count`th log line containing `word`, once it is there."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = self.events(word)
            if len(found) >= count:
                return found[count - 1]
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {count}x {word!r} in the agent's log:\n"
                             + "\n".join(self.lines()))

    def healthz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def children(self) -> list[int]:
        """Processes whose parent is the agent (an install or uninstall in progress)."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.pid:
                out.append(int(d))
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60, group: bool = False) -> int:
        """Send `sig` (with `group`, to the agent's whole process group, as a terminal's Ctrl-C
        does), wait; the exit code."""
        if self.p.poll() is None:
            (os.killpg if group else os.kill)(self.pid, sig)
        try:
            return self.p.wait(timeout)
        finally:
            self._err.close()

    def kill_all(self) -> None:
        """SIGKILL the agent and its child at once, as `docker kill` ends a container."""
        kids = self.children()
        os.kill(self.pid, signal.SIGKILL)
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait(30)
        self._err.close()
