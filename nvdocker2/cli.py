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

from nvdocker2 import __version__, locations, redact
from nvdocker2.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, BadInput, NvDockerError
from nvdocker2.oneline import one_line

def _import_typer() -> Any:
    """typer, loaded without rich. typer < 0.8 imports rich (and markdown-it, ~0.1 s) as it
    loads, only to format help, which we print plain on every typer version (see `_Command`);
    rich stays importable for the spinner, which imports it when it is shown."""
    if "typer" in sys.modules or "rich" in sys.modules:
        import typer
        return typer
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import typer
    finally:
        if sys.modules.get("rich", 0) is None:
            del sys.modules["rich"]
    return typer


typer = _import_typer()
# The exception classes typer raises: click's up to typer 0.19, its own copy of click from
# typer 0.20 on. Named through typer's own export, never by importing click.
_click_errors = sys.modules[typer.BadParameter.__module__]


class _Command(typer.core.TyperCommand):
    """Plain click help on every typer: typer < 0.8 formats help with rich whenever rich is
    importable, and rich's tables cut long defaults with "…"."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(typer.core.TyperCommand, self).format_help(ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        """The command's first paragraph, whole (click cuts it at `limit` with "...")."""
        return " ".join((self.short_help or (self.help or "").split("\n\n")[0]).split())


class _Group(typer.core.TyperGroup):
    __doc__ = _Command.__doc__

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(typer.core.TyperGroup, self).format_help(ctx, formatter)


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _typer(**kw: Any) -> Any:
    return typer.Typer(cls=_Group, context_settings=CONTEXT, no_args_is_help=True,
                       rich_markup_mode=None, pretty_exceptions_enable=False, **kw)


