"""dockerd as the transaction's service: what it must report, how it is reloaded and asked.

How dockerd is reloaded and asked what it runs is behind the `Daemon` protocol (the real one is
nvdocker2.engines.docker.service.daemon; `NoDaemon` is `--reload none`); `DaemonService` fits a
Daemon to the engine transaction's `Service`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nvdocker2.engines.docker.daemonjson import document, edit
from nvdocker2.changes import ABSENT
from nvdocker2.engines.base import Service, VerifyFailed

__all__ = ["Daemon", "DaemonService", "Expectation", "NoDaemon", "VerifyFailed", "expectation",
           "transitional"]


@dataclass(frozen=True)
class Expectation:
    """What dockerd must report through /info after a reload."""

    present: dict[str, str]  # runtime name -> path dockerd must report
    absent: tuple[str, ...]  # runtime names dockerd must no longer report
    default_runtime: str  # DefaultRuntime dockerd must report ("runc" when unset)
    # CDI mode (docs/reference.md §9): a directory /info `CDISpecDirs` must hold, and devices its
    # `DiscoveredDevices` must list (asked only of Docker >= 28.2, which lists them).
    cdi_spec_dir: str | None = None
    cdi_devices: tuple[str, ...] = ()
    cdi_devices_gone: tuple[str, ...] = ()  # devices /info must no longer list


class Daemon(Protocol):
    """How the running dockerd is told about a new daemon.json and checked afterwards."""

    strategy: str  # what goes into "reload" in --json / output ("none", "signal", ...)
    verifies: bool  # False for NoDaemon

    def check_candidate(self, config_path: Path, candidate: dict[str, Any],
                        candidate_file: Path) -> None:
        """Raise BadInput before anything is written (flag/file conflicts, ...)."""

    def reload(self) -> None:
        """Make dockerd read the file; raise EnvironmentProblem if it cannot."""

    def verify(self, expect: Expectation, timeout: float) -> str | None:
        """Raise VerifyFailed(reason) when dockerd does not report `expect` within `timeout`;
        return a warning when it does but its taking the file is not proven (reference §8)."""


class NoDaemon:
    """`--reload none`: the file is written, dockerd is neither reloaded nor asked."""

    strategy = "none"
    verifies = False

    def check_candidate(self, config_path: Path, candidate: dict[str, Any],
                        candidate_file: Path) -> None:
        return None

    def reload(self) -> None:
        return None

    def verify(self, expect: Expectation, timeout: float) -> None:
        return None


def expectation(target: dict[str, Any], before: dict[str, Any],
                must_have: dict[str, str] | None = None) -> Expectation:
    """What dockerd must report once it runs `target` after running `before`.

    Only runtimes whose entries differ are checked (plus `must_have`), so an unrelated entry
    that dockerd reports differently cannot fail the change.
    """
    t, b = edit.runtimes(target), edit.runtimes(before)
    present: dict[str, str] = {}
    for name, entry in t.items():
        if document.same(entry, b.get(name, ABSENT)):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            present[name] = entry["path"]
    if must_have:
        present.update(must_have)
    absent = tuple(n for n in b if n not in t)
    d = target.get(edit.DEFAULT_RUNTIME)
    return Expectation(present, absent, d if isinstance(d, str) and d else "runc")


def transitional(target: dict[str, Any], current: dict[str, Any],
                 running_default: str | None = None) -> dict[str, Any] | None:
    """The in-between file a SIGHUP reload needs, or None (docs/reference.md §2).

    dockerd replaces its runtimes and default only when the keys are in the file: when `target`
    lacks them but `current` sets them, first reload a file holding `"runtimes": {}` and
    `"default-runtime": "runc"` (plus the rest of `target`), then write `target` itself. The
    same for the default dockerd runs (`running_default`, from /info) when no file names it:
    kept, it may name a runtime `target` drops, and dockerd 20.10 crashes on that reload.
    """
    need_rt = edit.RUNTIMES not in target and bool(edit.runtimes(current))
    cur_d = current.get(edit.DEFAULT_RUNTIME)
    need_d = edit.DEFAULT_RUNTIME not in target and any(
        isinstance(d, str) and d not in ("", "runc") for d in (cur_d, running_default))
    if not (need_rt or need_d):
        return None
    out = dict(target)
    if need_rt:
        out[edit.RUNTIMES] = {}
    if need_d:
        out[edit.DEFAULT_RUNTIME] = "runc"
    return out


def needs_transition(daemon: Any) -> bool:
    return bool(getattr(daemon, "needs_transition", daemon.strategy != "none"))


def _log_offset(log: Path | None) -> int:
    if log is None:
        return 0
    try:
        return os.path.getsize(log)
    except OSError:
        return 0


def _log_excerpt(log: Path | None, offset: int, lines: int = 3) -> str:
    """The last error lines dockerd logged since `offset`, for the exit-4 message."""
    if log is None:
        return ""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""
    picked = [
        ln.strip()
        for ln in text.splitlines()
        if "level=error" in ln or "level=fatal" in ln or "level=warn" in ln
    ]
    return " | ".join(picked[-lines:])


class DaemonService(Service):
    """A `Daemon` as the transaction's service: apply is dockerd's reload (a failed SIGHUP
    means dockerd never saw the file, so only the file goes back)."""

    verb = "reload"
    reapply_after_failed_apply = False

    def __init__(self, daemon: Daemon, dockerd_log: Path | None = None) -> None:
        self.daemon = daemon
        self.dockerd_log = dockerd_log

    # The daemon may decide its strategy while the change is planned (CDI mode): ask each time.
    @property
    def strategy(self) -> str:  # type: ignore[override]
        return self.daemon.strategy

    @property
    def verifies(self) -> bool:  # type: ignore[override]
        return bool(self.daemon.verifies)

    def apply(self) -> None:
        self.daemon.reload()

    def verify(self, expect: Any, timeout: float) -> str | None:
        return self.daemon.verify(expect, timeout)

    def settle(self, ctx: Any, expect: Any) -> bool | None:
        """Reload an unchanged file that dockerd is not running (None: it runs it already, or
        this run may not reload); else whether dockerd was then seen running it.

        An earlier run with --reload none, one stopped between its rename and its reload
        (SIGKILL, power cut) or a hand edit leaves the file right and dockerd on the old one:
        the next run writes nothing, so it must reload. Which of those it was is not known."""
        lags = getattr(self.daemon, "lags_behind", None)
        if lags is None or not lags(expect):
            return None
        ctx.notes.append("dockerd was not running this file yet (an earlier run with --reload "
                         "none or an interrupted one wrote it, or a hand edit): reloaded it")
        self.daemon.reload()
        unproven = self.daemon.verify(expect, ctx.timeout)
        if unproven:
            ctx.warnings.append(unproven)
        return not unproven

    def mark(self) -> int:
        return _log_offset(self.dockerd_log)

    def rejected_hint(self, process: str, mark: Any) -> str:
        excerpt = _log_excerpt(self.dockerd_log, mark or 0)
        if excerpt:
            return f"dockerd logged: {excerpt}"
        # The log the daemon found (its --dockerd-log, journal or stderr file) when it knows.
        where = str(self.dockerd_log) if self.dockerd_log else (
            getattr(self.daemon, "log_description", None) or "journalctl -u docker")
        return f"see dockerd's log ({where})"


def describe_expectation(expect: Expectation) -> str:
    parts = [f"runtime {name} = {path}" for name, path in sorted(expect.present.items())]
    parts += [f"no runtime {name}" for name in expect.absent]
    parts.append(f"default runtime {expect.default_runtime}")
    if expect.cdi_spec_dir is not None:
        parts.append(f"CDI spec directory {expect.cdi_spec_dir}")
        if expect.cdi_devices:
            parts.append(f"CDI devices {', '.join(expect.cdi_devices)}")
    if expect.cdi_devices_gone:
        parts.append(f"no CDI devices {', '.join(expect.cdi_devices_gone)}")
    return ", ".join(parts)


def _discovered(info: Mapping[str, Any]) -> set[Any]:
    listed = info.get("DiscoveredDevices")
    return {d.get("ID") for d in listed or [] if isinstance(d, dict)}


def cdi_mismatches(info: Mapping[str, Any], expect: Expectation) -> list[str]:
    """What /info says about CDI that differs from `expect` (docs/reference.md §9)."""
    gone = _discovered(info) & set(expect.cdi_devices_gone)
    if gone:
        return ["DiscoveredDevices still lists " + ", ".join(sorted(gone))]
    if expect.cdi_spec_dir is None:
        return []
    dirs = info.get("CDISpecDirs") or []
    if not isinstance(dirs, list) or not dirs:
        return ["CDI is off (CDISpecDirs is empty)"]
    want = os.path.normpath(expect.cdi_spec_dir)
    if not any(isinstance(d, str) and os.path.normpath(d) == want for d in dirs):
        return [f"CDISpecDirs is {dirs}, without {expect.cdi_spec_dir}"]
    ids = _discovered(info)
    missing = [name for name in expect.cdi_devices if name not in ids]
    if missing:
        return ["DiscoveredDevices lacks " + ", ".join(missing)]
    return []


def mismatches(info: Mapping[str, Any], expect: Expectation) -> list[str]:
    """What /info says that differs from `expect`, one phrase per difference."""
    runtimes = info.get("Runtimes") or {}
    if not isinstance(runtimes, dict):
        runtimes = {}
    problems = []
    for name, path in sorted(expect.present.items()):
        entry = runtimes.get(name)
        if not isinstance(entry, dict):
            problems.append(f"no runtime {name}")
        elif entry.get("path") != path:
            problems.append(f"runtime {name} has path {entry.get('path')}, not {path}")
    for name in expect.absent:
        if name in runtimes:
            problems.append(f"runtime {name} still listed")
    default = info.get("DefaultRuntime") or "runc"
    if default != expect.default_runtime:
        problems.append(f"default runtime is {default}, not {expect.default_runtime}")
    problems.extend(cdi_mismatches(info, expect))
    return problems


def expected_state(info: Mapping[str, Any], expect: Expectation) -> str:
    """The part of /info that `expect` is about: its runtimes' entries and the default.

    Only a change there proves dockerd took the file: dockerd 20.10 also drops the
    io.containerd.* entries from /info on every reload, whatever the file says.
    """
    runtimes = info.get("Runtimes") or {}
    if not isinstance(runtimes, dict):
        runtimes = {}
    names = sorted(set(expect.present) | set(expect.absent))
    return json.dumps(
        [{n: runtimes.get(n) for n in names}, info.get("DefaultRuntime") or "runc"], sort_keys=True
    )
