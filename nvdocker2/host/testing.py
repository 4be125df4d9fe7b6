"""The test suite's switch: whether test-only hooks (fault injection, the stand-ins' knobs)
may be read from the environment at all.

The switch is a file, `nvdocker2-test-hooks`, at the top of the virtual environment the
interpreter runs in (`sys.prefix`), owned by root or by us and writable by no one else;
`scripts/setup.sh tests` puts it in the test suite's own `.venv`. Nothing an operator's
environment carries can turn it on: no variable names it, sudo, postinst and Ansible cannot
pass it, and an interpreter outside a virtual environment (the Debian and RPM packages run
/usr/bin/python3) never looks. Off, every `NVDOCKER2_TEST_*` variable is ignored.
"""

from __future__ import annotations

import os
import sys

from nvdocker2.host.run import hooks_on

__all__ = ["hooks_on", "hook", "pause"]


def hook(name: str) -> str | None:
    """The test hook `name` from the environment; None unless the switch is on."""
    return os.environ.get(name) if hooks_on() else None


PAUSE_AT = "NVDOCKER2_TEST_PAUSE_AT"


def pause(step: str) -> None:
    """Test hook (fault-injection tests only): at `step`, when NVDOCKER2_TEST_PAUSE_AT lists it
    (comma-separated), say so on stderr and wait for a line on stdin, so that a test can
    signal the process at exactly this step and then let it go on."""
    wanted = hook(PAUSE_AT)
    if not wanted or step not in wanted.split(","):
        return
    sys.stderr.write(f"nvdocker2: test hook: paused at {step}\n")
    sys.stderr.flush()
    sys.stdin.readline()
