"""Pure edits of daemon.json's `features` for CDI mode (reference §9), table-tested like edit.py.

dockerd 25.0–28.1 registers CDI only with `"features": {"cdi": true}`; from 28.2 CDI is on
unless the file says `"cdi": false`. Every other feature, and the key order, stays as it was
(NVIDIA's tool replaces the whole object). Nothing here reads files or asks dockerd.
"""

from __future__ import annotations

import re
from typing import Any

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.docker.daemonjson.edit import ShapeError, type_name

FEATURES = "features"
CDI = "cdi"
CDI_SPEC_DIRS = "cdi-spec-dirs"
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_MIN = (25, 0)  # first Docker with CDI
CDI_DEFAULT_ON = (28, 2)  # first Docker with CDI on by default
SUPPORTED = "Docker 25.0 to 28.1 (with features.cdi, which install sets) or 28.2 and later"

_VERSION = re.compile(r"(\d+)\.(\d+)")


def version_tuple(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a Docker version string ("26.1.5+dfsg1", "28.5.2"), or None."""
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _features(doc: dict[str, Any]) -> Any:
    value = doc.get(FEATURES, ABSENT)
    if value is not ABSENT and not isinstance(value, dict):
        raise ShapeError(
            FEATURES,
            f'"features" is {type_name(value)}, not an object',
            'write it as "features": {"cdi": true}',
        )
    cdi = value.get(CDI, ABSENT) if isinstance(value, dict) else ABSENT
    if cdi is not ABSENT and not isinstance(cdi, bool):
        raise ShapeError(
            f"{FEATURES}.{CDI}",
            f'"features.cdi" is {type_name(cdi)}, not a boolean',
            'write it as "cdi": true',
        )
    return value


def cdi_setting(doc: dict[str, Any]) -> Any:
    """`features.cdi` as the file says it (True, False or ABSENT); ShapeError on wrong types."""
    features = _features(doc)
    return features.get(CDI, ABSENT) if isinstance(features, dict) else ABSENT


def enable_cdi(doc: dict[str, Any],
               version: tuple[int, int] | None) -> tuple[dict[str, Any], Change]:
    """The file with CDI on for a dockerd of `version` (None: unknown, so say it explicitly).

    From 28.2 only an explicit `false` is changed; before, `"cdi": true` is merged in beside
    the other features. The input is not changed.
    """
    key = f"{FEATURES}.{CDI}"
    setting = cdi_setting(doc)
    default_on = version is not None and version >= CDI_DEFAULT_ON
    if setting is True or (setting is ABSENT and default_on):
        return doc, Change(key, "unchanged", setting, setting)
    return put_cdi(doc, True)


def put_cdi(doc: dict[str, Any], value: Any) -> tuple[dict[str, Any], Change]:
    """Set `features.cdi` to `value` exactly (ABSENT removes it; an emptied `features` that we
    created goes too only when the caller asks, via `drop_empty_features`)."""
    key = f"{FEATURES}.{CDI}"
    features = _features(doc)
    before = features.get(CDI, ABSENT) if isinstance(features, dict) else ABSENT
    if before is value or (before is not ABSENT and value is not ABSENT and before == value):
        return doc, Change(key, "unchanged", before, value)
    new = dict(doc)
    feats = dict(features) if isinstance(features, dict) else {}
    if value is ABSENT:
        feats.pop(CDI, None)
        action = "removed"
    else:
        feats[CDI] = value
        action = "added" if before is ABSENT else "replaced"
    new[FEATURES] = feats
    return new, Change(key, action, before, value)


def drop_empty_features(doc: dict[str, Any]) -> tuple[dict[str, Any], Change]:
    """Remove `features` when it is an empty object (install created it)."""
    if doc.get(FEATURES, ABSENT) == {}:
        new = {k: v for k, v in doc.items() if k != FEATURES}
        return new, Change(FEATURES, "removed", {}, ABSENT)
    return doc, Change(FEATURES, "unchanged")


def spec_dirs(doc: dict[str, Any]) -> tuple[str, ...]:
    """The CDI spec directories a dockerd started with this file reads."""
    dirs = doc.get(CDI_SPEC_DIRS, ABSENT)
    if isinstance(dirs, list) and all(isinstance(d, str) for d in dirs):
        return tuple(dirs)
    return DEFAULT_SPEC_DIRS
