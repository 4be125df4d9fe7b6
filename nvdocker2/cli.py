"""The `nvdocker2` command (SPEC §2): parse flags, call one transaction, render its result.

Errors are `NvDockerError`s carrying the SPEC exit code; they are turned into one `error:`
line and one `hint:` line in exactly one place (`_fail`), with a traceback only when
NVDOCKER2_DEBUG=1. With --json, stdout gets one JSON object whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import click
import typer

from nvdocker2 import __version__, locations, redact, transaction
from nvdocker2.errors import EXIT_INTERNAL, NvDockerError
from nvdocker2.oneline import one_line

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Configure Docker for NVIDIA GPUs: add, remove and check the nvidia runtime in "
    "daemon.json safely (merge, backup, atomic write, reload, verify, roll back).",
)


class ReloadMode(str, Enum):
    auto = "auto"
    systemd = "systemd"
    sysv = "sysv"
    signal = "signal"
    none = "none"


class RuntimeMode(str, Enum):
    legacy = "legacy"
    direct = "direct"


RELOAD_HELP = (
    "How dockerd is told about the change: auto (systemctl reload docker when systemd runs "
    "the docker unit, else SIGHUP to the dockerd in --pidfile, else none with the command to "
    "run; says what it picked and why), systemd, sysv (service docker reload), signal, none."
)


def _no_default(*names: str, **kw: Any) -> Any:
    """An option whose absence means "work it out" (the help says how), not a value."""
    return typer.Option(None, *names, show_default=False, **kw)


# --- options shared by several commands (a fresh OptionInfo per use) -----------------------


def _opt_config() -> Any:
    return _no_default(
        "--config",
        metavar="PATH",
        help="daemon.json to change [default: chosen for this host's Docker: rootful "
        "/etc/docker/daemon.json, rootless ~/.config/docker/daemon.json, snap "
        "/var/snap/docker/current/config/daemon.json; printed with why]",
    )


def _opt_json() -> Any:
    return typer.Option(False, "--json", help="Print one JSON object on stdout (for scripts).")


def _opt_timeout() -> Any:
    return typer.Option(
        30.0, "--timeout", metavar="SECONDS", min=0,
        help="How long to wait for the lock (another nvdocker2 running) and for dockerd to "
        "report the change.",
    )


def _opt_reload() -> Any:
    return typer.Option(
        ReloadMode.auto,
        "--reload",
        show_default="auto",
        metavar="MODE",
        help=RELOAD_HELP,
        case_sensitive=False,
    )


def _opt_restart() -> Any:
    return typer.Option(False, "--restart",
                        help="Restart dockerd instead of reloading it (containers without "
                        "live-restore stop); needs --reload systemd, sysv, or auto on systemd.")


def _opt_no_verify() -> Any:
    return typer.Option(False, "--no-verify",
                        help="Do not ask dockerd (GET /info) whether it runs the change.")


def _opt_docker_host() -> Any:
    return _no_default(
        "--docker-host",
        metavar="URL",
        help="Engine API to verify through [default: $DOCKER_HOST, else "
        "unix:///var/run/docker.sock].",
    )


def _opt_pidfile() -> Any:
    return _no_default(
        "--pidfile",
        metavar="PATH",
        help="dockerd's pid file, checked to be a dockerd before it is signalled "
        "[default: /var/run/docker.pid; rootless $XDG_RUNTIME_DIR/docker.pid; "
        "snap /run/snap.docker/docker.pid].",
    )


def _opt_dockerd_log() -> Any:
    return _no_default(
        "--dockerd-log",
        metavar="PATH",
        help="dockerd's log file: its error lines are quoted when dockerd rejects a change.",
    )


def _opt_dry_run() -> Any:
    return typer.Option(False, "--dry-run", help="Print a unified diff of the change; touch nothing.")


def _opt_runtime_name() -> Any:
    return typer.Option("nvidia", "--runtime-name", metavar="NAME", help="Name of the runtime entry.")


# --- engines other than Docker (SPEC §11) ------------------------------------------------------


class EngineName(str, Enum):
    docker = "docker"
    containerd = "containerd"
    crio = "crio"


def _opt_engine() -> Any:
    return typer.Option(EngineName.docker, "--engine", case_sensitive=False,
                        help="Container engine to configure: docker, containerd or crio.")


def _opt_unit() -> Any:
    return _no_default("--unit", metavar="UNIT",
                       help="systemd unit containerd/CRI-O runs as [default: containerd, crio].")


def _opt_engine_address() -> Any:
    return _no_default("--containerd-address", metavar="PATH",
                       help="containerd's socket to verify on [default: "
                       "/run/containerd/containerd.sock] (CRI-O: its socket).")


def _engine_run(engine: EngineName, action: str, config: Optional[Path], reload: ReloadMode,
                no_verify: bool, unit: Optional[str], address: Optional[str], json_: bool,
                **kw: Any) -> int:
    """install/uninstall/rollback for --engine containerd|crio (the engine transaction)."""
    from nvdocker2.engines import commands
    from nvdocker2.engines.base import Request
    from nvdocker2.errors import BadInput

    given = [flag for flag, value in kw.pop("docker_only", {}).items() if value]
    if given:
        raise BadInput(f"{', '.join(given)} applies to --engine docker only",
                       f"leave it out with --engine {engine.value}")
    cfg = Path(os.path.abspath(os.path.expanduser(str(config)))) if config else None
    eng, svc, notes = commands.make(engine.value, cfg, reload.value, not no_verify, unit, address)
    common = dict(reporter=CliReporter(json_), timeout=kw.pop("timeout"),
                  dry_run=kw.pop("dry_run"))
    if action == "rollback":
        res = commands.rollback(eng, svc, kw["backup_id"], **common)
    else:
        own, _ = locations.default_runtime_path()
        path = kw.get("runtime_path") or own
        req = Request(kw["runtime_name"], path, bool(kw.get("set_default")), (own,))
        res = getattr(commands, action)(eng, svc, req, **common)
    _render(res, notes if res.changed and not res.dry_run else [], [])
    return 0


# --- output ------------------------------------------------------------------------------------


class _Out:
    """Where the current command writes; set once per command."""

    json = False


def _stderr(line: str) -> None:
    """One line on stderr; control characters in it are escaped (SPEC §8: one line each)."""
    sys.stderr.write(one_line(line) + "\n")
    sys.stderr.flush()


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _debug() -> bool:
    return os.environ.get("NVDOCKER2_DEBUG", "") not in ("", "0")


def _fail(e: NvDockerError) -> int:
    """The one place an NvDockerError becomes output; returns the exit code."""
    if _debug():
        traceback.print_exception(type(e), e, e.__traceback__)
    if _Out.json:
        _emit_json({"changed": False, "error": e.message, "hint": e.hint, "exit_code": e.exit_code})
    _stderr(f"error: {e.message}")
    if e.hint:
        _stderr(f"hint: {e.hint}")
    return e.exit_code


class CliReporter(transaction.Reporter):
    """Progress lines and a spinner on stderr when a person is watching (a TTY, no --json)."""

    def __init__(self, json_mode: bool) -> None:
        self.live = not json_mode and sys.stderr.isatty()

    def progress(self, message: str) -> None:
        if self.live:
            _stderr(f"... {message}")

    @contextlib.contextmanager
    def waiting(self, message: str) -> Iterator[None]:
        if not self.live:
            yield
            return
        from rich.console import Console

        with Console(stderr=True).status(message):
            yield


def _run(json_mode: bool, fn: Callable[[], int | None]) -> None:
    _Out.json = json_mode
    try:
        code = fn()
    except NvDockerError as e:
        raise typer.Exit(_fail(e)) from None
    if code:
        raise typer.Exit(code)


def _resolve_config(config: Optional[Path]) -> tuple[Path, str]:
    if config is not None:
        return Path(os.path.abspath(os.path.expanduser(str(config)))), "given with --config"
    return locations.default_config()


def _make_daemon(
    mode: ReloadMode, restart: bool, no_verify: bool, docker_host: Optional[str],
    pidfile: Optional[Path], dockerd_log: Optional[Path], config: Path,
) -> tuple[transaction.Daemon, list[str]]:
    """The Daemon for the reload flags. The one place dockerd reloading gets wired in."""
    from nvdocker2.dockerd import DaemonOptions, make_daemon, reporter_for

    options = DaemonOptions(
        mode=mode.value, restart=restart, verify=not no_verify, docker_host=docker_host,
        pidfile=pidfile, dockerd_log=dockerd_log, config=config,
    )
    daemon = make_daemon(options, reporter_for(sys.stderr))
    notes = [f"reload mode {daemon.strategy}: {daemon.reason}"] if mode == ReloadMode.auto else []
    return daemon, notes


def _render(res: transaction.Result, extra_notes: list[str], extra_warnings: list[str]) -> None:
    warnings = list(extra_warnings) + list(res.warnings)
    notes = list(extra_notes) + list(res.notes)
    if _Out.json:
        obj = res.to_json()
        obj["warnings"] = warnings
        obj["notes"] = notes
        _emit_json(obj)
        return
    for w in warnings:
        _stderr(f"warning: {w}")
    out = [f"config: {res.config} ({res.config_reason})" if res.config_reason else f"config: {res.config}"]
    if res.dry_run:
        if res.changed:
            sys.stdout.write("\n".join(out) + "\n" + (res.diff or ""))
            sys.stdout.write(f"dry run: {res.config} was not changed\n")
        else:
            sys.stdout.write("\n".join(out) + f"\nunchanged: {res.config} already says that (dry run)\n")
        sys.stdout.write("".join(f"note: {n}\n" for n in notes))
        return
    # The engine transactions name their engine in config_reason ("containerd engine").
    who = res.config_reason[: -len(" engine")] if res.config_reason.endswith(" engine") else "dockerd"
    if not res.changed:
        out.append(f"unchanged: {res.config} already says that; nothing written, {who} not "
                   + ("reloaded" if who == "dockerd" else "restarted"))
    else:
        for c in res.changes:
            if not c.changed:
                continue
            if c.action == "removed":
                out.append(f"removed {c.key}")
            elif c.action == "restored":
                out.append(f"restored {c.key} from backup {c.after}")
            else:
                out.append(f"{c.action} {c.key}: {_short(c.after)}")
        if res.backup:
            where = f" ({res.backup_file})" if res.backup_file else " (the file did not exist before)"
            out.append(f"backup: {res.backup}{where}")
        out.append(f"reload: {res.reload}")
        out.append("verified: " + (f"yes, {who} reports the change" if res.verified else "no"))
    for n in notes:
        out.append(f"note: {n}")
    sys.stdout.write("\n".join(out) + "\n")


def _short(v: Any) -> str:
    from nvdocker2.daemonjson.document import Style, dumps

    try:
        return dumps(v, Style(indent=None, suffix=""))
    except (TypeError, ValueError):
        return repr(v)


# --- commands ----------------------------------------------------------------------------------


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"nvdocker2 {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """nvdocker2: the nvidia-docker2 layer, made safe."""


@app.command()
def install(
    config: Optional[Path] = _opt_config(),
    runtime_name: str = _opt_runtime_name(),
    runtime_path: Optional[str] = _no_default(
        "--runtime-path",
        metavar="PATH",
        help="Absolute path of nvidia-container-runtime [default: the one installed beside "
        "this nvdocker2].",
    ),
    runtime_arg: Optional[List[str]] = _no_default(
        "--runtime-arg", metavar="ARG", help="Add to the entry's runtimeArgs (repeatable)."
    ),
    set_default: bool = typer.Option(False, "--set-default",
                                     help="Also make it dockerd's default-runtime."),
    dry_run: bool = _opt_dry_run(),
    reload: ReloadMode = _opt_reload(),
    restart: bool = _opt_restart(),
    no_verify: bool = _opt_no_verify(),
    docker_host: Optional[str] = _opt_docker_host(),
    pidfile: Optional[Path] = _opt_pidfile(),
    timeout: float = _opt_timeout(),
    dockerd_log: Optional[Path] = _opt_dockerd_log(),
    mode: Optional[RuntimeMode] = typer.Option(
        None, "--mode", metavar="direct|legacy", case_sensitive=False,
        help="Also set [nvidia-container-runtime] mode in the runtime's config.toml "
        "($NVIDIA_CONTAINER_RUNTIME_CONFIG, else /etc/nvidia-container-runtime/config.toml): "
        "direct = the runtime gives GPUs itself, without libnvidia-container.",
    ),
    json_: bool = _opt_json(),
    engine: EngineName = _opt_engine(),
    unit: Optional[str] = _opt_unit(),
    containerd_address: Optional[str] = _opt_engine_address(),
) -> None:
    """Add the nvidia runtime to daemon.json (merge, back up, write atomically, reload, verify)."""

    def go() -> int:
        if engine != EngineName.docker:
            return _engine_run(engine, "install", config, reload, no_verify, unit,
                               containerd_address, json_, runtime_name=runtime_name,
                               runtime_path=runtime_path, set_default=set_default,
                               timeout=timeout, dry_run=dry_run, docker_only={
                                   "--runtime-arg": runtime_arg, "--restart": restart,
                                   "--docker-host": docker_host, "--pidfile": pidfile,
                                   "--dockerd-log": dockerd_log, "--mode": mode})
        cfg, why = _resolve_config(config)
        warnings: list[str] = []
        path = runtime_path
        if path is None:
            path, exists = locations.default_runtime_path()
            if not exists:
                warnings.append(
                    f"no {locations.RUNTIME_EXE} beside nvdocker2 or on PATH; the entry points at "
                    f"{path}, which does not exist yet (pass --runtime-path)"
                )
        elif os.path.isabs(path) and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            warnings.append(f"--runtime-path {path} is not an executable file (yet)")
        daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile, dockerd_log, cfg)
        res = transaction.install(
            cfg, runtime_name=runtime_name, runtime_path=path, runtime_args=runtime_arg or [],
            set_default=set_default, dry_run=dry_run, daemon=daemon,
            reporter=CliReporter(json_), timeout=timeout, config_reason=why,
            dockerd_log=dockerd_log,
        )
        notes = notes if res.changed and not res.dry_run else []
        if mode is not None:
            from nvdocker2.direct.commands import set_runtime_mode

            notes.append(set_runtime_mode(mode.value, dry_run=dry_run).note())
        _render(res, notes, warnings)
        return 0

    _run(json_, go)


@app.command()
def uninstall(
    config: Optional[Path] = _opt_config(),
    runtime_name: str = _opt_runtime_name(),
    dry_run: bool = _opt_dry_run(),
    reload: ReloadMode = _opt_reload(),
    restart: bool = _opt_restart(),
    no_verify: bool = _opt_no_verify(),
    docker_host: Optional[str] = _opt_docker_host(),
    pidfile: Optional[Path] = _opt_pidfile(),
    timeout: float = _opt_timeout(),
    dockerd_log: Optional[Path] = _opt_dockerd_log(),
    json_: bool = _opt_json(),
    engine: EngineName = _opt_engine(),
    unit: Optional[str] = _opt_unit(),
    containerd_address: Optional[str] = _opt_engine_address(),
) -> None:
    """Undo install: put back what it replaced (from the journal), never leave a dangling default."""

    def go() -> int:
        if engine != EngineName.docker:
            return _engine_run(engine, "uninstall", config, reload, no_verify, unit,
                               containerd_address, json_, runtime_name=runtime_name,
                               timeout=timeout, dry_run=dry_run, docker_only={
                                   "--restart": restart, "--docker-host": docker_host,
                                   "--pidfile": pidfile, "--dockerd-log": dockerd_log})
        cfg, why = _resolve_config(config)
        daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile, dockerd_log, cfg)
        own, _ = locations.default_runtime_path()
        res = transaction.uninstall(
            cfg, runtime_name=runtime_name, own_runtime_paths=[own], dry_run=dry_run,
            daemon=daemon, reporter=CliReporter(json_), timeout=timeout, config_reason=why,
            dockerd_log=dockerd_log,
        )
        _render(res, notes if res.changed and not res.dry_run else [], [])
        return 0

    _run(json_, go)


@app.command()
def rollback(
    backup_id: Optional[str] = typer.Argument(
        None,
        show_default=False,
        metavar="[BACKUP_ID]",
        help="Backup to restore [default: the newest].",
    ),
    config: Optional[Path] = _opt_config(),
    dry_run: bool = _opt_dry_run(),
    reload: ReloadMode = _opt_reload(),
    restart: bool = _opt_restart(),
    no_verify: bool = _opt_no_verify(),
    docker_host: Optional[str] = _opt_docker_host(),
    pidfile: Optional[Path] = _opt_pidfile(),
    timeout: float = _opt_timeout(),
    dockerd_log: Optional[Path] = _opt_dockerd_log(),
    json_: bool = _opt_json(),
    engine: EngineName = _opt_engine(),
    unit: Optional[str] = _opt_unit(),
    containerd_address: Optional[str] = _opt_engine_address(),
) -> None:
    """Restore the newest backup (or BACKUP_ID); the current file is backed up first."""

    def go() -> int:
        if engine != EngineName.docker:
            return _engine_run(engine, "rollback", config, reload, no_verify, unit,
                               containerd_address, json_, backup_id=backup_id,
                               timeout=timeout, dry_run=dry_run)
        if config is None and backup_id:
            cfg, why = None, ""
        else:
            cfg, why = _resolve_config(config)
        daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile, dockerd_log,
                                     cfg or Path(locations.ROOTFUL_CONFIG))
        res = transaction.rollback(
            cfg, backup_id, dry_run=dry_run, daemon=daemon, reporter=CliReporter(json_),
            timeout=timeout, config_reason=why, dockerd_log=dockerd_log,
        )
        _render(res, notes if res.changed and not res.dry_run else [], [])
        return 0

    _run(json_, go)


@app.command()
def backups(
    config: Optional[Path] = _opt_config(),
    json_: bool = _opt_json(),
) -> None:
    """List the backups of daemon.json, newest first."""

    def go() -> int:
        from nvdocker2.daemonjson import store

        cfg, why = _resolve_config(config)
        bs = store.Backups(store.state_dir())
        found = bs.all(cfg)
        if _Out.json:
            _emit_json({"config": str(cfg), "config_reason": why, "backup_dir": str(bs.dir),
                        "backups": [b.to_json() for b in found]})
            return 0
        lines = [f"config: {cfg} ({why})"]
        if not found:
            lines.append(f"no backups in {bs.dir}")
        else:
            lines.append(f"{'ID':<29} {'TIME (UTC)':<20} {'SIZE':>7}  {'SHA256':<12}  REASON")
            for b in found:
                size = f"{b.size}" if b.existed else "-"
                sha = (b.sha256 or "(no file)")[:12]
                lines.append(f"{b.id:<29} {b.time[:19]:<20} {size:>7}  {sha:<12}  {b.reason}")
            lines.append(f"restore one with: nvdocker2 rollback ID --config {cfg}")
        sys.stdout.write("\n".join(lines) + "\n")
        return 0

    _run(json_, go)


@app.command()
def status(
    config: Optional[Path] = _opt_config(),
    docker_host: Optional[str] = _opt_docker_host(),
    json_: bool = _opt_json(),
    engine: EngineName = _opt_engine(),
) -> None:
    """Show what daemon.json says about runtimes, what install recorded, and the backups."""

    def go() -> int:
        if engine != EngineName.docker:
            from nvdocker2.engines import commands

            cfg = Path(os.path.abspath(os.path.expanduser(str(config)))) if config else None
            st = commands.status(commands.make(engine.value, cfg, "none", False, None, None)[0])
            if _Out.json:
                _emit_json(st)
            else:
                sys.stdout.write("".join(f"{k}: {v}\n" for k, v in st.items()))
            return 0
        from nvdocker2.daemonjson import document, edit, store, validate

        cfg, why = _resolve_config(config)
        own, own_exists = locations.default_runtime_path()
        info: dict[str, Any] = {"config": str(cfg), "config_reason": why, "exists": False,
                                "error": None, "runtimes": {}, "default_runtime": None,
                                "installed": False, "journal": None, "backups": 0,
                                "newest_backup": None, "warnings": [], "errors": [],
                                "runtime_path": own, "dockerd": None}
        code = 0
        try:
            doc = document.load(cfg)
            info["exists"] = doc.existed
            info["style"] = doc.style.describe() if doc.existed else None
            info["warnings"].extend(doc.warnings)
            edit.check_shape(doc.data)
            rts = doc.data.get("runtimes", {})
            info["runtimes"] = rts if isinstance(rts, dict) else {}
            info["default_runtime"] = doc.data.get("default-runtime")
            errors, warns = validate.validate(doc.data)
            info["errors"] = errors
            info["warnings"].extend(warns)
        except NvDockerError as e:
            info["error"] = e.message
            code = e.exit_code
        st = store.state_dir()
        store.check_state_dir(st)  # SPEC §8: nothing is read from an untrusted state dir
        rec = {}
        with contextlib.suppress(NvDockerError):
            rec = store.Journal(st, cfg).load()
        info["journal"] = rec or None
        info["installed"] = bool(rec.get("runtimes")) if rec else False
        with contextlib.suppress(NvDockerError):
            found = store.Backups(st).all(cfg)
            info["backups"] = len(found)
            info["newest_backup"] = found[0].id if found else None
        info["dockerd"] = _query_dockerd(docker_host, info["runtimes"], info["default_runtime"])
        if _Out.json:
            _emit_json(info)
            return code
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
                    tag = "  (this package's runtime)" if isinstance(p, str) and locations.same_file(p, own) else ""
                    lines.append(f"runtime: {name} -> {_short(entry)}{tag}")
            else:
                lines.append("runtimes: none defined")
            lines.append(f"default-runtime: {info['default_runtime'] or 'runc (not set)'}")
            for err in info["errors"]:
                lines.append(f"invalid: {err}")
        if rec:
            names = ", ".join(sorted((rec.get("runtimes") or {}).keys()))
            lines.append(f"installed by nvdocker2: {names} (journal {store.Journal(st, cfg).path})")
        else:
            lines.append("installed by nvdocker2: nothing recorded")
        lines.append(f"backups: {info['backups']}" + (f" (newest {info['newest_backup']})" if info["newest_backup"] else ""))
        lines.append(f"runtime beside nvdocker2: {own}" + ("" if own_exists else " (missing)"))
        lines.append(_describe_dockerd(info["dockerd"], cfg))
        for w in info["warnings"]:
            _stderr(f"warning: {w}")
        sys.stdout.write("\n".join(lines) + "\n")
        return code

    _run(json_, go)


@app.command()
def doctor(
    config: Optional[Path] = typer.Option(
        None, "--config", metavar="PATH",
        help="daemon.json to check [default: the one install would change, printed with why]."),
    docker_host: Optional[str] = typer.Option(
        None, "--docker-host", metavar="URL",
        help="Engine API of the dockerd to check [default: $DOCKER_HOST, else the current "
        "docker context, else the socket of this host's Docker]."),
    json_: bool = typer.Option(False, "--json", help="Print the results as a JSON list."),
    smoke: bool = typer.Option(False, "--smoke", help="Also start a tiny GPU container "
                               "(image: $NVDOCKER2_SMOKE_IMAGE, default ubuntu; never pulled)."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Show every check on its own line, with what it found."),
    engine: EngineName = _opt_engine(),
    unit: Optional[str] = _opt_unit(),
    containerd_address: Optional[str] = _opt_engine_address(),
) -> None:
    """Check this host's GPU container setup and say how to fix what is wrong (exit 1 if
    any check failed)."""
    if engine != EngineName.docker:
        from nvdocker2.engines import doctor as engine_doctor

        cfg_path = Path(os.path.abspath(str(config))) if config is not None else None
        _run(json_, lambda: engine_doctor.run(engine.value, cfg_path, containerd_address, unit,
                                              json_, verbose))
        return
    from nvdocker2.doctor import run_doctor

    cfg = str(_resolve_config(config)[0]) if config is not None else None
    _run(json_, lambda: run_doctor(cfg, docker_host, json_, smoke, verbose=verbose))


cdi_app = typer.Typer(help="Container Device Interface specs for this host's GPUs.",
                      no_args_is_help=True)
app.add_typer(cdi_app, name="cdi")


@cdi_app.command("generate")
def cdi_generate(
    output: Optional[str] = typer.Option(
        None, "--output", metavar="PATH",
        help="Where to write the spec [default: /etc/cdi/nvidia.yaml]; a name ending in .json "
        "gets JSON, anything else YAML.",
    ),
    driver_root: Optional[str] = typer.Option(
        None, "--driver-root", metavar="DIR",
        help="Where the driver lives [default: driver-root in config.toml, else /].",
    ),
    runtime_path: Optional[str] = typer.Option(
        None, "--runtime-path", metavar="PATH",
        help="nvidia-container-runtime for the ld-cache hook [default: the one beside nvdocker2].",
    ),
    ldconfig: Optional[str] = typer.Option(
        None, "--ldconfig", metavar="PATH",
        help="The host's ldconfig [default: [nvidia-container-cli] ldconfig, else /sbin/ldconfig].",
    ),
    json_: bool = _opt_json(),
) -> None:
    """Write a CDI spec (nvidia.com/gpu=INDEX|UUID|all) from what direct mode discovers."""

    def go() -> int:
        from nvdocker2.direct.commands import generate_cdi

        path = runtime_path or locations.default_runtime_path()[0]
        res = generate_cdi(output, driver_root=driver_root, runtime_path=path, ldconfig=ldconfig)
        if _Out.json:
            _emit_json({"output": res.output, "gpus": res.gpus, "mounts": res.mounts,
                        "driver_root": res.driver_root})
        else:
            sys.stdout.write(f"wrote {res.output}: {res.gpus} GPU(s), {res.mounts} driver "
                             f"files, driver root {res.driver_root}\n")
        return 0

    _run(json_, go)


def _query_dockerd(docker_host: Optional[str], runtimes: dict, default: Any) -> dict:
    """What the running dockerd reports (GET /info) and whether it matches the file."""
    from nvdocker2.dockerd.api import EngineClient, EngineError, EngineUnavailable, parse_docker_host

    host = parse_docker_host(docker_host)
    try:
        data = EngineClient(host, timeout=5.0).info()
    except (EngineUnavailable, EngineError) as e:
        return {"host": host.url, "reachable": False, "error": str(e)}
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
    }


def _describe_dockerd(d: dict, cfg: Path) -> str:
    if not d["reachable"]:
        return f"dockerd: not reachable at {d['host']} ({d['error']})"
    head = (
        f"dockerd: {d['version']} at {d['host']}: runtimes {', '.join(sorted(d['runtimes']))}; "
        f"default {d['default_runtime']}"
    )
    if d["agrees_with_file"]:
        return head + "; agrees with the file"
    return (
        head + f"; differs from the file for {', '.join(d['differs'])} "
        f"(apply the file: {locations.reload_hint(cfg)})"
    )


def _on_signal(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the app and maps every outcome to a SPEC exit code."""
    redact.mask_standard_streams()  # no URL password reaches a terminal or a log
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, _on_signal)
    try:
        rv = app(args=argv, prog_name="nvdocker2", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        _stderr("error: interrupted; daemon.json is unchanged or was restored")
        sys.exit(EXIT_INTERNAL)
    except NvDockerError as e:
        sys.exit(_fail(e))
    except KeyboardInterrupt:
        _stderr("error: interrupted; daemon.json is unchanged or was restored")
        sys.exit(EXIT_INTERNAL)
    except Exception as e:  # an unexpected internal error: one line, traceback only in debug
        if _debug():
            traceback.print_exc()
        _stderr(f"error: internal error: {type(e).__name__}: {e}")
        _stderr("hint: run again with NVDOCKER2_DEBUG=1 for a traceback and report it")
        sys.exit(EXIT_INTERNAL)
    sys.exit(rv if isinstance(rv, int) else 0)
