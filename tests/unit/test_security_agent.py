"""The agent runs as root on every node: what an unprivileged local user can do to it.

- Programs on PATH and an ldconfig that does not name libc (NixOS, musl): starting the
  watcher binds libc without running any program (ctypes.util.find_library ran
  /sbin/ldconfig, then gcc, cc, ld and objdump from PATH).
- `nobody` opening many idle connections to /healthz: the agent still installs, answers a
  real probe, and uninstalls on SIGTERM (each idle connection held a descriptor and a thread
  for ever, so at systemd's 1024 descriptors install could not start).

Runs as root (the suite's unit tests do); `nobody` is a real user on the other side.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agent_proc import AgentProc  # noqa: E402

PLANTED = ("ldconfig", "gcc", "cc", "ld", "objdump")


def _need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("prerequisite missing under CI: root (mount namespaces, nobody)")
        pytest.skip("needs root")


def _plant(bindir: Path, marker: Path) -> None:
    """Programs that say nothing useful and leave a line in `marker` when run."""
    bindir.mkdir()
    for name in PLANTED:
        p = bindir / name
        p.write_text(f'#!/bin/sh\necho "{name} $*" >> {marker}\n')
        p.chmod(0o755)
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(bindir, nobody, nobody)


def test_starting_the_watcher_runs_no_program(tmp_path):
    """In a mount namespace of its own, /sbin/ldconfig is one that names no library, and
    gcc, cc, ld and objdump of nobody's come first on PATH: the watcher still gets inotify
    and none of them runs."""
    _need_root()
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) missing")
    bindir, marker = tmp_path / "bin", tmp_path / "ran"
    _plant(bindir, marker)
    (tmp_path / "etc").mkdir()
    cfg = tmp_path / "etc" / "daemon.json"
    cfg.write_bytes(b"{}\n")
    code = ("from pathlib import Path; from nvdocker2.agent.watch import Watcher; "
            f"w = Watcher(Path({str(cfg)!r}), 5.0); print(w.how); w.close()")
    script = 'mount --bind "$1" /sbin/ldconfig && shift && exec "$@"'
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-ec", script, "sh",
         str(bindir / "ldconfig"), sys.executable, "-I", "-c", code],
        env={"PATH": f"{bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("inotify on "), p.stdout + p.stderr
    assert not marker.exists(), marker.read_text()
