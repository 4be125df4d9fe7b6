"""The runtime's per-user config.toml that install edits for a rootless Docker (reference §3).

A rootless dockerd's user cannot write device cgroups, so its GPU containers need
`[nvidia-container-cli] no-cgroups = true`. Root's global config.toml is shared with every
rootful engine of the host and is never touched here: the key goes into the user's own
`$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml` (else `~/.config/...`), which the
runtime reads over the global file only when it runs rootless. It is the second file of the
daemon.json transaction (backed up, written atomically, put back with daemon.json); what it
held before is recorded in daemon.json's journal, and uninstall puts that back only while the
key still holds what install wrote.

The edit itself (tomlkit, comments kept, one key changed) is toolkit_toml's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from nvdocker2 import locations, toolkit_config
from nvdocker2.changes import Change
from nvdocker2.engines.docker import toolkit_toml
from nvdocker2.errors import BadInput

TABLE = "nvidia-container-cli"
KEY = "no-cgroups"
JOURNAL_KEY = "user_config"  # in daemon.json's journal record


def install_path(env: Mapping[str, str] | None = None, euid: int | None = None) -> Path | None:
    """The per-user config.toml an install edits: only when Docker is rootless for this user
    (not root, `$XDG_RUNTIME_DIR/docker.sock` exists); None otherwise."""
    if locations.rootless_socket(env, euid) is None:
        return None
    path = toolkit_config.user_config_path(env)
    return Path(path) if path else None


def check_trusted(path: Path) -> None:
    """BadInput unless the runtime would read the file (the same trust checks): writing into a
    file it refuses would not help, and keeping its mode would keep it refused."""
    try:
        toolkit_config.read_user_file(str(path))
    except toolkit_config.ConfigError as e:
        raise BadInput(str(e), f"fix or remove {path}, then run install again; nothing was "
                               "changed") from None


def set_no_cgroups(raw: bytes | None,
                   path: Path) -> tuple[bytes | None, Change, dict[str, Any] | None]:
    """(new bytes, the change, the journal record of what it replaced; None: unchanged)."""
    return toolkit_toml.set_key(raw, path, TABLE, KEY, True)


def put_back(raw: bytes | None, record: dict[str, Any], path: Path
             ) -> tuple[bytes | None, Change | None, str | None]:
    """(bytes after undoing install's `record`, the change, a warning when it is left alone).

    The key goes back to what it held before install, unless someone changed it since; a
    table or file install created goes away again when nothing else is left in it."""
    return toolkit_toml.put_back(raw, record, path, TABLE, KEY, True)
