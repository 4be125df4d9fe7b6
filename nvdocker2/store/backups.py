"""Backups of the files a change replaces: `STATE/backups/<id>.meta.json` (metadata) beside the
saved bytes, `<id>` plus the file's own extension (`.json`, `.toml`, `.conf`), newest first,
pruned to KEEP_BACKUPS per file."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.store.atomic import Ownership, atomic_write, make_dirs, os_error
from nvdocker2.store.digest import sha256_hex
from nvdocker2.store.lock import check_state_dir, read_state_file

KEEP_BACKUPS = 20
_BACKUP_RE = re.compile(r"(\d{8}T\d{6}Z-[0-9a-f]{6})(\.[A-Za-z0-9_-]{1,16})?\Z")
_EXT_RE = re.compile(r"\.[A-Za-z0-9_-]{1,16}\Z")
_ID_RE = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}\Z")


def extension(config: Path) -> str:
    """The extension a backup of `config` keeps: its own (`.toml`), else none."""
    suffix = Path(config).suffix
    return suffix if _EXT_RE.match(suffix) else ""


def sha256(data: bytes) -> str:
    return sha256_hex(data)


_TAG_RE = re.compile(r" \[([0-9a-f]{8})\]$")


@dataclass(frozen=True)
class Backup:
    """One saved version of a config file. `existed` False: the file did not exist then.
    `ownership`: the file's mode, owner and group then (None in backups of version 0.1).
    `for_config`: the engine config whose change made it (None in backups made before it was
    recorded, and outside an engine's transaction)."""

    id: str
    time: str
    reason: str
    sha256: str | None
    config: str
    existed: bool
    size: int
    file: Path
    ownership: Ownership | None = None
    for_config: str | None = None

    @property
    def tag(self) -> str | None:
        """The tag a transaction that backs up several files puts at the end of each one's
        reason (`install CDI mode [1a2b3c4d]`), or None."""
        m = _TAG_RE.search(self.reason)
        return m.group(1) if m else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "reason": self.reason,
            "sha256": self.sha256,
            "config": self.config,
            "existed": self.existed,
            "size": self.size,
            "file": str(self.file) if self.existed else None,
            "mode": f"{self.ownership.mode:04o}" if self.ownership else None,
            "uid": self.ownership.uid if self.ownership else None,
            "gid": self.ownership.gid if self.ownership else None,
        }


