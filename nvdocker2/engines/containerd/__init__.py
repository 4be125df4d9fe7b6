"""The containerd engine: config.toml versions 1–3, drop-ins, restart and CRI verification."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from nvdocker2.engines.base import Plan, Reader, Request
from nvdocker2.engines.containerd import document, edit, service
from nvdocker2.errors import BadInput

DEFAULT_CONFIG = Path("/etc/containerd/config.toml")


class ContainerdEngine:
    name = "containerd"

    def __init__(self, config: Path = DEFAULT_CONFIG, exe: str | None = None,
                 check: bool = True) -> None:
        self.config = Path(config)
        self.exe = exe if exe is not None else service.binary()
        self.major = service.major_version(self.exe)
        self.check = check
        self._dropin: Path | None = None
        self.warnings: list[str] = []

    def _root(self, read: Reader) -> document.Config:
        return document.parse(self.config, read(self.config))

    def files(self) -> Sequence[Path]:
        return [self.config] + ([self._dropin] if self._dropin else [])

    def _imports(self, root: document.Config, read: Reader, own: Path | None) -> list:
        out = []
        for pat in root.imports():
            full = pat if os.path.isabs(pat) else str(root.path.parent / pat)
            for f in sorted(glob.glob(full)):
                if own is not None and Path(f) == own:
                    continue
                try:
                    out.append(document.parse(Path(f), read(Path(f))))
                except BadInput as e:
                    raise BadInput(f"{e.message} (imported by {root.path})", e.hint) from None
        return out

    def _own(self, root: document.Config, read: Reader) -> document.Config | None:
        lay = edit.layout(root, self.major)
        self._dropin = lay.dropin
        if lay.dropin is None:
            return None
        raw = read(lay.dropin)
        return None if raw is None else document.parse(lay.dropin, raw)

    def plan_install(self, read: Reader, req: Request, journal: dict) -> Plan:
        root = self._root(read)
        own = self._own(root, read)
        return edit.plan_install(root, self._imports(root, read, self._dropin), own,
                                 self.major, req, journal)

    def plan_uninstall(self, read: Reader, req: Request, journal: dict) -> Plan:
        root = self._root(read)
        own = self._own(root, read)
        rec = (journal.get("runtimes") or {}).get(req.runtime_name) or {}
        if own is None and rec.get("dropin"):
            p = Path(rec["dropin"])
            raw = read(p)
            own = None if raw is None else document.parse(p, raw)
            self._dropin = p
        return edit.plan_uninstall(root, own, req, journal)

    def check_candidate(self, plan: Plan, req: Request, removing: bool = False) -> list[str]:
        """containerd's own verdict on the candidate files (BadInput when it refuses);
        returns warnings (e.g. no containerd binary to ask)."""
        if not self.check:
            return []
        if not self.exe:
            return ["containerd is not installed here: the candidate was checked as TOML only"]
        before = service.dump_current(self.exe, self.config)
        files = {f.path: f.new for f in plan.files}
        after = service.check_files(self.exe, self.config, files,
                                    self._dropin.parent if self._dropin else None)
        problems = service.compare_dumps(before, after, req.runtime_name, req.runtime_path,
                                         req.set_default, removing)
        if problems:
            raise BadInput(f"{self.config}: containerd's effective configuration would be wrong: "
                           + "; ".join(problems),
                           "nothing was changed; check the imports and drop-ins that set the CRI "
                           "plugin (containerd ≤ 1.7 replaces whole plugin sections)")
        return []

    def restart_hint(self) -> str:
        return "systemctl restart containerd"
