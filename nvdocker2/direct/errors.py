"""The one error of direct mode.

Direct mode runs inside `nvidia-container-runtime create` on every container start, so it is
stdlib-only and does not use the installer's error classes; the runtime turns a `DirectError`
into its one `error:` line (and `hint:` line) and a non-zero exit before anything is written.
"""

from __future__ import annotations


class DirectError(Exception):
    """Direct mode cannot give the container what it asked for; nothing was changed."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
