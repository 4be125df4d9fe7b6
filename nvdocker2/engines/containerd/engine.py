"""The containerd engine: config.toml versions 1–3 and their drop-ins, planned for the engine
transaction; the format is document.py, the edits edit.py, containerd itself service.py.

Where this engine's files are (config.toml, its drop-in, an older nvdocker2's 1.x drop-in) is
read by `locate`, which keeps it in `found` for `files()` and the candidate check: a plan
locates before it edits, and nothing else changes that record.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nvdocker2.store.atomic import Ownership
from nvdocker2.engines.base import EngineBase, FileEdit, Plan, Reader, Request
from nvdocker2.engines.containerd import document, edit, service
from nvdocker2.engines.transaction import read
from nvdocker2.errors import BadInput

DEFAULT_CONFIG = Path("/etc/containerd/config.toml")


@dataclasses.dataclass(frozen=True)
class Found:
    """Where nvdocker2's drop-in is: `dropin`, the one the layout writes (on 2.x) or one an
    older nvdocker2 wrote (1.x), its `doc` when it is there and ours; `legacy`, where an older
    nvdocker2 put its 1.x drop-in."""

    dropin: Path | None = None
    legacy: Path | None = None
    doc: document.Config | None = None

    @property
    def legacy_dropin(self) -> Path | None:
        """An older nvdocker2's 1.x drop-in, there now."""
        return self.dropin if self.dropin is not None and self.dropin == self.legacy else None


