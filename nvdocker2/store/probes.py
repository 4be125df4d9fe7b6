"""What a program on this host was found to lack, so it is not asked again on every run.

`STATE/probes/lacking.json` (0600):
{"lacking": [{"program": PATH, "flag": "--validate",
              "identity": [st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns]}]}
Today one fact: a dockerd without `--validate` (Docker < 23 answers "unknown flag", and asking
costs a run of dockerd each time). Only that a flag is missing is kept, never what a program
said of a file.

`PATH` is the program's resolved path; an entry counts only while the file there has exactly
the identity recorded, so a program replaced or upgraded in place is asked again. The record is
read only from a state directory that passes `check_state_dir` (docs/reference.md §8) and never
through a symlink; a state directory that does not pass, a record that does not read, or an
entry of the wrong shape counts as knowing nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nvdocker2.errors import NvDockerError
from nvdocker2.store.atomic import atomic_write, make_dirs
from nvdocker2.store.lock import check_state_dir, read_state_file

KEEP_ENTRIES = 16  # the newest; a host has a few dockerd binaries at most

Identity = tuple[int, int, int, int, int]


def identity(program: str) -> tuple[str, Identity] | None:
    """`program`'s resolved path and identity (None: it cannot be stat'ed)."""
    real = os.path.realpath(program)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return real, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Probes:
    """The flags programs were found to lack, kept in `state` (see the module docstring)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.dir = state / "probes"
        self.path = self.dir / "lacking.json"

    def _entries(self) -> list[dict[str, Any]] | None:
        """The well-formed entries (None: the state directory is not to be trusted)."""
        try:
            check_state_dir(self.state)
            data = read_state_file(self.path, "probe record")
        except NvDockerError:
            return None
        try:
            rec = json.loads(data) if data is not None else None
        except ValueError:
            return []
        entries = rec.get("lacking") if isinstance(rec, dict) else None
        return [e for e in entries if _well_formed(e)] if isinstance(entries, list) else []

    def lacks(self, path: str, ident: Identity, flag: str) -> bool:
        """Whether the program at `path` (resolved), of identity `ident` (as it is now), was
        found to lack `flag`."""
        return any(e["program"] == path and e["flag"] == flag and tuple(e["identity"]) == ident
                   for e in self._entries() or ())

    def remember_lack(self, path: str, ident: Identity, flag: str) -> None:
        """Record that the program at `path` (resolved), of identity `ident`, lacks `flag`.
        Nothing is written to a state directory that is not to be trusted; a record that
        cannot be written is left as it was (the program is asked again next time)."""
        entries = self._entries()
        if entries is None:
            return
        keep = [e for e in entries if (e["program"], e["flag"]) != (path, flag)]
        keep.append({"program": path, "flag": flag, "identity": list(ident)})
        data = json.dumps({"lacking": keep[-KEEP_ENTRIES:]}, indent=2) + "\n"
        try:
            make_dirs(self.dir)
            atomic_write(self.path, data.encode(), 0o600, follow=False)
        except (OSError, NvDockerError):
            pass


def _well_formed(e: object) -> bool:
    if not isinstance(e, dict):
        return False
    ident = e.get("identity")
    return (isinstance(e.get("program"), str) and isinstance(e.get("flag"), str)
            and isinstance(ident, list) and len(ident) == 5
            and all(type(x) is int for x in ident))
