"""Ctrl-C at each step of a change, with real signals to a real nvdocker2 process paused by the
test hook NVDOCKER2_TEST_PAUSE_AT: the message says exactly what the file holds, and a second
Ctrl-C during the restore waits until the previous bytes are back."""

from __future__ import annotations

import os
import select
import signal
import subprocess

from nvdocker2.store.backups import Backups

from .conftest import NVDOCKER2

RT = "/usr/bin/nvidia-container-runtime"
ORIGINAL = b'{\n    "debug": true\n}\n'


def _as_at_a_terminal() -> None:
    """SIGINT back to its default in the child, so that Python turns it into KeyboardInterrupt
    as at a terminal: a test run started in the background of a shell inherits SIGINT ignored,
    and a Ctrl-C sent by the test would then do nothing (and the test wait for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _paused(cfg, steps: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(NVDOCKER2), "install", "--config", str(cfg), "--reload", "none", "--no-verify",
         "--runtime-path", RT, "--allow-missing-runtime"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, NVDOCKER2_TEST_PAUSE_AT=steps), preexec_fn=_as_at_a_terminal,
    )


def _wait_for(p: subprocess.Popen, step: str) -> None:
    ready, _, _ = select.select([p.stderr], [], [], 60)
    if not ready:  # never wait for ever: say where it stood
        p.kill()
        raise AssertionError(f"nvdocker2 did not pause at {step} within 60 s")
    line = p.stderr.readline()
    assert line == f"nvdocker2: test hook: paused at {step}\n", line


def test_ctrl_c_before_the_write_says_the_file_is_unchanged(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    p = _paused(cfg, "before-write")
    _wait_for(p, "before-write")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert err.splitlines()[-1] == (f"error: interrupted; {cfg} is unchanged: interrupted "
                                    "before writing")
    assert cfg.read_bytes() == ORIGINAL


def test_a_second_ctrl_c_during_the_restore_waits_until_the_previous_bytes_are_back(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    p = _paused(cfg, "after-write,restore")
    _wait_for(p, "after-write")
    assert cfg.read_bytes() != ORIGINAL  # the new bytes are in place
    p.send_signal(signal.SIGINT)
    _wait_for(p, "restore")
    p.send_signal(signal.SIGINT)  # deferred: the restore goes on
    _, err = p.communicate("\n", timeout=60)
    assert p.returncode == 1, err
    assert cfg.read_bytes() == ORIGINAL
    backup = Backups(tmp_path / "state").all()[0]
    assert err.splitlines()[-1] == (
        f"error: interrupted; {cfg}: restored the previous bytes (backup {backup.id})")
    assert "Traceback" not in err