app = _typer(
    add_completion=True,
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
    cdi = "cdi"


RELOAD_HELP = (
    "How dockerd is told about the change: auto (systemctl reload docker when systemd runs "
    "the docker unit, else SIGHUP to the dockerd in --pidfile, else none with the command to "
    "run; says what it picked and why), systemd, sysv (service docker reload), signal, none. "
    "containerd: auto, systemd (restart), none. CRI-O: auto (signal from CRI-O 1.25.1, else "
    "systemd), signal (SIGHUP), systemd (restart), none."
)


def _no_default(*names: str, **kw: Any) -> Any:
    """An option whose absence means "work it out" (the help says how), not a value."""
    return typer.Option(None, *names, show_default=False, **kw)


# --- options shared by several commands (a fresh OptionInfo per use) -----------------------


def _opt_config(what: str) -> Any:
    return _no_default(
        "--config",
        metavar="PATH",
        help=f"daemon.json {what} [default: chosen for this host's Docker: rootful "
        "/etc/docker/daemon.json, rootless ~/.config/docker/daemon.json, snap "
        "/var/snap/docker/current/config/daemon.json; printed with why].",
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


def _opt_docker_host(what: str = "to verify the change through") -> Any:
    return _no_default(
        "--docker-host",
        metavar="URL",
        help=f"Engine API {what} [default: $DOCKER_HOST, else "
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


def _opt_cdi_spec_dir() -> Any:
    return _no_default(
        "--cdi-spec-dir", metavar="DIR",
        help="With --mode cdi: where the spec nvidia.yaml goes [default: /etc/cdi].",
    )


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


class CliReporter:
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


def _interrupted() -> int:
    _stderr("error: interrupted; daemon.json is unchanged or was restored")
    return EXIT_INTERNAL


def _run(json_mode: bool, fn: Callable[[], int | None]) -> None:
    _Out.json = json_mode
    try:
        code = fn()
    except NvDockerError as e:
        raise typer.Exit(_fail(e)) from None
    except KeyboardInterrupt:  # recent typer turns it into a silent exit 130
        raise typer.Exit(_interrupted()) from None
    if code:
        raise typer.Exit(code)


def _resolve_config(config: Optional[Path]) -> tuple[Path, str]:
    if config is not None:
        return Path(os.path.abspath(os.path.expanduser(str(config)))), "given with --config"
    return locations.default_config()


def _make_daemon(
    mode: ReloadMode, restart: bool, no_verify: bool, docker_host: Optional[str],
    pidfile: Optional[Path], dockerd_log: Optional[Path], config: Path,
) -> tuple[Any, list[str]]:
    """The Daemon for the reload flags. The one place dockerd reloading gets wired in."""
    from nvdocker2.dockerd import DaemonOptions, make_daemon, reporter_for

    options = DaemonOptions(
        mode=mode.value, restart=restart, verify=not no_verify, docker_host=docker_host,
        pidfile=pidfile, dockerd_log=dockerd_log, config=config,
    )
    daemon = make_daemon(options, reporter_for(sys.stderr))
    notes = [f"reload mode {daemon.strategy}: {daemon.reason}"] if mode == ReloadMode.auto else []
    return daemon, notes


def _render(res: Any, extra_notes: list[str], extra_warnings: list[str],
            extra_json: Optional[dict] = None) -> None:
    warnings = list(extra_warnings) + list(res.warnings)
    notes = list(extra_notes) + list(res.notes)
    if _Out.json:
        obj = res.to_json()
        obj.update(extra_json or {})
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


@app.command(cls=_Command)
def install(
    config: Optional[Path] = _opt_config("to add the runtime to"),
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
        None, "--mode", metavar="direct|legacy|cdi", case_sensitive=False,
        help="direct|legacy: also set [nvidia-container-runtime] mode in the runtime's "
        "config.toml ($NVIDIA_CONTAINER_RUNTIME_CONFIG, else "
        "/etc/nvidia-container-runtime/config.toml): direct = the runtime gives GPUs itself, "
        "without libnvidia-container. cdi: no runtime entry; write the CDI spec of this host's "
        "GPUs and turn CDI on in daemon.json where this Docker (>= 25) needs it.",
    ),
    cdi_spec_dir: Optional[str] = _opt_cdi_spec_dir(),
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
                                   "--dockerd-log": dockerd_log, "--mode": mode,
                                   "--cdi-spec-dir": cdi_spec_dir})
        cfg, why = _resolve_config(config)
        if mode == RuntimeMode.cdi:
            for flag, given in (("--set-default", set_default), ("--runtime-arg", runtime_arg),
                                ("--runtime-name", runtime_name != "nvidia")):
                if given:
                    raise BadInput(f"{flag} has no meaning with --mode cdi (CDI mode adds no "
                                   "runtime entry)", f"drop {flag}, or drop --mode cdi")
            return _cdi_install(cfg, why, runtime_path, dry_run, reload, restart, no_verify,
                                docker_host, pidfile, timeout, dockerd_log, cdi_spec_dir, json_)
        _no_cdi_spec_dir(cdi_spec_dir)
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
        from nvdocker2 import transaction

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


def _cdi_install(
    cfg: Path, why: str, runtime_path: Optional[str], dry_run: bool, reload: ReloadMode,
    restart: bool, no_verify: bool, docker_host: Optional[str], pidfile: Optional[Path],
    timeout: float, dockerd_log: Optional[Path], cdi_spec_dir: Optional[str], json_: bool,
) -> int:
    from nvdocker2 import cdimode

    path = runtime_path or locations.default_runtime_path()[0]
    daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile, dockerd_log, cfg)
    run = cdimode.Run(daemon, docker_host, restart, dry_run, CliReporter(json_), timeout, why,
                      dockerd_log=dockerd_log)
    out = cdimode.install(cfg, spec_dir=cdi_spec_dir, runtime_path=path, run=run)
    _render_cdi(out, notes)
    return 0


def _no_cdi_spec_dir(cdi_spec_dir: Optional[str]) -> None:
    if cdi_spec_dir is not None:
        raise BadInput("--cdi-spec-dir needs --mode cdi", "add --mode cdi, or drop --cdi-spec-dir")


def _render_cdi(out: Any, notes: list[str]) -> None:
    """A CDI-mode result: the transaction's output plus the spec, its devices and whether
    dockerd still needs a restart (SPEC §9)."""
    res = out.result
    lines = list(notes if res.changed and not res.dry_run else [])
    lines.append(f"CDI spec {out.spec}: {', '.join(out.devices) or 'no devices'}")
    lines.extend(out.notes)
    _render(res, lines, [], out.extra_json())
    if out.restart_needed and not _Out.json:
        sys.stdout.write("restart needed: yes (dockerd reads CDI settings only at start)\n")


