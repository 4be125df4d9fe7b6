"""`cdi refresh` (docs/reference.md §9): the CDI spec install --mode cdi wrote, regenerated from
the GPUs present and replaced (with a backup) by name in its trusted directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nvdocker2.engines.docker.cdi_spec import HEADER, build_spec
from nvdocker2.engines.docker.cdi_journal import (
    CdiJournal,
    recorded_paths,
    recorded_spec,
    spec_path,
)
from nvdocker2.errors import EnvironmentProblem
from nvdocker2.store.atomic import (
    TMP_MARK,
    AsRead,
    ChangedMeanwhile,
    Ownership,
    clean_stale_temps,
    os_error,
    remove_dead_temps,
    stage,
)
from nvdocker2.store.lock import clean_state_temps, locked, state_dir


@dataclass(frozen=True)
class RefreshOutcome:
    spec: str
    changed: bool
    present: bool  # a spec was there to refresh
    devices: tuple[str, ...]
    backup: str | None
    left_alone: str | None = None  # why a spec that is there is not install's to rewrite

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "changed": self.changed, "present": self.present,
                "devices": list(self.devices), "backup": self.backup,
                "left_alone": self.left_alone}

    def line(self) -> str:
        """What `cdi refresh` prints without --json: one line."""
        if not self.present:
            return (f"no CDI spec at {self.spec}: nothing to refresh "
                    "(nvdocker2 install --mode cdi writes one)")
        if self.left_alone:
            return f"left alone: {self.spec}: {self.left_alone}; nothing written"
        if self.changed:
            return f"rewrote {self.spec}: {', '.join(self.devices)} (backup {self.backup})"
        return (f"unchanged: {self.spec} already lists the GPUs present "
                f"({', '.join(self.devices)}); nothing written")


def _open_spec_dir(path: Path) -> int | None:
    """The spec's directory open for reading and replacing entries by name, None where it
    is missing; exit 3 when another user could have written it or swapped it."""
    from nvdocker2.host.files import Untrusted, open_trusted_dir

    try:
        return open_trusted_dir(str(path.parent))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Untrusted as e:
        raise EnvironmentProblem(
            f"CDI spec directory {path.parent}: {e}; nothing was read or written",
            f"make it and every directory above it root's and writable by no one else "
            f"(chown root {path.parent}; chmod go-w {path.parent}), then run again",
        ) from None
    except OSError as e:
        raise os_error(e, f"CDI spec directory {path.parent}") from None


def _read_spec(dir_fd: int, path: Path) -> tuple[bytes, os.stat_result] | None:
    """The spec's bytes and fstat, never through a symlink; exit 3 for a symlink or
    anything but a regular file at its name."""
    from nvdocker2.host.files import Untrusted, read_entry

    try:
        return read_entry(dir_fd, path.name, str(path))
    except Untrusted as e:
        raise EnvironmentProblem(
            f"{e}; nothing was read or written (cdi refresh replaces only the file "
            "install --mode cdi wrote)",
            f"remove it (rm {path}) and run nvdocker2 install --mode cdi again",
        ) from None
    except OSError as e:
        raise os_error(e, str(path)) from None


def command(config: Optional[Path], spec_dir: Optional[str], timeout: float) -> RefreshOutcome:
    """`cdi refresh` with its options: --config (default: this host's daemon.json),
    --cdi-spec-dir, --timeout; the runtime is the one beside nvdocker2."""
    from nvdocker2 import locations

    return refresh(locations.resolve_config(config)[0], spec_dir=spec_dir, timeout=timeout,
                   runtime_path=locations.default_runtime_path()[0])


def refresh(
    config: Path,
    *,
    spec_dir: str | None,
    runtime_path: str,
    timeout: float = 30.0,
    state: Path | None = None,
) -> RefreshOutcome:
    """Regenerate the spec install --mode cdi wrote from the GPUs present; write it (with a
    backup) only when it changed. A spec install did not write (its journal records none at
    that path) or no longer starts with its HEADER is left as it is; so is a missing one.

    The NVIDIA control nodes missing under the driver root are made first
    (nvdocker2.devnodes), so the spec lists them. The spec is read and replaced by name in
    its directory, opened once and trusted only as
    a program's would be (no other user could have written it or swapped it), never through
    a symlink: a symlink or a special file at the spec's name is exit 3."""
    st = state if state is not None else state_dir()
    path = spec_path(spec_dir) if spec_dir else (recorded_spec(st, config) or spec_path(None))
    with locked(st, timeout):
        clean_stale_temps(config)
        clean_state_temps(st)
        rec = CdiJournal(st, config).load()
        if str(path) not in recorded_paths(rec):
            if not os.path.lexists(path):
                return RefreshOutcome(str(path), False, False, (), None)
            return RefreshOutcome(str(path), False, True, (), None, left_alone=(
                "nvdocker2 install --mode cdi did not write it (its journal records no spec "
                "there)"))
        dir_fd = _open_spec_dir(path)
        if dir_fd is None:
            return RefreshOutcome(str(path), False, False, (), None)
        try:
            return _refresh_in(dir_fd, path, st, rec.get("runtime_path") or runtime_path)
        finally:
            os.close(dir_fd)


def _refresh_in(dir_fd: int, path: Path, state: Path, runtime_path: str) -> RefreshOutcome:
    remove_dead_temps(path.parent, f".{path.name}{TMP_MARK}")
    read = _read_spec(dir_fd, path)
    if read is None:
        return RefreshOutcome(str(path), False, False, (), None)
    old, old_stat = read
    if not old.startswith(HEADER.encode()):
        return RefreshOutcome(str(path), False, True, (), None, left_alone=(
            "it does not start with the line install --mode cdi writes (replaced since?)"))
    from nvdocker2.devnodes import create_before_spec

    create_before_spec()  # a control node missing now would be missing from the spec
    spec = build_spec(path, runtime_path)
    if spec.data == old:
        return RefreshOutcome(str(path), False, True, spec.devices, None)
    from nvdocker2.store.backups import Backups

    backups = Backups(state)
    backup = backups.create(path, old, "cdi refresh", Ownership.of(old_stat))
    try:
        with stage(path, spec.data, dir_fd=dir_fd) as staged:
            staged.commit(AsRead(old, old_stat))
    except ChangedMeanwhile:
        backups.discard(backup)  # nothing was replaced: the file keeps what is backed up
        raise
    backups.prune(path)
    return RefreshOutcome(str(path), True, True, spec.devices, backup.id)
