"""Pure edits of a parsed daemon.json: each takes the top-level dict and returns a new dict and a
`Change` saying what happened. The input is never modified, so callers can compare before and
after and the document can write untouched values back from their original text.

Types are checked before a nested key is touched, and the error names the key: dockerd would
refuse such a file, and guessing a repair could lose what the operator meant.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.docker.daemonjson.document import same
from nvdocker2.errors import BadInput

RESERVED_RUNTIMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2")
RUNTIMES = "runtimes"
DEFAULT_RUNTIME = "default-runtime"




class ShapeError(BadInput):
    """A key of daemon.json has the wrong type; `key` is its dotted path."""

    def __init__(self, key: str, message: str, hint: str) -> None:
        super().__init__(message, hint)
        self.key = key


def type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    if v is None:
        return "null"
    return "a number"


def check_shape(doc: Any) -> None:
    """Refuse (exit 2) what the edits cannot work on: a top level that is not an object,
    `runtimes` not an object, a runtime entry not an object, `default-runtime` not a string."""
    if not isinstance(doc, dict):
        raise ShapeError(
            "",
            f"the top level is {type_name(doc)}, not an object",
            "daemon.json must be a JSON object: { ... }",
        )
    rts = doc.get(RUNTIMES, ABSENT)
    if rts is not ABSENT:
        if not isinstance(rts, dict):
            raise ShapeError(
                RUNTIMES,
                f'"runtimes" is {type_name(rts)}, not an object',
                'write it as "runtimes": {"NAME": {"path": "/abs/path"}}',
            )
        for name, entry in rts.items():
            if not isinstance(entry, dict):
                raise ShapeError(
                    f"{RUNTIMES}.{name}",
                    f'"runtimes" entry "{name}" is {type_name(entry)}, not an object',
                    f'write it as "{name}": {{"path": "/abs/path"}}',
                )
    dflt = doc.get(DEFAULT_RUNTIME, ABSENT)
    if dflt is not ABSENT and not isinstance(dflt, str):
        raise ShapeError(
            DEFAULT_RUNTIME,
            f'"default-runtime" is {type_name(dflt)}, not a string',
            'write it as "default-runtime": "runc" (a runtime name), or remove it',
        )


def check_name(name: str, *, adding: bool) -> None:
    """A runtime name we may write: not empty, no whitespace, not one of dockerd's own."""
    if not name or any(ch.isspace() or ord(ch) < 32 for ch in name):
        raise BadInput(
            f"runtime name {name!r} is empty or contains whitespace",
            "pass --runtime-name NAME, e.g. --runtime-name nvidia",
        )
    if adding and name in RESERVED_RUNTIMES:
        raise BadInput(
            f'runtime name "{name}" is reserved by dockerd',
            "choose another --runtime-name (dockerd ignores or refuses an entry with this name)",
        )


