"""Pure edits of containerd's configuration: install and uninstall as file plans (reference §11).

Two layouts:
- in place (containerd 1.x, config version 1 or 2, whatever the root imports): the runtime
  table is appended to config.toml as text, so every byte before it stays; a runtime or default
  that already exists is changed in place with tomlkit. containerd ≤ 1.7 replaces a whole plugin
  section with an import's, so a drop-in there would have to carry a copy of the whole CRI
  section (registry credentials included) and would hide every later edit of config.toml's.
- drop-in (containerd ≥ 2 / version 3, which merge imported tables key by key): nvdocker2's own
  file `99-nvidia.toml` in the imported directory (or conf.d beside the root), holding the
  runtime alone. The import is added to the root only if missing.
A drop-in an older nvdocker2 wrote on 1.x (`legacy`) is removed by the next install, which puts
the runtime into config.toml instead, and by uninstall.
Every text edit is checked by parsing the result: it must hold exactly the old values plus ours.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import tomlkit
from tomlkit.items import Array

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.base import FileEdit, Plan, Request
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.containerd.text import (
    drop_table,
    has_header,
    header_indent,
    loads_or,
    tk_set,
    toml_value,
    render_table,
)
from nvdocker2.engines.tomlread import tomllib
from nvdocker2.errors import BadInput

OWN_DROPIN = "99-nvidia.toml"
# What `--cdi` turns on in the CRI plugin's own table on containerd 1.7 (2.x has it on by
# default), and the annotations the runtime entry then lets through to the runtime: those the
# device plugin's cdi-annotations strategy sets (cdi.k8s.io/<name> = <device>).
CDI_KEYS = {"enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}
# CDI_KEYS written only where the file has none: spec directories someone chose are theirs.
CDI_KEPT = ("cdi_spec_dirs",)
CDI_ANNOTATIONS = ["cdi.k8s.io/*"]
ENABLE_CDI = "enable"  # plan_install's `cdi`: write CDI_KEYS (1.7)
CDI_ON = "on"          # CDI is on already (2.x): only the runtime entry's annotations
MARK = "# Written by nvdocker2; `nvdocker2 uninstall --engine containerd` removes this file.\n"


@dataclass(frozen=True)
class Layout:
    """Where the change goes: `dropin` None means in place in the root config."""

    dropin: Path | None
    import_pattern: str | None  # the import to add to the root, None when present
    deep_merge: bool  # containerd ≥ 2 merges imported plugin tables key by key
    legacy: Path | None = None  # where an older nvdocker2 put its drop-in on 1.x


def import_dirs(root: D.Config) -> list[tuple[str, Path]]:
    """(pattern, directory) of each import that matches our drop-in's name."""
    out = []
    for pat in root.imports():
        full = pat if os.path.isabs(pat) else str(root.path.parent / pat)
        d, base = os.path.split(full)
        if any(c in d for c in "*?[") or not fnmatch.fnmatch(OWN_DROPIN, base):
            continue
        out.append((pat, Path(d)))
    return out


def layout(root: D.Config, major: int | None) -> Layout:
    deep = (major or 0) >= 2 or root.version == 3
    dirs = import_dirs(root)
    if not deep:
        return Layout(None, None, deep, dirs[0][1] / OWN_DROPIN if dirs else None)
    if dirs:
        return Layout(dirs[0][1] / OWN_DROPIN, None, deep)
    d = root.path.parent / "conf.d"
    return Layout(d / OWN_DROPIN, str(d / "*.toml"), deep)


def shadowing(root: D.Config, imported: list[D.Config], deep: bool) -> list[Path]:
    """The imports whose CRI section replaces config.toml's (containerd ≤ 1.7 takes a whole
    plugin section from the last file that has it): every CRI setting config.toml holds, and
    every later edit of it, is ignored by containerd."""
    if deep or not isinstance(_get_in(root.data, ("plugins", D.CRI_PLUGIN[root.version])), dict):
        return []
    return cri_imports(imported)


