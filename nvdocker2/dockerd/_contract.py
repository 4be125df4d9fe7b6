"""Stand-in for the transaction's slot until nvdocker2.transaction lands (same shapes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Expectation:
    present: dict
    absent: tuple
    default_runtime: str


class VerifyFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