def runtime_entry(path: str, args: Sequence[str] | None = None) -> dict[str, Any]:
    """The entry reference §2 prescribes: {"path": ABS} plus "runtimeArgs" when args are given."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise BadInput(
            f"runtime path {path!r} is not absolute",
            "pass --runtime-path /absolute/path/to/nvidia-container-runtime "
            "(dockerd's PATH may not hold it)",
        )
    entry: dict[str, Any] = {"path": path}
    if args:
        entry["runtimeArgs"] = list(args)
    return entry


def _copy_top(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc)


def put_runtime(doc: dict[str, Any], name: str, entry: Any) -> tuple[dict[str, Any], Change]:
    """Set `runtimes[name]` to `entry` exactly (ABSENT removes it), keeping key order.

    Used by uninstall to put back what install replaced. Creates `runtimes` when needed.
    """
    check_shape(doc)
    key = f"{RUNTIMES}.{name}"
    rts = doc.get(RUNTIMES, ABSENT)
    before = rts.get(name, ABSENT) if isinstance(rts, dict) else ABSENT
    if entry is ABSENT:
        if before is ABSENT:
            return doc, Change(key, "unchanged")
        new = _copy_top(doc)
        new_rts = dict(rts)
        del new_rts[name]
        new[RUNTIMES] = new_rts
        return new, Change(key, "removed", before, ABSENT)
    if before is not ABSENT and same(before, entry):
        return doc, Change(key, "unchanged", before, before)
    new = _copy_top(doc)
    new_rts = dict(rts) if isinstance(rts, dict) else {}
    new_rts[name] = entry
    new[RUNTIMES] = new_rts
    return new, Change(key, "added" if before is ABSENT else "replaced", before, entry)


def add_runtime(
    doc: dict[str, Any], name: str, path: str, args: Sequence[str] | None = None
) -> tuple[dict[str, Any], Change]:
    """Add or replace runtime `name` with {"path": path[, "runtimeArgs": args]}."""
    check_shape(doc)
    check_name(name, adding=True)
    return put_runtime(doc, name, runtime_entry(path, args))


def remove_runtime(doc: dict[str, Any], name: str) -> tuple[dict[str, Any], Change]:
    """Remove runtime `name`; `runtimes` stays (possibly `{}`). Unchanged when not there."""
    check_shape(doc)
    check_name(name, adding=False)
    return put_runtime(doc, name, ABSENT)


def drop_empty_runtimes(doc: dict[str, Any]) -> tuple[dict[str, Any], Change]:
    """Remove a `"runtimes": {}` key (used when the key did not exist before install)."""
    check_shape(doc)
    rts = doc.get(RUNTIMES, ABSENT)
    if isinstance(rts, dict) and not rts:
        new = _copy_top(doc)
        del new[RUNTIMES]
        return new, Change(RUNTIMES, "removed", {}, ABSENT)
    return doc, Change(RUNTIMES, "unchanged")


def runtimes(doc: dict[str, Any]) -> dict[str, Any]:
    """The file's runtimes table ({} when it is missing or not a table)."""
    rts = doc.get(RUNTIMES, {})
    return rts if isinstance(rts, dict) else {}


def defined_runtimes(doc: dict[str, Any]) -> list[str]:
    return list(runtimes(doc))


def is_defined(doc: dict[str, Any], name: str) -> bool:
    """True when dockerd would accept `name` as default-runtime with this file."""
    return name in BUILTIN_RUNTIMES or name in defined_runtimes(doc)


def set_default(doc: dict[str, Any], name: str) -> tuple[dict[str, Any], Change]:
    """Make `name` the default runtime; it must be defined (dockerd refuses to start else)."""
    check_shape(doc)
    check_name(name, adding=False)
    if not is_defined(doc, name):
        raise BadInput(
            f'cannot make "{name}" the default runtime: it is not defined in "runtimes"',
            f"install the runtime first (nvdocker2 install --runtime-name {name})",
        )
    return put_default(doc, name)


def put_default(doc: dict[str, Any], value: Any) -> tuple[dict[str, Any], Change]:
    """Set `default-runtime` to `value` exactly (ABSENT removes the key)."""
    check_shape(doc)
    before = doc.get(DEFAULT_RUNTIME, ABSENT)
    if value is ABSENT:
        if before is ABSENT:
            return doc, Change(DEFAULT_RUNTIME, "unchanged")
        new = _copy_top(doc)
        del new[DEFAULT_RUNTIME]
        return new, Change(DEFAULT_RUNTIME, "removed", before, ABSENT)
    if before == value and type(before) is type(value):
        return doc, Change(DEFAULT_RUNTIME, "unchanged", before, before)
    new = _copy_top(doc)
    new[DEFAULT_RUNTIME] = value
    return new, Change(DEFAULT_RUNTIME, "added" if before is ABSENT else "replaced", before, value)


def unset_default(doc: dict[str, Any]) -> tuple[dict[str, Any], Change]:
    """Remove `default-runtime` (dockerd then uses runc)."""
    return put_default(doc, ABSENT)


def dangling_default(doc: dict[str, Any]) -> str | None:
    """The default-runtime value when it names a runtime the file does not define, else None.

    Names with a dot are containerd shims (accepted by dockerd 23+) and are not dangling.
    """
    d = doc.get(DEFAULT_RUNTIME, ABSENT)
    if isinstance(d, str) and d and not is_defined(doc, d) and "." not in d:
        return d
    return None