def cri_imports(imported: list[D.Config]) -> list[Path]:
    """The imports that have a CRI section (on containerd ≤ 1.7 the last one is what runs)."""
    return [imp.path for imp in imported
            if isinstance(_get_in(imp.data, ("plugins", D.CRI_PLUGIN[imp.version])), dict)]


def runtimes(data: dict[str, Any], cri: tuple[str, ...], where: str) -> dict[str, Any]:
    ctd = D.table_at(data, cri, where) or {}
    rts = ctd.get("runtimes", {})
    return rts if isinstance(rts, dict) else {}


def default_name(data: dict[str, Any], cri: tuple[str, ...]) -> str:
    ctd = D.table_at(data, cri, "") or {}
    d = ctd.get("default_runtime_name")
    return d if isinstance(d, str) and d else "runc"


def runtime_table(data: dict[str, Any], cri: tuple[str, ...], name: str, path: str, where: str,
                  cdi: bool = False) -> dict[str, Any]:
    """The runtime entry: runc v2 with BinaryName, plus the default runc runtime's options;
    with `cdi` also the container annotations containerd passes on to it (CDI_ANNOTATIONS)."""
    src = default_name(data, cri)
    if src == name:
        src = "runc"
    base = runtimes(data, cri, where).get(src, {})
    opts = base.get("options", {}) if isinstance(base, dict) else {}
    copied = {k: v for k, v in opts.items() if k != "BinaryName"} if isinstance(opts, dict) else {}
    table: dict[str, Any] = {"runtime_type": D.RUNC_V2}
    if cdi:
        table["container_annotations"] = list(CDI_ANNOTATIONS)
    table["options"] = {**copied, "BinaryName": path}
    return table