@app.command(cls=_Command)
def uninstall(
    config: Optional[Path] = _opt_config("to remove the runtime from"),
    runtime_name: str = _opt_runtime_name(),
    dry_run: bool = _opt_dry_run(),
    reload: ReloadMode = _opt_reload(),
    restart: bool = _opt_restart(),
    no_verify: bool = _opt_no_verify(),
    docker_host: Optional[str] = _opt_docker_host(),
    pidfile: Optional[Path] = _opt_pidfile(),
    timeout: float = _opt_timeout(),
    dockerd_log: Optional[Path] = _opt_dockerd_log(),
    mode: Optional[RuntimeMode] = typer.Option(
        None, "--mode", metavar="cdi", case_sensitive=False,
        help="cdi: undo install --mode cdi (remove the spec it wrote, put features back).",
    ),
    cdi_spec_dir: Optional[str] = _opt_cdi_spec_dir(),
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
                                   "--pidfile": pidfile, "--dockerd-log": dockerd_log,
                                   "--mode": mode, "--cdi-spec-dir": cdi_spec_dir})
        cfg, why = _resolve_config(config)
        if mode == RuntimeMode.cdi:
            from nvdocker2 import cdimode

            daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile,
                                         dockerd_log, cfg)
            run = cdimode.Run(daemon, docker_host, restart, dry_run, CliReporter(json_), timeout,
                              why, dockerd_log=dockerd_log)
            out = cdimode.uninstall(
                cfg, spec_dir=cdi_spec_dir,
                own_runtime_paths=[locations.default_runtime_path()[0]], run=run,
            )
            _render_cdi(out, notes)
            return 0
        if mode is not None:
            raise BadInput(f"uninstall --mode {mode.value}: only --mode cdi has something to "
                           "undo", "drop --mode (uninstall removes the runtime entry)")
        _no_cdi_spec_dir(cdi_spec_dir)
        daemon, notes = _make_daemon(reload, restart, no_verify, docker_host, pidfile, dockerd_log, cfg)
        own, _ = locations.default_runtime_path()
        from nvdocker2 import transaction

        res = transaction.uninstall(
            cfg, runtime_name=runtime_name, own_runtime_paths=[own], dry_run=dry_run,
            daemon=daemon, reporter=CliReporter(json_), timeout=timeout, config_reason=why,
            dockerd_log=dockerd_log,
        )
        _render(res, notes if res.changed and not res.dry_run else [], [])
        return 0

    _run(json_, go)


