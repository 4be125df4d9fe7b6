"""How the commands' results look: a transaction's outcome, a status report, a list of
backups. One JSON object with --json, else lines (warnings on stderr)."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from nvdocker2.cli.app import emit_json, Out, to_stderr
from nvdocker2.engines.front import BackupList, Outcome, Report


def render(res: Any, extra_notes: list[str], extra_warnings: list[str],
           extra_json: Optional[dict] = None, short: Callable[[Any], str] = repr) -> None:
    """A transaction's Result: one JSON object, or what changed, the backup, the reload and
    whether the engine reports it."""
    warnings = list(extra_warnings) + list(res.warnings)
    notes = list(extra_notes) + list(res.notes)
    if Out.json:
        obj = res.to_json()
        obj.update(extra_json or {})
        obj["warnings"] = warnings
        obj["notes"] = notes
        emit_json(obj)
        return
    for w in warnings:
        to_stderr(f"warning: {w}")
    out = [f"config: {res.config} ({res.config_reason})" if res.config_reason
           else f"config: {res.config}"]
    if res.dry_run:
        if res.changed:
            sys.stdout.write("\n".join(out) + "\n" + (res.diff or ""))
            sys.stdout.write(f"dry run: {res.config} was not changed\n")
        else:
            sys.stdout.write("\n".join(out)
                             + f"\nunchanged: {res.config} already says that (dry run)\n")
        sys.stdout.write("".join(f"unchecked: {u}\n" for u in res.unchecked))
        sys.stdout.write("".join(f"note: {n}\n" for n in notes))
        return
    # The engine transactions name their engine in config_reason ("containerd engine").
    who = (res.config_reason[: -len(" engine")] if res.config_reason.endswith(" engine")
           else "dockerd")
    acted = "reloaded" if who == "dockerd" else "restarted"
    if not res.changed and res.reload != "none":  # the engine was not running the file yet
        out.append(f"unchanged: {res.config} already says that; nothing written, {who} {acted} "
                   "to run it")
        out.append("verified: " + (f"yes, {who} reports the change" if res.verified else "no"))
    elif not res.changed:
        out.append(f"unchanged: {res.config} already says that; nothing written, {who} not "
                   + acted)
    else:
        for c in res.changes:
            if not c.changed:
                continue
            if c.action == "removed":
                out.append(f"removed {c.key}")
            elif c.action == "restored":
                out.append(f"restored {c.key} from backup {c.after}")
            else:
                out.append(f"{c.action} {c.key}: {short(c.after)}")
        if res.backup:
            where = (f" ({res.backup_file})" if res.backup_file
                     else " (the file did not exist before)")
            out.append(f"backup: {res.backup}{where}")
        out.append(f"reload: {res.reload}")
        out.append("verified: " + (f"yes, {who} reports the change" if res.verified else "no"))
    for n in notes:
        out.append(f"note: {n}")
    sys.stdout.write("\n".join(out) + "\n")



def outcome(front: Any, out: Outcome) -> int:
    render(out.result, out.notes, out.warnings, out.extra_json, front.short)
    if out.after and not Out.json:
        sys.stdout.write("".join(f"{line}\n" for line in out.after))
    return 0


def report(rep: Report) -> int:
    if Out.json:
        emit_json(rep.json)
        return rep.code
    for w in rep.warnings:
        to_stderr(f"warning: {w}")
    sys.stdout.write("\n".join(rep.lines) + "\n")
    return rep.code


def _backup_cells(b: Any) -> str:
    """ID, time, size and the start of the sha256 of a backup, in the columns of `backups`."""
    size = f"{b.size}" if b.existed else "-"
    sha = (b.sha256 or "(no file)")[:12]
    return f"{b.id:<29} {b.time[:19]:<20} {size:>7}  {sha:<12}"



def backups(bl: BackupList) -> int:
    if not bl.grouped:
        return _one_file(bl)
    if Out.json:
        emit_json({"engine": bl.engine, "config": bl.config, "config_reason": bl.config_reason,
                    "files": bl.files, "backup_dir": bl.backup_dir,
                    "backups": sorted(({**b.to_json(), "transaction": tag}
                                       for tag, bs in bl.groups for b in bs),
                                      key=lambda j: (j["time"], j["id"]), reverse=True)})
        return 0
    lines = [f"engine: {bl.engine}", f"config: {bl.config} ({bl.config_reason})",
             "files: " + ", ".join(bl.files)]
    if not bl.groups:
        lines.append(f"no backups in {bl.backup_dir}")
    else:
        lines.append(f"  {'ID':<29} {'TIME (UTC)':<20} {'SIZE':>7}  {'SHA256':<12}  FILE")
        for tag, bs in bl.groups:
            reason = bs[0].reason[: -len(tag) - 3] if tag else bs[0].reason
            lines.append(f"transaction {tag}: {reason}" if tag else f"backup: {reason}")
            lines.extend(f"  {_backup_cells(b)}  {b.config}" for b in bs)
        lines.append(f"restore one with: nvdocker2 rollback ID --engine {bl.engine} "
                     f"--config {bl.config} (the other files of its transaction come back too)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _one_file(bl: BackupList) -> int:
    """One file's backups, without transactions (daemon.json's)."""
    found = [b for _, bs in bl.groups for b in bs]
    if Out.json:
        emit_json({"config": bl.config, "config_reason": bl.config_reason,
                    "backup_dir": bl.backup_dir, "backups": [b.to_json() for b in found]})
        return 0
    lines = [f"config: {bl.config} ({bl.config_reason})"]
    if not found:
        lines.append(f"no backups in {bl.backup_dir}")
    else:
        lines.append(f"{'ID':<29} {'TIME (UTC)':<20} {'SIZE':>7}  {'SHA256':<12}  REASON")
        for b in found:
            lines.append(f"{_backup_cells(b)}  {b.reason}")
        lines.append(f"restore one with: nvdocker2 rollback ID --config {bl.config}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