def _set_in(data: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    cur = data
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    if value is ABSENT:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value


def _get_in(data: dict[str, Any], keys: tuple[str, ...]) -> Any:
    cur: Any = data
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return ABSENT
        cur = cur[k]
    return cur


def _checked(path: Path, text: str, expected: dict[str, Any]) -> bytes:
    """The new bytes, after proving that they parse to `expected` (the old values plus ours)."""
    try:
        got = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        got = {"<error>": str(e)}
    if _prune(got) != _prune(expected):
        raise BadInput(
            f"{path}: could not change the runtime without changing other settings (the "
            "tables are laid out in a way this edit does not handle)",
            "change the runtime by hand, or pass --dry-run to see what would be written",
        )
    return text.encode("utf-8")


def _prune(v: Any) -> Any:
    """Tables without keys are dropped: a header removed with its last key leaves none."""
    if isinstance(v, dict):
        out = {k: _prune(x) for k, x in v.items()}
        return {k: x for k, x in out.items() if x != {}}
    return v


def _journal_entry(journal: dict[str, Any], name: str) -> dict[str, Any]:
    rts = journal.get("runtimes") or {}
    e = rts.get(name)
    return e if isinstance(e, dict) else {}


def _with_entry(journal: dict[str, Any], root: Path, name: str,
                entry: dict[str, Any] | None) -> dict[str, Any]:
    rec = dict(journal or {"config": str(root)})
    rec["config"] = str(root)
    rts = dict(rec.get("runtimes") or {})
    if entry is None:
        rts.pop(name, None)
    else:
        rts[name] = entry
    rec["runtimes"] = rts
    return rec


def _slot(v: Any) -> dict[str, Any]:
    return {"present": False} if v is ABSENT else {"present": True, "value": v}


def _unslot(s: Any) -> Any:
    return s.get("value") if isinstance(s, dict) and s.get("present") else ABSENT


def _insert_import(root: D.Config, pattern: str) -> tuple[str, str | None]:
    """(new text, the exact line inserted or None when tomlkit appended to the list)."""
    text, nl = root.text, root.newline
    if "imports" in root.data:
        doc = tomlkit.parse(text)
        # parse() let through only a list of strings: tomlkit holds it as an Array
        cast(Array, doc["imports"]).append(pattern)
        return tomlkit.dumps(doc), None
    line = f"imports = [{toml_value(pattern)}]{nl}"
    first_header = re.search(r"^[ \t]*\[", text, re.MULTILINE)
    m = re.search(r"^version[ \t]*=.*(\r?\n|$)", text, re.MULTILINE)
    if m and (first_header is None or m.start() < first_header.start()):
        end = m.end()
        if not m.group(1):
            line = nl + line.rstrip("\r\n")
        return text[:end] + line + text[end:], line
    return line + text, line


def _dropin_text(version: int, plugin: str, section: dict[str, Any]) -> str:
    body = tomlkit.dumps({"version": version, "plugins": {plugin: section}})
    return MARK + body


def implicit_default(root: D.Config, imported: list[D.Config], major: int | None) -> bool:
    """True when containerd's default `runc` runtime comes from its built-in defaults alone
    and writing a runtimes table would make containerd ≤ 1.7 drop it: its TOML decoding
    replaces the default runtimes map with the file's (2.x merges key by key). Debian 12's own
    config.toml is such a file."""
    lay = layout(root, major)
    eff = D.merged(root, imported, lay.deep_merge)
    cri = root.cri()
    return (not lay.deep_merge and not runtimes(eff, cri, str(root.path))
            and default_name(eff, cri) == "runc")


def plan_install(root: D.Config, imported: list[D.Config], dropin: D.Config | None,
                 major: int | None, req: Request, journal: dict[str, Any],
                 implicit: dict[str, Any] | None = None, cdi: str | None = None) -> Plan:
    """The files install ends with. `imported`: the root's imports in order, without ours;
    `dropin`: our drop-in file as it is now (None: none; on 1.x the drop-in an older nvdocker2
    wrote, which goes); `implicit`: containerd's built-in `runc` table to write beside ours,
    where writing ours alone would drop it (see `implicit_default`); `cdi`: ENABLE_CDI
    (containerd 1.7: CDI_KEYS go into config.toml's CRI plugin table) or CDI_ON (2.x), either
    of which gives the runtime entry CDI_ANNOTATIONS."""
    lay = layout(root, major)
    cri = root.cri()
    where = str(root.path)
    name, path = req.runtime_name, req.runtime_path
    eff = D.merged(root, imported, lay.deep_merge)
    if name == "runc":
        implicit = None
    table = runtime_table(eff, cri, name, path, where, cdi is not None)
    before_rt = runtimes(eff, cri, where).get(name, ABSENT)  # what uninstall puts back
    # What containerd runs now, our drop-in included: what the change list and a put-back
    # compare with.
    now = eff if dropin is None or lay.dropin is None else D.merged(
        root, imported + [dropin], lay.deep_merge)
    running = runtimes(now, cri, where).get(name, ABSENT)
    before_default = default_name(now, cri)
    changes = [Change(f"{D.dotted(cri)}.runtimes.{name}",
                      "unchanged" if running == table else
                      ("added" if running is ABSENT else "replaced"), running, table)]
    if req.set_default:
        changes.append(Change(f"{D.dotted(cri)}.default_runtime_name",
                              "unchanged" if before_default == name else "replaced",
                              before_default, name))
    plugin = cri[:2]
    turn_on = {} if cdi != ENABLE_CDI else _cdi_to_turn_on(eff, plugin)
    for k, v in turn_on.items():
        was = _get_in(eff, plugin + (k,))
        changes.append(Change(D.dotted(plugin + (k,)), "added" if was is ABSENT else "replaced",
                              was, v))
    expect: dict[str, Any] = {"present": {name: path}, "absent": [],
                              "default": name if req.set_default else None}
    if cdi is not None:
        expect["cdi"] = True
    expect_old: dict[str, Any] = {"present": {}, "absent": [name] if running is ABSENT else [],
                                  "default": before_default if req.set_default else None}
    hiding = [] if lay.deep_merge else cri_imports(imported)
    if hiding:
        # containerd 1.x runs another file's CRI section, not config.toml's: a runtime written
        # into config.toml would not run, and a copy of that section would freeze it.
        if all(not c.changed for c in changes):
            return Plan((FileEdit(root.path, root.raw, root.raw),), tuple(changes),
                        f"install runtime {name} (containerd)", None, expect, expect_old)
        raise BadInput(f"{hiding[-1]} replaces {root.path}'s whole CRI section (containerd 1.x "
                       "takes a plugin section from the last file that has one): a runtime in "
                       f"{root.path} would not run", f"add the runtime to {hiding[-1]} by hand, "
                       f"or move its CRI settings into {root.path} and run again")
    entry = dict(_journal_entry(journal, name))
    files: list[FileEdit] = []
    notes: list[str] = []
    if lay.dropin is None:
        new_text, entry = _install_in_place(root, table, req, entry, implicit, turn_on)
        files.append(FileEdit(root.path, root.raw, new_text))
        if dropin is not None:
            # An older nvdocker2's drop-in: it held a copy of the whole CRI section, which
            # containerd 1.x took instead of config.toml's.
            files.append(FileEdit(dropin.path, dropin.raw, None))
            changes.append(Change(str(dropin.path), "removed", "drop-in", ABSENT))
            notes.append(f"removed {dropin.path}, written by an older nvdocker2: containerd 1.x "
                         f"took its copy of the CRI section instead of {root.path}'s; the "
                         f"runtime is now in {root.path}")
            for k in ("dropin", "dropin_existed", "dropin_dir"):
                entry.pop(k, None)
    else:
        section: dict[str, Any] = {"containerd": {"runtimes": {name: table}}}
        if req.set_default:
            _set_in(section, ("containerd", "default_runtime_name"), name)
        new_dropin = _dropin_text(root.version, D.CRI_PLUGIN[root.version], section).encode()
        files.append(FileEdit(lay.dropin, dropin.raw if dropin else None, new_dropin))
        new_root = root.raw
        if lay.import_pattern is not None:
            text, line = _insert_import(root, lay.import_pattern)
            expected = D.deep_copy(root.data)
            expected["imports"] = root.imports() + [lay.import_pattern]
            new_root = _checked(root.path, text, expected)
            entry.setdefault("import_line", line)
            entry.setdefault("import_added", lay.import_pattern)
        files.insert(0, FileEdit(root.path, root.raw, new_root))
        entry.setdefault("dropin", str(lay.dropin))
        entry.setdefault("dropin_existed", dropin is not None)
    entry.setdefault("file_existed", root.existed)
    entry.setdefault("previous", _slot(before_rt))
    if req.set_default:
        entry.setdefault("previous_default",
                         _slot(_get_in(root.data, cri + ("default_runtime_name",))))
    entry["installed"] = path
    entry["set_default"] = bool(req.set_default or entry.get("set_default"))
    changed = any(f.changed for f in files)
    if implicit is not None and changed:
        changes.insert(0, Change(f"{D.dotted(cri)}.runtimes.runc", "added", ABSENT, implicit))
        notes.append("containerd's built-in runc runtime is written out too: containerd 1.x "
                     "drops it once the configuration names a runtime of its own")
    rec = _with_entry(journal, root.path, name, entry) if changed else None
    return Plan(tuple(files), tuple(changes), f"install runtime {name} (containerd)", rec,
                expect, expect_old, notes=tuple(notes))


def _install_in_place(root: D.Config, table: dict[str, Any], req: Request, entry: dict[str, Any],
                      implicit: dict[str, Any] | None = None, turn_on: dict[str, Any] | None = None
                      ) -> tuple[bytes, dict[str, Any]]:
    cri = root.cri()
    name = req.runtime_name
    text, nl = root.text, root.newline
    expected = D.deep_copy(root.data)
    if not root.existed:
        text = f"version = {root.version}{nl}"
        expected["version"] = root.version
    cur = _get_in(root.data, cri + ("runtimes", name))
    if req.set_default:
        _set_in(expected, cri + ("default_runtime_name",), name)
    appended = ""
    if cur is ABSENT:
        _set_in(expected, cri + ("runtimes", name), table)
        indent = header_indent(text, cri + ("runtimes",)) or header_indent(text, cri)
        sep = "" if not text or text.endswith("\n") else nl
        appended = sep + (nl if text.strip() else "")
        if implicit is not None:
            _set_in(expected, cri + ("runtimes", "runc"), implicit)
            appended += render_table(cri + ("runtimes", "runc"), implicit, indent, nl) + nl
            entry.setdefault("implicit_default", implicit)
        appended += render_table(cri + ("runtimes", name), table, indent, nl)
    elif cur != {**cur, **table, "options": {**(cur.get("options") or {}), **table["options"]}}:
        merged = {**cur, **table, "options": {**(cur.get("options") or {}), **table["options"]}}
        _set_in(expected, cri + ("runtimes", name), merged)
        for k, v in table.items():
            if k != "options" and cur.get(k) != v:
                text = tk_set(text, cri + ("runtimes", name, k), v)
        for k, v in table["options"].items():
            text = tk_set(text, cri + ("runtimes", name, "options", k), v)
    if req.set_default and _get_in(root.data, cri + ("default_runtime_name",)) != name:
        if _get_in(root.data, cri + ("default_runtime_name",)) is not ABSENT or has_header(
                text, cri):
            text = tk_set(text, cri + ("default_runtime_name",), name)
        else:
            ind = header_indent(text, cri + ("runtimes",))[:-2] if appended else ""
            block = render_table(cri, {"default_runtime_name": name}, ind, nl)
            if appended:
                appended += nl + block
            else:
                sep = "" if not text or text.endswith("\n") else nl
                appended = sep + (nl if text.strip() else "") + block
    if turn_on:
        text, appended = _turn_on_cdi(root, text, appended, expected, entry, turn_on)
    if appended:
        # After what an earlier install appended (still the file's end), the two are one block
        # for uninstall to take off; after other lines, the earlier block is what it looks for.
        before = entry.get("appended")
        if not isinstance(before, str):
            entry["appended"] = appended
        elif text.endswith(before):
            entry["appended"] = before + appended
    return _checked(root.path, text + appended, expected), entry


def _cdi_to_turn_on(eff: dict[str, Any], plugin: tuple[str, ...]) -> dict[str, Any]:
    """The CDI_KEYS install writes: those that differ from ours, but not a CDI_KEPT key that
    the configuration already sets."""
    out = {}
    for k, v in CDI_KEYS.items():
        have = _get_in(eff, plugin + (k,))
        if have != v and (k not in CDI_KEPT or have is ABSENT):
            out[k] = v
    return out


def _turn_on_cdi(root: D.Config, text: str, appended: str, expected: dict[str, Any],
                 entry: dict[str, Any], turn_on: dict[str, Any]) -> tuple[str, str]:
    """`turn_on` (CDI_KEYS that differ) set in the CRI plugin's table: in place where the file
    has that table, else as a table of its own appended; what they held is recorded once."""
    plugin = root.cri()[:2]
    nl = root.newline
    entry.setdefault("previous_cdi", {k: _slot(_get_in(root.data, plugin + (k,)))
                                      for k in CDI_KEYS})
    for k, v in turn_on.items():
        _set_in(expected, plugin + (k,), v)
    if has_header(text, plugin) or any(
            _get_in(root.data, plugin + (k,)) is not ABSENT for k in turn_on):
        for k, v in turn_on.items():
            text = tk_set(text, plugin + (k,), v)
        return text, appended
    block = render_table(plugin, turn_on, header_indent(text, plugin[:1]), nl)
    if appended:
        return text, appended + nl + block
    sep = "" if not text or text.endswith("\n") else nl
    return text, sep + (nl if text.strip() else "") + block


def _put_back_runtime(text: str, keys: tuple[str, ...], cur: dict[str, Any],
                      prev: dict[str, Any], expected: dict[str, Any],
                      changes: list[Change]) -> str:
    """The runtime table at `keys` from `cur` back to `prev`. Only what differs is written: a
    key rewritten by tomlkit loses its layout, and on containerd 2 config.toml's own runtime
    is not install's (as it was)."""
    for k in list(cur):
        if k not in prev:
            text = tk_set(text, keys + (k,), ABSENT)
    for k, v in prev.items():
        if cur.get(k) != v:
            text = tk_set(text, keys + (k,), v)
    if cur != prev:
        _set_in(expected, keys, prev)
        changes.append(Change(D.dotted(keys), "replaced", cur, prev))
    return text


def _put_back_cdi(root: D.Config, text: str, expected: dict[str, Any], entry: dict[str, Any],
                  changes: list[Change]) -> str:
    """CDI_KEYS install set that still hold its values go back to what they held before (a
    value someone changed since stays theirs)."""
    plugin = root.cri()[:2]
    prev = entry.get("previous_cdi")
    if not isinstance(prev, dict):
        return text
    for k, want in CDI_KEYS.items():
        now = _get_in(expected, plugin + (k,))
        was = _unslot(prev.get(k))
        if now != want or was == now:
            continue
        text = tk_set(text, plugin + (k,), was)
        _set_in(expected, plugin + (k,), was)
        changes.append(Change(D.dotted(plugin + (k,)), "removed" if was is ABSENT else
                              "replaced", now, was))
    return text


def plan_uninstall(root: D.Config, dropin: D.Config | None, req: Request,
                   journal: dict[str, Any]) -> Plan:
    """Put back what install changed (from the journal); without a journal entry remove a
    runtime or drop-in only when it is this package's."""
    cri = root.cri()
    name = req.runtime_name
    entry = _journal_entry(journal, name)
    files: list[FileEdit] = []
    changes: list[Change] = []
    warnings: list[str] = []
    text = root.text
    expected = D.deep_copy(root.data)
    own = dropin is not None and dropin.text.startswith(MARK)
    if dropin is not None:
        if own or entry.get("dropin") == str(dropin.path):
            files.append(FileEdit(dropin.path, dropin.raw, None))
            changes.append(Change(str(dropin.path), "removed", "drop-in", ABSENT))
        else:
            warnings.append(f"{dropin.path} was not written by nvdocker2: left in place")
    cur = _get_in(root.data, cri + ("runtimes", name))
    appended = entry.get("appended")
    if cur is not ABSENT:
        mine = bool(entry) or binary_name(cur) in req.own_runtime_paths
        if not mine:
            warnings.append(f'{root.path}: runtime "{name}" points at {binary_name(cur)!r}, not at '
                            "this package's runtime, and no install was recorded: left in place")
        elif isinstance(appended, str) and appended and text.endswith(appended):
            # The exact bytes install appended: taking them off gives back the file before.
            text = text[: -len(appended)]
            expected = loads_or(text, {"<error>": "unparsable"})
            # What they held: our runtime, or (where it was there before) only the default.
            # Whole tables that were not there before: taking them off only removes keys.
            for full in [cri + ("runtimes", name), cri + ("default_runtime_name",)] + [
                    cri[:2] + (k,) for k in CDI_KEYS]:
                was = _get_in(root.data, full)
                if was is not ABSENT and _get_in(expected, full) is ABSENT:
                    changes.append(Change(D.dotted(full), "removed", was, ABSENT))
            # A runtime that was there before, changed in place (the bytes held only the CDI
            # table or the default).
            left = _get_in(expected, cri + ("runtimes", name))
            prev = _unslot(entry.get("previous"))
            if isinstance(left, dict) and isinstance(prev, dict):
                text = _put_back_runtime(text, cri + ("runtimes", name), left, prev, expected,
                                         changes)
        else:
            prev = _unslot(entry.get("previous"))
            if prev is not ABSENT and isinstance(prev, dict):
                text = _put_back_runtime(text, cri + ("runtimes", name), cur, prev, expected,
                                         changes)
            else:
                text = drop_table(text, cri + ("runtimes", name))
                _set_in(expected, cri + ("runtimes", name), ABSENT)
                changes.append(Change(f"{D.dotted(cri)}.runtimes.{name}", "removed", cur, ABSENT))
                # The built-in runc install spelled out goes too, unchanged and alone: with no
                # runtimes table left, containerd's own runc is back.
                runc = _get_in(root.data, cri + ("runtimes", "runc"))
                rest = _get_in(expected, cri + ("runtimes",))
                if (entry.get("implicit_default") == runc and isinstance(rest, dict)
                        and list(rest) == ["runc"]):
                    text = drop_table(text, cri + ("runtimes", "runc"))
                    _set_in(expected, cri + ("runtimes", "runc"), ABSENT)
    text = _put_back_cdi(root, text, expected, entry, changes)
    # A runtime that was there before install (put back) or is not ours (left) stays.
    gone = _get_in(expected, cri + ("runtimes", name)) is ABSENT
    now_default = _get_in(loads_or(text, expected), cri + ("default_runtime_name",))
    # The default goes back to what install recorded; unrecorded, or recorded as this runtime,
    # it stays while the runtime does and goes with it.
    prev_d = _unslot(entry.get("previous_default")) if entry.get("set_default") else name
    if prev_d == name and gone:
        prev_d = ABSENT
    if now_default == name and prev_d != name:
        text = tk_set(text, cri + ("default_runtime_name",), prev_d)
        _set_in(expected, cri + ("default_runtime_name",), prev_d)
        changes.append(Change(f"{D.dotted(cri)}.default_runtime_name",
                              "removed" if prev_d is ABSENT else "replaced", name, prev_d))
    line = entry.get("import_line")
    added = entry.get("import_added")
    if added and added in root.imports() and not other_users(entry, journal, name):
        if isinstance(line, str) and line and line in text:
            text = text.replace(line, "", 1)
        else:
            doc = tomlkit.parse(text)
            arr = cast(Array, doc["imports"])  # a list of strings: parse() checked it
            del arr[[str(x) for x in arr].index(added)]
            text = tomlkit.dumps(doc)
        imps = [i for i in root.imports()]
        imps.remove(added)
        if imps or isinstance(line, str) and line and "imports" in loads_or(text, {}):
            expected["imports"] = imps
        else:
            expected.pop("imports", None)
        changes.append(Change("imports", "removed", added, ABSENT))
    new_root: bytes | None = root.raw
    if text != root.text:
        new_root = _checked(root.path, text, expected)
        # Every runtime the edit takes off is listed: the built-in runc install spelled out
        # goes with ours.
        left = runtimes(expected, cri, str(root.path))
        for other, table in runtimes(root.data, cri, str(root.path)).items():
            if other != name and other not in left:
                changes.append(Change(f"{D.dotted(cri)}.runtimes.{other}", "removed", table,
                                      ABSENT))
    if entry.get("file_existed") is False and root.existed and text.strip() in (
            "", f"version = {root.version}"):
        new_root = None
    files.insert(0, FileEdit(root.path, root.raw, new_root))
    changed = any(f.changed for f in files)
    rec = _with_entry(journal, root.path, name, None) if (changed or entry) else None
    expect: dict[str, Any] = {"present": {}, "absent": [name] if gone else [], "default": None}
    expect_old: dict[str, Any] = {"present": {}, "absent": [], "default": None}
    return Plan(tuple(files), tuple(changes), f"uninstall runtime {name} (containerd)", rec,
                expect, expect_old, warnings=tuple(warnings), journal_before_write=False)


def binary_name(rt: Any) -> Any:
    opts = rt.get("options") if isinstance(rt, dict) else None
    return opts.get("BinaryName") if isinstance(opts, dict) else None


def other_users(entry: dict[str, Any], journal: dict[str, Any], name: str) -> bool:
    """Another recorded runtime still needs the drop-in import."""
    rts = journal.get("runtimes") or {}
    return any(k != name and isinstance(v, dict) and v.get("dropin") for k, v in rts.items())
