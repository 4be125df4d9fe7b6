"""`status --engine docker`: what daemon.json says about runtimes, what install recorded
(runtime entries, CDI mode, the mode install --mode set in config.toml), the backups, and what
the running dockerd reports."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Optional

from nvdocker2 import locations
from nvdocker2.engines.front import Report
from nvdocker2.errors import NvDockerError

# Runtimes every dockerd reports in /info whatever its file says.
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")


def report(cfg: Path, why: str, docker_host: Optional[str],
           short: Callable[[Any], str], pidfile: Optional[Path] = None) -> Report:
    """The status of `cfg` as JSON and as lines; exit code 2 or 3 when the file cannot be
    used (docs/reference.md §2). `pidfile` (None: install's default) names the dockerd whose
    reload the drift hint suggests."""
    from nvdocker2.engines.docker import runtime_mode
    from nvdocker2.engines.docker.daemonjson import document, edit, validate
    from nvdocker2.store.backups import Backups
    from nvdocker2.store.journal import Journal
    from nvdocker2.store.lock import check_state_dir, state_dir

    own, own_exists = locations.default_runtime_path()
    info: dict[str, Any] = {"config": str(cfg), "config_reason": why, "exists": False,
                            "error": None, "runtimes": {}, "default_runtime": None,
                            "installed": False, "journal": None, "backups": 0,
                            "newest_backup": None, "warnings": [], "errors": [],
                            "runtime_path": own, "dockerd": None}
    code = 0
    # the file's top-level keys: a reload keeps what dockerd runs of the others
    keys: set[str] = set()
    try:
        doc = document.load(cfg)
        keys = set(doc.data)
        info["exists"] = doc.existed
        info["style"] = doc.style.describe() if doc.existed else None
        info["warnings"].extend(doc.warnings)
        edit.check_shape(doc.data)
        info["runtimes"] = edit.runtimes(doc.data)
        info["default_runtime"] = doc.data.get("default-runtime")
        errors, warns = validate.validate(doc.data)
        info["errors"] = errors
        info["warnings"].extend(warns)
    except NvDockerError as e:
        info["error"] = e.message
        code = e.exit_code
    st = state_dir()
    check_state_dir(st)  # docs/reference.md §8: nothing is read from an untrusted state dir
    rec = {}
    with contextlib.suppress(NvDockerError):
        rec = Journal(st, cfg).load()
    info["journal"] = rec or None
    # What the file says now, not history: a recorded entry counts only while the file
    # still holds it as install wrote it (rollback or a hand edit may have taken it out).
    recorded = (rec.get("runtimes") or {}) if rec else {}
    info["installed_runtimes"] = sorted(
        name for name, r in recorded.items()
        if isinstance(r, dict) and "installed" in r
        and info["runtimes"].get(name) == r["installed"]
    )
    info["installed"] = bool(info["installed_runtimes"])
    with contextlib.suppress(NvDockerError):
        found = Backups(st).all(cfg)
        info["backups"] = len(found)
        info["newest_backup"] = found[0].id if found else None
    info.update(_mode_status(st, cfg, info["installed"]))
    info["runtime_mode"] = runtime_mode.status(rec or {})
    info["dockerd"] = _query_dockerd(docker_host, info["runtimes"], info["default_runtime"])
    if info["dockerd"]["reachable"]:
        pid = _dockerd_pid(cfg, pidfile)
        info["dockerd"]["pid"] = pid
        _drift(info["dockerd"], info["runtimes"], info["default_runtime"], keys,
               _added_runtimes(pid))
    lines = [f"config: {cfg} ({why})"]
    if info["error"]:
        lines.append(f"file: cannot be used: {info['error']}")
    elif not info["exists"]:
        lines.append("file: does not exist (dockerd uses its defaults)")
    else:
        lines.append(f"file: {info.get('style')}")
        if info["runtimes"]:
            for name, entry in info["runtimes"].items():
                p = entry.get("path") if isinstance(entry, dict) else None
                ours = isinstance(p, str) and locations.same_file(p, own)
                tag = "  (this package's runtime)" if ours else ""
                lines.append(f"runtime: {name} -> {short(entry)}{tag}")
        else:
            lines.append("runtimes: none defined")
        lines.append(f"default-runtime: {info['default_runtime'] or 'runc (not set)'}")
        for err in info["errors"]:
            lines.append(f"invalid: {err}")
    gone = sorted(set(recorded) - set(info["installed_runtimes"]))
    if info["installed"]:
        names = ", ".join(info["installed_runtimes"])
        lines.append(f"installed by nvdocker2: {names} (journal {Journal(st, cfg).path})")
    elif gone:
        lines.append(f"installed by nvdocker2: nothing in the file (the journal records "
                     f"{', '.join(gone)}, which the file no longer holds as installed: "
                     f"rolled back or edited since)")
    else:
        lines.append("installed by nvdocker2: nothing recorded")
    lines.append(f"mode: {info['mode']}")
    lines.append(runtime_mode.describe(info["runtime_mode"]))
    if info["cdi"]:
        cdi = info["cdi"]
        lines.append(f"CDI spec: {cdi['spec']}" + ("" if cdi["present"] else " (missing)")
                     + (f": {', '.join(cdi['devices'])}" if cdi["devices"] else ""))
    newest = info["newest_backup"]
    lines.append(f"backups: {info['backups']}" + (f" (newest {newest})" if newest else ""))
    lines.append(f"runtime beside nvdocker2: {own}" + ("" if own_exists else " (missing)"))
    lines.append(_describe_dockerd(info["dockerd"], cfg))
    if info["dockerd"]["desktop"]:
        from nvdocker2.engines.docker.desktop import WHAT_WORKS

        lines.append(f"Docker Desktop: {info['dockerd']['desktop']}; install refuses it. "
                     f"{WHAT_WORKS}")
    return Report(info, lines, list(info["warnings"]), code)


def _mode_status(state: Path, cfg: Path, runtime_installed: bool) -> dict[str, Any]:
    """How GPUs reach containers here, as install recorded it: "runtime" (the nvidia runtime
    entry), "cdi" (install --mode cdi), both, or "none"; plus the CDI spec when there is one."""
    from nvdocker2.engines.docker import cdi as cdi_mode
    from nvdocker2.engines.docker.cdi_journal import CdiJournal, spec_path

    rec: dict[str, Any] = {}
    with contextlib.suppress(NvDockerError):
        rec = CdiJournal(state, cfg).load()
    modes = (["runtime"] if runtime_installed else []) + (["cdi"] if rec else [])
    cdi = None
    if rec:
        spec = Path((rec.get("spec") or {}).get("path") or spec_path(None))
        data = None
        with contextlib.suppress(NvDockerError):
            data = cdi_mode.read_optional(spec)
        cdi = {"spec": str(spec), "present": data is not None,
               "devices": list(cdi_mode.devices_of(data)),
               "journal": str(CdiJournal(state, cfg).path)}
    return {"mode": "+".join(modes) or "none", "modes": modes, "cdi": cdi}


def _query_dockerd(docker_host: Optional[str], runtimes: dict[str, Any],
                   default: Any) -> dict[str, Any]:
    """What the running dockerd reports (GET /info) and whether it matches the file."""
    from nvdocker2.engines.docker.desktop import desktop_reason, engine_host
    from nvdocker2.engines.docker.service.api import EngineClient, EngineError, EngineUnavailable

    # A rootless Docker's user asks its own dockerd, as install does.
    host = engine_host(docker_host)
    try:
        data = EngineClient(host, timeout=5.0).info()
    except (EngineUnavailable, EngineError) as e:
        return {"host": host.url, "reachable": False, "error": str(e),
                "desktop": desktop_reason(None, host.socket_path)}
    running = {
        name: entry.get("path")
        for name, entry in (data.get("Runtimes") or {}).items()
        if isinstance(entry, dict)
    }
    differs = sorted(
        name
        for name, entry in runtimes.items()
        if isinstance(entry, dict) and "path" in entry and running.get(name) != entry["path"]
    )
    default_running = data.get("DefaultRuntime")
    if default_running != (default if isinstance(default, str) and default else "runc"):
        differs.append("default-runtime")
    return {
        "host": host.url,
        "reachable": True,
        "version": data.get("ServerVersion"),
        "runtimes": running,
        "default_runtime": default_running,
        "agrees_with_file": not differs,
        "differs": differs,
        "desktop": desktop_reason(data, host.socket_path),
    }


def _describe_dockerd(d: dict[str, Any], cfg: Path) -> str:
    from nvdocker2.engines.docker.service.started import reload_command, restart_command

    if not d["reachable"]:
        return f"dockerd: not reachable at {d['host']} ({d['error']})"
    head = (
        f"dockerd: {d['version']} at {d['host']}: runtimes {', '.join(sorted(d['runtimes']))}; "
        f"default {d['default_runtime']}"
    )
    if d["agrees_with_file"]:
        return head + "; agrees with the file"
    differs = f"; differs from the file for {', '.join(d['differs'])} "
    if d.get("restart_needed"):
        return head + differs + (
            f"(a reload keeps {', '.join(d['kept_on_reload'])}, which the file no longer "
            f"sets: restart needed: {restart_command(d.get('pid'), cfg)})")
    return head + differs + f"(apply the file: {reload_command(d.get('pid'), cfg)})"


def _drift(d: dict[str, Any], runtimes: dict[str, Any], default: Any, keys: set[str],
           added: set[str]) -> None:
    """Add to `d` the runtimes dockerd runs that the file does not define (to `differs`), and
    what of the drift a reload cannot clear: on a SIGHUP, dockerd keeps its runtimes when the
    file has no "runtimes" key and its default when the file sets none (docs/reload.md)."""
    extra = sorted(n for n in d["runtimes"]
                   if n not in runtimes and n not in BUILTIN_RUNTIMES and n not in added)
    d["differs"] = sorted(set(d["differs"]) | set(extra))
    kept = [] if "runtimes" in keys else extra
    if "default-runtime" in d["differs"] and not (isinstance(default, str) and default):
        kept.append("default-runtime")
    d["agrees_with_file"] = not d["differs"]
    d["kept_on_reload"] = kept
    d["restart_needed"] = bool(kept)


def _added_runtimes(pid: Optional[int]) -> set[str]:
    """The runtimes dockerd `pid` got with --add-runtime (a reload neither adds nor drops them)."""
    from nvdocker2.engines.docker.service.process import read_process

    proc = read_process(pid) if pid is not None else None
    argv = list(proc.argv[1:]) if proc is not None else []
    names: set[str] = set()
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if a.startswith("--add-runtime=") else (
            argv[i + 1] if a == "--add-runtime" and i + 1 < len(argv) else None)
        if value:
            names.add(value.split("=", 1)[0])
    return names


def _dockerd_pid(cfg: Path, pidfile: Optional[Path]) -> Optional[int]:
    """The pid of the dockerd in `pidfile` (None: install's default for `cfg`) when it is a
    running, trusted dockerd, else None."""
    from nvdocker2.engines.docker.service.select import detect_setup
    from nvdocker2.engines.docker.service.process import is_dockerd, read_pidfile

    path = Path(os.path.abspath(pidfile)) if pidfile is not None else detect_setup(cfg).pidfile
    pid = read_pidfile(path)
    return pid if pid is not None and is_dockerd(pid) else None