@app.command(cls=_Command)
def rollback(
    backup_id: Optional[str] = typer.Argument(
        None,
        show_default=False,
        metavar="[BACKUP_ID]",
        help="Backup to restore [default: the newest].",
    ),
    config: Optional[Path] = _opt_config("to restore from its backups"),
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
    """Undo the newest change (or BACKUP_ID's): its files go back to their backups together;
    the current files are backed up first."""

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
        from nvdocker2 import transaction

        res = transaction.rollback(
            cfg, backup_id, dry_run=dry_run, daemon=daemon, reporter=CliReporter(json_),
            timeout=timeout, config_reason=why, dockerd_log=dockerd_log,
        )
        _render(res, notes if res.changed and not res.dry_run else [], [])
        return 0

    _run(json_, go)


@app.command(cls=_Command)
def backups(
    config: Optional[Path] = _opt_config("whose backups to list"),
    json_: bool = _opt_json(),
    engine: EngineName = _opt_engine(),
) -> None:
    """List the backups of daemon.json (or of every file of --engine), newest first."""

    def go() -> int:
        from nvdocker2 import store

        if engine != EngineName.docker:
            return _engine_backups(engine, config)
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
                lines.append(f"{_backup_cells(b)}  {b.reason}")
            lines.append(f"restore one with: nvdocker2 rollback ID --config {cfg}")
        sys.stdout.write("\n".join(lines) + "\n")
        return 0

    _run(json_, go)


def _backup_cells(b: Any) -> str:
    """ID, time, size and the start of the sha256 of a backup, in the columns of `backups`."""
    size = f"{b.size}" if b.existed else "-"
    sha = (b.sha256 or "(no file)")[:12]
    return f"{b.id:<29} {b.time[:19]:<20} {size:>7}  {sha:<12}"


def _engine_backups(engine: EngineName, config: Optional[Path]) -> int:
    """`backups --engine containerd|crio`: the backups of every file of the engine, one group
    per transaction (rollback restores a transaction's files together)."""
    from nvdocker2 import store
    from nvdocker2.engines import commands

    cfg = Path(os.path.abspath(os.path.expanduser(str(config)))) if config else None
    eng = commands.make(engine.value, cfg, "none", False, None, None)[0]
    why = "given with --config" if cfg else f"the {engine.value} default"
    st = store.state_dir()
    files, groups = commands.backups(eng, st)
    bdir = store.Backups(st).dir
    if _Out.json:
        _emit_json({"engine": engine.value, "config": str(eng.config), "config_reason": why,
                    "files": [str(f) for f in files], "backup_dir": str(bdir),
                    "backups": sorted(({**b.to_json(), "transaction": tag}
                                       for tag, bs in groups for b in bs),
                                      key=lambda j: (j["time"], j["id"]), reverse=True)})
        return 0
    lines = [f"engine: {engine.value}", f"config: {eng.config} ({why})",
             "files: " + ", ".join(str(f) for f in files)]
    if not groups:
        lines.append(f"no backups in {bdir}")
    else:
        lines.append(f"  {'ID':<29} {'TIME (UTC)':<20} {'SIZE':>7}  {'SHA256':<12}  FILE")
        for tag, bs in groups:
            reason = bs[0].reason[: -len(tag) - 3] if tag else bs[0].reason
            lines.append(f"transaction {tag}: {reason}" if tag else f"backup: {reason}")
            lines.extend(f"  {_backup_cells(b)}  {b.config}" for b in bs)
        lines.append(f"restore one with: nvdocker2 rollback ID --engine {engine.value} "
                     f"--config {eng.config} (the other files of its transaction come back too)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


@app.command(cls=_Command)
def status(
    config: Optional[Path] = _opt_config("to report on"),
    docker_host: Optional[str] = _opt_docker_host("to ask what the running dockerd uses"),
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
        from nvdocker2.daemonjson import document, edit, validate
        from nvdocker2 import store

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
            info["runtimes"] = edit.runtimes(doc.data)
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
            found = store.Backups(st).all(cfg)
            info["backups"] = len(found)
            info["newest_backup"] = found[0].id if found else None
        info.update(_mode_status(st, cfg, info["installed"]))
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
        gone = sorted(set(recorded) - set(info["installed_runtimes"]))
        if info["installed"]:
            names = ", ".join(info["installed_runtimes"])
            lines.append(f"installed by nvdocker2: {names} (journal {store.Journal(st, cfg).path})")
        elif gone:
            lines.append(f"installed by nvdocker2: nothing in the file (the journal records "
                         f"{', '.join(gone)}, which the file no longer holds as installed: "
                         f"rolled back or edited since)")
        else:
            lines.append("installed by nvdocker2: nothing recorded")
        lines.append(f"mode: {info['mode']}")
        if info["cdi"]:
            cdi = info["cdi"]
            lines.append(f"CDI spec: {cdi['spec']}" + ("" if cdi["present"] else " (missing)")
                         + (f": {', '.join(cdi['devices'])}" if cdi["devices"] else ""))
        lines.append(f"backups: {info['backups']}" + (f" (newest {info['newest_backup']})" if info["newest_backup"] else ""))
        lines.append(f"runtime beside nvdocker2: {own}" + ("" if own_exists else " (missing)"))
        lines.append(_describe_dockerd(info["dockerd"], cfg))
        for w in info["warnings"]:
            _stderr(f"warning: {w}")
        sys.stdout.write("\n".join(lines) + "\n")
        return code

    _run(json_, go)


@app.command(cls=_Command)
def doctor(
    config: Optional[Path] = _no_default(
        "--config", metavar="PATH",
        help="daemon.json to check [default: the one install would change, printed with why]."),
    docker_host: Optional[str] = _no_default(
        "--docker-host", metavar="URL",
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


cdi_app = _typer(add_completion=False, help="Container Device Interface specs for this host's GPUs.")
app.add_typer(cdi_app, name="cdi")


@cdi_app.command("generate", cls=_Command)
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


@cdi_app.command("refresh", cls=_Command)
def cdi_refresh(
    config: Optional[Path] = _opt_config("whose CDI mode to refresh"),
    cdi_spec_dir: Optional[str] = _no_default(
        "--cdi-spec-dir", metavar="DIR",
        help="Directory of the spec [default: where install --mode cdi wrote it, else /etc/cdi].",
    ),
    timeout: float = _opt_timeout(),
    json_: bool = _opt_json(),
) -> None:
    """Regenerate the CDI spec from the GPUs present; write it only when it changed (the
    packages run this at boot). Does nothing where install --mode cdi wrote no spec."""

    def go() -> int:
        from nvdocker2 import cdimode

        cfg, _ = _resolve_config(config)
        res = cdimode.refresh(cfg, spec_dir=cdi_spec_dir,
                              runtime_path=locations.default_runtime_path()[0], timeout=timeout)
        if _Out.json:
            _emit_json(res.to_json())
        elif not res.present:
            sys.stdout.write(f"no CDI spec at {res.spec}: nothing to refresh "
                             "(nvdocker2 install --mode cdi writes one)\n")
        elif res.changed:
            sys.stdout.write(f"rewrote {res.spec}: {', '.join(res.devices)} "
                             f"(backup {res.backup})\n")
        else:
            sys.stdout.write(f"unchanged: {res.spec} already lists the GPUs present "
                             f"({', '.join(res.devices)}); nothing written\n")
        return 0

    _run(json_, go)


@app.command(cls=_Command)
def agent(
    engine: EngineName = _opt_engine(),
    config: Optional[str] = _no_default(
        "--config", metavar="PATH",
        help="The engine's config, as a path on the host [default: /etc/docker/daemon.json, "
        "/etc/containerd/config.toml, /etc/crio/crio.conf.d/99-nvidia.conf]."),
    host_root: str = typer.Option(
        "/", "--host-root", metavar="DIR",
        help="Where the host's / is (a container mounts it, e.g. /host): --config and the "
        "state directory (/var/lib/nvdocker2, the journal and the agent's lock) are found under "
        "it."),
    reload: ReloadMode = _opt_reload(),
    no_verify: bool = _opt_no_verify(),
    set_default: bool = typer.Option(False, "--set-default",
                                     help="Also make nvidia the engine's default runtime."),
    runtime_name: str = _opt_runtime_name(),
    runtime_path: Optional[str] = _no_default(
        "--runtime-path", metavar="PATH",
        help="nvidia-container-runtime as a path on the host [default: install's]."),
    containerd_address: Optional[str] = _opt_engine_address(),
    timeout: float = _opt_timeout(),
    ready_file: Optional[str] = _no_default(
        "--ready-file", metavar="PATH",
        help="A file that exists exactly while the agent is ready (for an exec readiness probe)."),
    healthz: Optional[int] = _no_default(
        "--healthz", metavar="PORT", min=0, max=65535,
        help="Serve GET /healthz on 127.0.0.1:PORT (200 when ready, else 503)."),
    keep_on_exit: bool = typer.Option(
        False, "--keep-on-exit",
        help="On SIGTERM/SIGINT leave the config installed (default: uninstall, which puts "
        "back what the journal recorded)."),
    poll: float = typer.Option(5.0, "--poll", metavar="SECONDS", min=0.1,
                               help="Check the config at least this often (inotify, where "
                               "available, notices a rewrite at once)."),
    backoff: float = typer.Option(10.0, "--backoff", metavar="SECONDS", min=0.1,
                                  help="First wait when the same drift comes back or install "
                                  "fails; doubled each time, up to 32 times this."),
) -> None:
    """Keep the nvidia runtime installed on this node: install, report ready, re-apply drift,
    uninstall on SIGTERM/SIGINT (a DaemonSet's container; see docs/kubernetes.md)."""

    def go() -> int:
        from nvdocker2 import agent as node_agent

        if not os.path.isdir(host_root):
            raise BadInput(f"--host-root {host_root} is not a directory",
                           "mount the host's / there, or drop --host-root")
        try:
            opts = node_agent.options(
                engine.value, config, host_root, reload.value, not no_verify, set_default,
                runtime_name, runtime_path, containerd_address, timeout, ready_file, healthz,
                keep_on_exit, poll, backoff)
        except ValueError as e:
            raise BadInput(str(e), "put the config in its own directory, e.g. "
                           "/etc/containerd/config.toml") from None
        try:
            return node_agent.run(opts)
        except node_agent.CannotStart as e:
            from nvdocker2.errors import EnvironmentProblem

            raise EnvironmentProblem(str(e), e.hint) from None

    _run(False, go)


def _mode_status(state: Path, cfg: Path, runtime_installed: bool) -> dict:
    """How GPUs reach containers here, as install recorded it: "runtime" (the nvidia runtime
    entry), "cdi" (install --mode cdi), both, or "none"; plus the CDI spec when there is one."""
    from nvdocker2 import cdimode

    rec: dict = {}
    with contextlib.suppress(NvDockerError):
        rec = cdimode.CdiJournal(state, cfg).load()
    modes = (["runtime"] if runtime_installed else []) + (["cdi"] if rec else [])
    cdi = None
    if rec:
        spec = Path((rec.get("spec") or {}).get("path") or cdimode.spec_path(None))
        data = None
        with contextlib.suppress(NvDockerError):
            data = cdimode.read_optional(spec)
        cdi = {"spec": str(spec), "present": data is not None,
               "devices": list(cdimode.devices_of(data)),
               "journal": str(cdimode.CdiJournal(state, cfg).path)}
    return {"mode": "+".join(modes) or "none", "modes": modes, "cdi": cdi}


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


def _usage_error(e: Any) -> int:
    """A usage error (unknown option or command, bad value, missing argument): our two lines,
    exit 2, the same on every typer version."""
    message = " ".join(e.format_message().split()) or "bad usage"
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "nvdocker2"
    _stderr(f"error: {message}")
    _stderr(f"hint: see '{where} --help' for its options")
    return EXIT_BAD_INPUT


def _exits() -> tuple:
    """typer.Exit, and click's Exit where typer raises that instead (typer < 0.20)."""
    return tuple({typer.Exit, getattr(_click_errors, "Exit", typer.Exit)})


def _aborts() -> tuple:
    return tuple({typer.Abort, getattr(_click_errors, "Abort", typer.Abort)})


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the app and maps every outcome to a SPEC exit code."""
    redact.mask_standard_streams()  # no URL password reaches a terminal or a log
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, _on_signal)
    no_args = getattr(_click_errors, "NoArgsIsHelpError", None)
    try:
        rv = app(args=argv, prog_name="nvdocker2", standalone_mode=False)
    except _exits() as e:
        sys.exit(e.exit_code)
    except _click_errors.UsageError as e:
        if no_args is not None and isinstance(e, no_args) and e.ctx is not None:
            # click >= 8.2 (typer >= 0.20): no command given is an error; typer 0.7 prints the
            # help and exits 0, which every version does here.
            typer.echo(e.ctx.get_help())
            sys.exit(0)
        sys.exit(_usage_error(e))
    except _click_errors.ClickException as e:
        _stderr(f"error: {' '.join(e.format_message().split())}")
        _stderr("hint: see 'nvdocker2 --help'")
        sys.exit(e.exit_code)
    except _aborts():
        sys.exit(_interrupted())
    except NvDockerError as e:
        sys.exit(_fail(e))
    except KeyboardInterrupt:
        sys.exit(_interrupted())
    except Exception as e:  # an unexpected internal error: one line, traceback only in debug
        if _debug():
            traceback.print_exc()
        _stderr(f"error: internal error: {type(e).__name__}: {e}")
        _stderr("hint: run again with NVDOCKER2_DEBUG=1 for a traceback and report it")
        sys.exit(EXIT_INTERNAL)
    sys.exit(rv if isinstance(rv, int) else 0)
