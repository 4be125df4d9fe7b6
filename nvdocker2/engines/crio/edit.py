"""What install and uninstall do to CRI-O's drop-in, as pure functions of its bytes: the Plan
(the new bytes, the changes, the journal record, what CRI-O must report after and before).

The drop-in holds every runtime nvdocker2 installed there: install adds or replaces one
`[crio.runtime.runtimes.NAME]` table (and `default_runtime` with --set-default), uninstall
removes one (and `default_runtime` when it named it), and the file goes only when no runtime
is left in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.base import FileEdit, Plan, Request
from nvdocker2.engines.crio.document import (
    DEFAULT_KEY,
    RUNTIMES,
    default_name,
    parse,
    render,
    runtime_table,
    runtimes,
)


def _expect(data: dict[str, Any], absent: str | None = None,
            default: bool = False) -> dict[str, Any]:
    """What CRI-O reports once it reads the drop-in holding `data`: its runtimes, not `absent`,
    and its default when the change is about the default (a later drop-in may set another)."""
    return {"present": {n: str(t.get("runtime_path", "")) for n, t in runtimes(data).items()},
            "absent": [absent] if absent else [],
            "default": default_name(data) if default else None}


def _record(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    return {"config": str(path), "runtimes": {n: {"dropin": True} for n in runtimes(data)}} \
        if runtimes(data) else {}


def plan_install(path: Path, old: bytes | None, req: Request) -> Plan:
    """Install `req`'s runtime into the drop-in whose bytes are `old` (None: no file)."""
    data = parse(path, old)
    before = runtimes(data).get(req.runtime_name, ABSENT)
    new_data = {**data, "crio": {**data.get("crio", {}), "runtime": {
        **data.get("crio", {}).get("runtime", {})}}}
    rt = new_data["crio"]["runtime"]
    table = runtime_table(req.runtime_path)
    rt["runtimes"] = {**rt.get("runtimes", {}), req.runtime_name: table}
    changes = [Change(f"{RUNTIMES}.{req.runtime_name}", "unchanged" if before == table else
                      ("added" if before is ABSENT else "replaced"), before, table)]
    if req.set_default:
        was = default_name(data)
        rt["default_runtime"] = req.runtime_name
        changes.append(Change(DEFAULT_KEY, "unchanged" if was == req.runtime_name else
                              ("added" if was is None else "replaced"),
                              ABSENT if was is None else was, req.runtime_name))
    # Nothing to change keeps the bytes as they are (a comment added by hand included).
    new = old if all(not c.changed for c in changes) else render(new_data)
    rec = _record(path, new_data) if new != old else None
    return Plan((FileEdit(path, old, new),), tuple(changes),
                f"install runtime {req.runtime_name} (crio)", rec,
                _expect(new_data, None, req.set_default),
                _expect(data, req.runtime_name if before is ABSENT else None,
                        req.set_default and default_name(data) is not None), check=req)


def plan_uninstall(path: Path, old: bytes | None, req: Request) -> Plan:
    """Take `req`'s runtime out of the drop-in whose bytes are `old`."""
    data = parse(path, old)
    name = req.runtime_name
    before = runtimes(data).get(name, ABSENT)
    if before is ABSENT:
        return Plan((FileEdit(path, old, old),),
                    (Change(f"{RUNTIMES}.{name}", "unchanged"),),
                    f"uninstall runtime {name} (crio)", None,
                    _expect(data, name), _expect(data))
    rt = {**data["crio"]["runtime"],
          "runtimes": {n: t for n, t in runtimes(data).items() if n != name}}
    changes = [Change(f"{RUNTIMES}.{name}", "removed", before, ABSENT)]
    was_default = rt.get("default_runtime") == name
    if was_default:
        del rt["default_runtime"]
        changes.append(Change(DEFAULT_KEY, "removed", name, ABSENT))
    new_data = {**data, "crio": {**data["crio"], "runtime": rt}}
    new = render(new_data)
    if new is None:
        changes.append(Change(str(path), "removed", "drop-in", ABSENT))
    return Plan((FileEdit(path, old, new),), tuple(changes),
                f"uninstall runtime {name} (crio)", _record(path, new_data),
                _expect(new_data, name), _expect(data, None, was_default),
                journal_before_write=False)
