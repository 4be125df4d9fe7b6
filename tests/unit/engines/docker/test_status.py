"""`status --engine docker --pidfile`: the dockerd it names is looked up only when it is really
one. The running dockerd is played by the TEST FIXTURE FakeEngine (tests/unit/fake_engine.py),
a real unix socket answering /info."""

from __future__ import annotations

import json
import os

from ...cli_run import cli
from ...fake_engine import FakeEngine

DAEMON_JSON = b'{\n    "runtimes": {}\n}\n'


def test_status_with_a_pidfile_naming_no_dockerd_reports_no_pid(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(DAEMON_JSON)
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # this test's python, not a dockerd
    fake = FakeEngine(tmp_path / "d.sock").start()
    try:
        code, out, err = cli("status", "--config", str(cfg), "--docker-host", fake.host,
                             "--pidfile", os.path.relpath(pidfile), "--json")
    finally:
        fake.stop()
    assert (code, err) == (0, "")
    dockerd = json.loads(out)["dockerd"]
    assert dockerd["reachable"] is True and dockerd["pid"] is None
    assert cfg.read_bytes() == DAEMON_JSON
