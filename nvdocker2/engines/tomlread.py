"""TOML values read with the standard library's tomllib (tomli before Python 3.11): one choice
for every engine whose files or status output are TOML (containerd's config.toml, CRI-O's
drop-ins and `crio status config`). tomllib gives line and column for a syntax error; edits
that keep a file's bytes use tomlkit or text (engines/containerd/edit.py)."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

__all__ = ["tomllib"]
