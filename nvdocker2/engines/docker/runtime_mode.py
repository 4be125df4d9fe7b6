"""`install --mode direct|legacy`: `[nvidia-container-runtime] mode` in the runtime's global
config.toml ($NVIDIA_CONTAINER_RUNTIME_CONFIG, else /etc/nvidia-container-runtime/config.toml)
(reference §7).

It is a file of the daemon.json transaction, like rootless.py's per-user file: locked, backed
up, written atomically and restored with daemon.json, shown in a dry run's diff, put back by
`rollback` (the transaction's backups) and by `uninstall` (daemon.json's journal records what
the key held before). The file is root's and every container start reads it, so it is edited
only where no other user could have put it or its directory there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nvdocker2 import toolkit_config
from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.docker import toolkit_toml
from nvdocker2.errors import BadInput, NvDockerError

TABLE = "nvidia-container-runtime"
KEY = "mode"
JOURNAL_KEY = "runtime_mode"  # in daemon.json's journal record


def config_path() -> Path:
    """The runtime's config.toml: $NVIDIA_CONTAINER_RUNTIME_CONFIG, else the default path."""
    return Path(toolkit_config.config_path()[0])


def check_trusted(path: Path) -> None:
    """BadInput unless only root (or this user) could have put the file, or the directory it
    goes in, where it is: a symlink another user planted there would have root write where it
    leads, and a file another user can change would change what every container runs."""
    from nvdocker2.host.run import unsafe_to_run

    if os.path.lexists(path):
        why = unsafe_to_run(path, owners=(0, os.geteuid()))
    else:
        d = path.parent
        while not os.path.lexists(d) and d != d.parent:
            d = d.parent
        why = unsafe_to_run(d, want_dir=True)
    if why is not None:
        raise BadInput(f"{path}: refusing to edit this config.toml: {why}",
                       f"make {path} and its directories root's and writable by root only "
                       "(chown root:root, chmod go-w), or remove what another user put "
                       "there; nothing was changed")


def set_mode(raw: bytes | None, path: Path, mode: str
             ) -> tuple[bytes | None, Change, dict[str, Any] | None]:
    """(new bytes, the change, the journal record of what it replaced; None: unchanged)."""
    return toolkit_toml.set_key(raw, path, TABLE, KEY, mode)


def record_install(journal: dict[str, Any], path: Path, record: dict[str, Any] | None,
                   mode: str) -> dict[str, Any]:
    """daemon.json's journal `journal` with install's `record` of the mode: the first install
    recorded what was there before, a later one only changes what was installed."""
    earlier = journal.get(JOURNAL_KEY)
    if isinstance(earlier, dict) and earlier.get("path") == str(path):
        if record is None and earlier.get("installed") == mode:
            return journal
        return dict(journal, **{JOURNAL_KEY: dict(earlier, installed=mode)})
    if isinstance(earlier, dict):
        raise BadInput(
            f"an earlier install --mode set the mode in {earlier.get('path')}, not in {path}",
            f"run nvdocker2 uninstall first (it puts {earlier.get('path')} back), or point "
            f"NVIDIA_CONTAINER_RUNTIME_CONFIG at {earlier.get('path')}")
    if record is None:
        return journal
    return dict(journal, **{JOURNAL_KEY: record})


def put_back(raw: bytes | None, record: dict[str, Any], path: Path
             ) -> tuple[bytes | None, Change | None, str | None]:
    """(bytes after undoing install's `record`, the change, a warning when it is left alone)."""
    return toolkit_toml.put_back(raw, record, path, TABLE, KEY, record.get("installed"))


def status(journal: dict[str, Any]) -> dict[str, Any]:
    """The mode config.toml holds now and whether it is the one install set:
    {"config", "mode" (None: not set, the runtime runs legacy), "installed" (None: install
    set none), "matches", "error"}."""
    rec = journal.get(JOURNAL_KEY)
    path = Path(rec["path"]) if isinstance(rec, dict) and isinstance(rec.get("path"), str) \
        else config_path()
    installed = rec.get("installed") if isinstance(rec, dict) else None
    out: dict[str, Any] = {"config": str(path), "mode": None, "installed": installed,
                           "matches": None, "error": None}
    try:
        from nvdocker2.engines.transaction import read

        now = toolkit_toml.current(read(path), path, TABLE, KEY)
    except NvDockerError as e:
        out["error"] = e.message
        return out
    out["mode"] = None if now is ABSENT else now
    if installed is not None:
        out["matches"] = now == installed
    return out


def describe(info: dict[str, Any]) -> str:
    """status()'s line for `status`."""
    where = info["config"]
    if info["error"]:
        return f"runtime mode: {where} cannot be read: {info['error']}"
    now = info["mode"]
    shown = f'"{now}"' if isinstance(now, str) else "not set (legacy)"
    line = f"runtime mode: {shown} in {where}"
    installed = info["installed"]
    if installed is None:
        return line
    if info["matches"]:
        return f"{line} (as install --mode {installed} set it)"
    return f"{line} (install --mode {installed} set \"{installed}\"; changed since)"
