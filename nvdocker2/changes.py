"""What a change does to one key or file (`Change`), and `ABSENT` for a key or file that is not
there (distinct from a JSON null or an empty file). Shared by every engine's edits and the
transaction, which knows nothing of their formats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _Absent:
    """Marks a key that is not in the file (distinct from a JSON null)."""

    _instance: "_Absent | None" = None

    def __new__(cls) -> "_Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Change:
    """One key changed by an edit. `before`/`after` are ABSENT when the key is/was missing."""

    key: str
    action: str  # "added", "replaced", "removed", "unchanged"
    before: Any = ABSENT
    after: Any = ABSENT

    @property
    def changed(self) -> bool:
        return self.action != "unchanged"

    def to_json(self) -> dict:
        out: dict[str, Any] = {"key": self.key, "action": self.action}
        if self.before is not ABSENT:
            out["before"] = self.before
        if self.after is not ABSENT:
            out["after"] = self.after
        return out
