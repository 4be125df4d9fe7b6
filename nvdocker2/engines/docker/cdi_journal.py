"""CDI mode's journal (what `install --mode cdi` replaced, beside daemon.json's runtime journal)
and where its spec lives: read by install and uninstall (cdi.py), `cdi refresh`, `rollback`
(which undoes a change of the spec too), `status` and doctor."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nvdocker2.errors import NvDockerError
from nvdocker2.store.journal import Journal

DEFAULT_SPEC_DIR = "/etc/cdi"
SPEC_NAME = "nvidia.yaml"


def spec_path(spec_dir: str | os.PathLike[str] | None) -> Path:
    return Path(os.path.abspath(str(spec_dir or DEFAULT_SPEC_DIR))) / SPEC_NAME


class CdiJournal(Journal):
    """What CDI mode replaced, beside daemon.json's runtime journal:

    {"config": PATH, "features_cdi": {"previous": SLOT, "features_present": bool} | absent,
     "spec": {"path": SPEC, "previous": BASE64 | null}, "runtime_path": PATH,
     "more_specs": [{"path": SPEC, "previous": BASE64 | null}, ...] | absent}

    `more_specs`: the specs a later install wrote under another --cdi-spec-dir.
    """

    def __init__(self, state: Path, config: Path) -> None:
        super().__init__(state, config)
        self.path = self.dir / f"{self.path.stem}-cdi.json"

    def write(self, record: dict[str, Any] | None) -> None:
        """Replace the record (None or empty: remove the file), as the runtime journal does."""
        if not record or not (record.get("spec") or record.get("features_cdi")):
            self.restore(None)
            return
        from nvdocker2.engines.docker.daemonjson import document  # only install writes it

        self.restore(document.dumps(record, document.Style(indent="  ")).encode())


def more_specs(rec: dict[str, Any]) -> list[dict[str, Any]]:
    more = rec.get("more_specs")
    return [m for m in more if isinstance(m, dict) and isinstance(m.get("path"), str)] \
        if isinstance(more, list) else []


def recorded_paths(rec: dict[str, Any]) -> list[str]:
    """Every spec path the journal `rec` records, the first install's first."""
    spec = rec.get("spec")
    first = [spec["path"]] if isinstance(spec, dict) and isinstance(spec.get("path"), str) else []
    return first + [m["path"] for m in more_specs(rec)]


def previous_bytes(entry: dict[str, Any]) -> bytes | None:
    import base64  # here: only CDI mode's undo reads a previous file's bytes

    prev = entry.get("previous")
    return base64.b64decode(prev) if isinstance(prev, str) else None


def recorded_spec(state: Path, config: Path) -> Path | None:
    """The spec path the last `install --mode cdi` wrote, from its journal (None: none)."""
    try:
        rec = CdiJournal(state, config).load()
    except NvDockerError:
        return None
    spec = rec.get("spec")
    path = spec.get("path") if isinstance(spec, dict) else None
    return Path(path) if isinstance(path, str) else None
