"""What an end-to-end test does when something it needs is missing: skip, or fail under
CI=true (CI installs everything through scripts/test.sh, so a missing piece is a failure)."""

from __future__ import annotations

import os

import pytest


def require(what: str, missing: list[str]) -> None:
    """Skip, or fail under CI=true, when `missing` names anything `what` needs."""
    if not missing:
        return
    message = f"{what} needs: " + ", ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (run bash scripts/test.sh as root)", pytrace=False)
    pytest.skip(message)
