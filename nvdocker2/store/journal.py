"""The journal: what install replaced, per config path, so uninstall puts exactly that back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.store import codec
from nvdocker2.store.atomic import atomic_write, make_dirs, os_error
from nvdocker2.store.digest import sha256_hex
from nvdocker2.store.lock import check_state_dir, read_state_file


class Journal:
    """What install replaced, per config path, so uninstall can put exactly that back.

    `STATE/journal/<sha256 of the path>.json`:
    {"config": PATH,
     "runtimes_key": {"present": bool},                  # did "runtimes" exist before us
     "runtimes": {NAME: {"previous": SLOT, "installed": ENTRY}},
     "default_runtime": {"previous": SLOT, "installed": NAME} | absent,
     "user_config": {"path": PATH, "previous": SLOT, "file": bool, "table": bool,
                     "dir": bool} | absent,              # rootless: the per-user config.toml
     "runtime_mode": {"path": PATH, "previous": SLOT, "previous_toml": TEXT | absent,
                      "installed": MODE, "file": bool, "table": bool,
                      "dir": bool} | absent}             # install --mode: the global config.toml
    where SLOT is {"present": false} or {"present": true, "value": ...}. The file is strict
    JSON (store/codec.py, which says why it is not daemon.json's parser); numbers keep their
    exact text.
    """

    def __init__(self, state: Path, config: Path) -> None:
        key = sha256_hex(str(config).encode("utf-8", "surrogateescape"))[:16]
        self.state = state
        self.dir = state / "journal"
        self.path = self.dir / f"{key}.json"
        self.config = config

    def read_bytes(self) -> bytes | None:
        check_state_dir(self.state)
        return read_state_file(self.path, "journal")

    def load(self) -> dict[str, Any]:
        data = self.read_bytes()
        if data is None:
            return {}
        try:
            rec = codec.loads(data)
        except ValueError:
            raise EnvironmentProblem(
                f"journal {self.path} is damaged",
                f"remove it (uninstall then only removes entries pointing at this package's "
                f"runtime): rm {self.path}",
            ) from None
        return rec if rec.get("config") == str(self.config) else {}

    def write(self, record: dict[str, Any] | None) -> None:
        """Replace the record (None or empty: remove the file). BadInput, nothing written, for
        a value the journal cannot hold (nested deeper than codec.MAX_DEPTH)."""
        if not record or not any(record.get(k) for k in ("runtimes", "default_runtime",
                                                          "user_config", "runtime_mode")):
            self.restore(None)
            return
        try:
            data = codec.dumps(record)
        except ValueError as e:
            raise BadInput(f"journal {self.path}: a value to record is {e}",
                           "simplify that value in the config, then run again; nothing was "
                           "changed") from None
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"journal directory {self.dir}") from None
        atomic_write(self.path, data, 0o600, follow=False)

    def restore(self, data: bytes | None) -> None:
        """Put back bytes from `read_bytes()` (None: no journal)."""
        if data is None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise os_error(e, f"journal {self.path}") from None
            return
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"journal directory {self.dir}") from None
        atomic_write(self.path, data, 0o600, follow=False)


def slot(value: Any) -> dict[str, Any]:
    """Journal form of a value that may be ABSENT."""
    from nvdocker2.changes import ABSENT

    return {"present": False} if value is ABSENT else {"present": True, "value": value}


def unslot(s: Any) -> Any:
    from nvdocker2.changes import ABSENT

    if isinstance(s, dict) and s.get("present"):
        return s.get("value")
    return ABSENT