class ContainerdEngine(EngineBase):
    name = "containerd"
    process = "containerd"

    def __init__(self, config: Path = DEFAULT_CONFIG, exe: str | None = None,
                 check: bool = True) -> None:
        super().__init__(config)
        self.exe = exe if exe is not None else service.binary()
        self.release = service.release(self.exe)
        self.major = self.release[0] if self.release else None
        self.check = check
        self.found = Found()  # what the last `locate` found
        # (root's bytes, their dump)
        self._dumped: tuple[bytes | None, dict[str, Any]] | None = None

    def root(self, read: Reader) -> document.Config:
        """config.toml, parsed (BadInput naming the file when it does not parse)."""
        return document.parse(self.config, read(self.config))

    def files(self) -> Sequence[Path]:
        found = [p for p in (self.found.dropin, self.found.legacy) if p]
        return list(dict.fromkeys([self.config] + found))

    def imports(self, root: document.Config, read: Reader,
                own: Path | None) -> list[document.Config]:
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

    def locate(self, root: document.Config, read: Reader) -> Found:
        """Find our drop-in as it is now and keep that in `found`: on 2.x the one the layout
        writes, on 1.x one that an older nvdocker2 wrote (it starts with edit.MARK; another
        file of that name is an import like any other)."""
        lay = edit.layout(root, self.major)
        path = lay.dropin or lay.legacy
        raw = None if path is None else read(path)
        if path is None or raw is None or (
                lay.dropin is None and not raw.startswith(edit.MARK.encode())):
            self.found = Found(lay.dropin, lay.legacy)
        else:
            self.found = Found(path, lay.legacy, document.parse(path, raw))
        return self.found

    def _current_dump(self, exe: str, raw: bytes | None) -> dict[str, Any]:
        """`exe config dump` of the files as they are (the root holding `raw`), run once for
        both the plan and the candidate check; without an older nvdocker2's 1.x drop-in, which
        the plan removes: config.toml's own CRI section is what the change starts from."""
        if self._dumped is None or self._dumped[0] != raw:
            legacy = self.found.legacy_dropin
            self._dumped = (raw, service.dump_current(exe, self.config) if legacy is None
                            else service.check_files(exe, self.config, {legacy: None},
                                                     {legacy.parent}))
        return self._dumped[1]

    def plan_install(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        root = self.root(read)
        found = self.locate(root, read)
        own = found.doc
        imported = self.imports(root, read, found.dropin)
        implicit = None
        if edit.implicit_default(root, imported, self.major):
            implicit = service.builtin_runtime(self._current_dump(self.exe, root.raw)) if (
                self.exe and self.check) else {"runtime_type": document.RUNC_V2}
        cdi = self._cdi(root, req) if req.extra.get("cdi") else None
        plan = edit.plan_install(root, imported, own, self.major, req, journal, implicit, cdi)
        made = ((journal.get("runtimes") or {}).get(req.runtime_name) or {}).get("dropin_dir")
        if own is not None and own.path == found.legacy and made:
            plan = dataclasses.replace(plan, remove_dirs=(Path(made),))
        rec = plan.journal
        if rec and found.dropin is not None and not found.dropin.parent.exists():
            # The drop-in directory is this install's: the uninstall that removes the last
            # drop-in removes it too (when nothing else was put there meanwhile).
            rts = dict(rec["runtimes"])
            rts[req.runtime_name] = dict(rts[req.runtime_name], dropin_dir=str(found.dropin.parent))
            rec = dict(rec, runtimes=rts)
        return dataclasses.replace(plan, journal=rec, check=(req, False),
                                   files=self._owned(plan.files))

    def _cdi(self, root: document.Config, req: Request) -> str:
        """What `--cdi` asks of this containerd: ENABLE_CDI on 1.7, CDI_ON on 2.x where its
        effective configuration has CDI on; BadInput (nothing written) where it cannot."""
        if self.release is None:
            raise BadInput("--cdi: containerd's version is unknown (containerd is not on PATH)",
                           "install on the node that runs containerd, or leave out --cdi")
        shown = "%d.%d" % self.release
        if self.release < (1, 7):
            raise BadInput(f"--cdi: containerd {shown} has no CDI (it came in containerd 1.7)",
                           "upgrade containerd to 1.7 or later, or install without --cdi; "
                           "nothing was changed")
        if self.release < (2, 0):
            return edit.ENABLE_CDI
        if self.check and self.exe:
            dump = self._current_dump(self.exe, root.raw)
            key = service.dump_cri(dump)[:2] + ("enable_cdi",)
            if service.lookup(dump, key) is not True:
                raise BadInput(f"--cdi: containerd {shown} runs with {document.dotted(key)} "
                               f"off ({self.config} or an import turns it off)",
                               "set it to true (or take out the line that turns it off), "
                               "then run again; nothing was changed")
        return edit.CDI_ON

    def _owned(self, files: Sequence[FileEdit]) -> tuple[FileEdit, ...]:
        """A file the plan creates beside config.toml gets its mode, owner and group: it is
        part of the same configuration (a drop-in beside a 0600 config.toml is 0600)."""
        try:
            like = Ownership.of(os.stat(self.config))
        except OSError:
            return tuple(files)
        return tuple(dataclasses.replace(f, owner=like)
                     if f.old is None and f.new is not None and f.path != self.config else f
                     for f in files)

    def plan_uninstall(self, read: Reader, req: Request, journal: dict[str, Any]) -> Plan:
        root = self.root(read)
        own = self.locate(root, read).doc
        rec = (journal.get("runtimes") or {}).get(req.runtime_name) or {}
        if own is None and rec.get("dropin"):
            # Where the journal says install put it (on 1.x: an older nvdocker2's drop-in).
            p = Path(rec["dropin"])
            raw = read(p)
            own = None if raw is None else document.parse(p, raw)
            legacy = self.found.legacy if edit.layout(root, self.major).deep_merge else p
            self.found = Found(p, legacy, own)
        plan = edit.plan_uninstall(root, own, req, journal)
        made = rec.get("dropin_dir")
        if made and not edit.other_users(rec, journal, req.runtime_name):
            plan = dataclasses.replace(plan, remove_dirs=(Path(made),))
        # The runtime goes, or stays as it was before install (put back) or left alone (None).
        gone = req.runtime_name in plan.expect["absent"]
        return dataclasses.replace(plan, check=(req, True if gone else None))

    def check_candidate(self, ctx: Any, plan: Plan, staged: Sequence[Any]) -> None:
        """containerd's own verdict on the candidate files (BadInput when it refuses)."""
        if not self.check:
            return
        if not self.exe:
            ctx.warn("containerd is not installed here: the candidate was checked as TOML only")
            return
        ctx.reporter.progress(f"checking the candidate with {self.name}")
        files = {f.path: f.new for f in plan.files}
        dirs = {f.path.parent for f in plan.files if f.path != self.config}
        if self.found.dropin is not None:
            dirs.add(self.found.dropin.parent)
        after = service.check_files(self.exe, self.config, files, dirs)
        if plan.check is None:
            return  # a rollback: containerd loads the files it gives back, nothing more
        req, removing = plan.check
        before = self._current_dump(self.exe, next(
            (f.old for f in plan.files if f.path == self.config), read(self.config)))
        legacy = self.found.legacy_dropin
        if legacy is not None:
            hidden = service.changed_keys(service.dump_current(self.exe, self.config), before,
                                          req.runtime_name)
            if hidden:
                ctx.warn(f"{legacy}, an older nvdocker2's copy of the CRI section, goes: "
                         f"containerd runs {self.config}'s own CRI section again, where "
                         + ", ".join(hidden) + " differ")
        problems = service.compare_dumps(before, after, req.runtime_name, req.runtime_path,
                                         req.set_default, removing,
                                         cdi=bool(plan.expect.get("cdi")),
                                         cdi_keys=tuple(edit.CDI_KEYS))
        if problems:
            raise BadInput(f"{self.config}: containerd's effective configuration would be wrong: "
                           + "; ".join(problems),
                           "nothing was changed; check the imports and drop-ins that set the CRI "
                           "plugin (containerd ≤ 1.7 replaces whole plugin sections)")