class Backups:
    """`STATE/backups/ID.EXT` (the bytes, EXT the file's own extension; `ID.json` for every
    file in backups made before 0.2) and `ID.meta.json` (what they are); the newest
    KEEP_BACKUPS per config path are kept. The meta file is written last: a backup without it
    is incomplete and ignored."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.dir = state / "backups"

    def create(
        self, config: Path, data: bytes | None, reason: str, ownership: Ownership | None = None,
        for_config: Path | None = None,
    ) -> Backup:
        now = _dt.datetime.now(_dt.timezone.utc)
        bid = now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()
        try:
            make_dirs(self.dir)
        except OSError as e:
            raise os_error(e, f"backup directory {self.dir}") from None
        file = self.dir / f"{bid}{extension(config)}"
        if data is not None:
            atomic_write(file, data, new_mode=0o600, follow=False)
        meta = {
            "id": bid,
            "time": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "reason": reason,
            "sha256": sha256(data) if data is not None else None,
            "config": str(config),
            "existed": data is not None,
            "size": len(data) if data is not None else 0,
            "file": file.name,
        }
        if data is not None and ownership is not None:
            meta.update(mode=f"{ownership.mode:04o}", uid=ownership.uid, gid=ownership.gid)
        if for_config is not None:
            meta["for_config"] = str(for_config)
        atomic_write(
            self.dir / f"{bid}.meta.json",
            (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode(),
            0o600,
            follow=False,
        )
        return self._from_meta(meta)

    def _from_meta(self, meta: dict[str, Any]) -> Backup:
        """A Backup from its metadata; ValueError for an id that is not one of ours (a file
        name built from it must stay in this directory) or a malformed field."""
        bid = meta["id"]
        if not isinstance(bid, str) or not _ID_RE.match(bid):
            raise ValueError(f"not a backup id: {bid!r}")
        if not isinstance(meta["config"], str) or not isinstance(meta["time"], str):
            raise ValueError("malformed backup metadata")
        ownership = None
        if isinstance(meta.get("mode"), str) and all(
            isinstance(meta.get(k), int) for k in ("uid", "gid")
        ):
            ownership = Ownership(int(meta["mode"], 8) & 0o7777, meta["uid"], meta["gid"])
        name = meta.get("file", f"{bid}.json")  # no "file": made before backups kept the extension
        m = _BACKUP_RE.match(name) if isinstance(name, str) else None
        if m is None or m.group(1) != bid:
            raise ValueError(f"not a backup file name: {name!r}")
        return Backup(
            id=bid,
            time=meta["time"],
            reason=str(meta.get("reason", "")),
            sha256=meta.get("sha256"),
            config=meta["config"],
            existed=bool(meta.get("existed")),
            size=int(meta.get("size", 0)),
            file=self.dir / name,
            ownership=ownership,
            for_config=meta["for_config"] if isinstance(meta.get("for_config"), str) else None,
        )

    def all(self, config: Path | None = None) -> list[Backup]:
        """Backups (of `config` when given), newest first."""
        out: list[Backup] = []
        check_state_dir(self.state)
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        except OSError as e:
            raise os_error(e, f"backup directory {self.dir}") from None
        for n in names:
            if not n.endswith(".meta.json"):
                continue
            try:
                meta = json.loads(read_state_file(self.dir / n, "backup") or b"")
                b = self._from_meta(meta)
            except (ValueError, KeyError, TypeError):
                continue
            if n != f"{b.id}.meta.json":
                continue
            if config is None or b.config == str(config):
                out.append(b)
        out.sort(key=lambda b: (b.time, b.id), reverse=True)
        return out

    def group(self, b: Backup, every: list[Backup] | None = None) -> list[Backup]:
        """`b` and the other backups of its transaction (the same tag), oldest first; `every`:
        the backups already listed by `all()`."""
        if b.tag is None:
            return [b]
        return sorted((x for x in (self.all() if every is None else every) if x.tag == b.tag),
                      key=lambda x: (x.time, x.id))

    def get(self, bid: str) -> Backup:
        if not _ID_RE.match(bid):
            raise BadInput(
                f"no backup with id {bid!r}: not a backup id (like 20260101T120000Z-0a1b2c)",
                "list them with: nvdocker2 backups",
            )
        for b in self.all():
            if b.id == bid:
                return b
        raise BadInput(
            f"no backup with id {bid!r} in {self.dir}", "list them with: nvdocker2 backups"
        )

    def read(self, b: Backup) -> bytes | None:
        """The saved bytes (None: the file did not exist); checked against the sha256."""
        if not b.existed:
            return None
        check_state_dir(self.state)
        data = read_state_file(b.file, "backup")
        if data is None:
            raise EnvironmentProblem(
                f"backup {b.file} is missing", "choose another backup: nvdocker2 backups"
            )
        if sha256(data) != b.sha256:
            raise EnvironmentProblem(
                f"backup {b.file} is damaged (sha256 does not match {b.sha256})",
                "choose another backup: nvdocker2 backups",
            )
        return data

    def discard(self, b: Backup) -> None:
        """Remove one backup (metadata first, so no half of it is ever listed)."""
        for p in (self.dir / f"{b.id}.meta.json", b.file):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def prune(self, config: Path, keep: int = KEEP_BACKUPS) -> list[str]:
        """Keep the newest `keep` backups of `config`; also remove the bytes of backups whose
        metadata was never written (a run killed between the two writes). Called with the
        lock held, so no backup is being created meanwhile."""
        removed = []
        with contextlib.suppress(OSError):
            names = set(os.listdir(self.dir))
            for n in names:
                m = _BACKUP_RE.match(n)
                if m and f"{m.group(1)}.meta.json" not in names:
                    with contextlib.suppress(OSError):
                        os.unlink(self.dir / n)
                        removed.append(m.group(1))
        for b in self.all(config)[keep:]:
            with contextlib.suppress(OSError):
                self.discard(b)
            removed.append(b.id)
        return removed
