"""The options of the engine commands: the CLI's own (every engine takes them) and those the
registered engines declare, merged into one signature each time a command line is parsed.

A flag that the chosen engine does not declare is a usage error naming the engines that do
(exit 2); the command then runs the engine's Frontend with every option's value.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from nvdocker2.cli.app import run_command, typer
from nvdocker2.engines import registry
from nvdocker2.engines.front import CliOption
from nvdocker2.errors import BadInput

CHANGING = ("install", "uninstall", "rollback")


class ReloadMode(str, Enum):
    auto = "auto"
    systemd = "systemd"
    sysv = "sysv"
    signal = "signal"
    none = "none"


RELOAD_HELP = (
    "How dockerd is told about the change: auto (systemctl reload docker when systemd runs "
    "the docker unit, else SIGHUP to the dockerd in --pidfile, else none with the command to "
    "run; says what it picked and why), systemd, sysv (service docker reload), signal, none. "
    "containerd: auto, systemd (restart), none. CRI-O: auto (restart: its SIGHUP reload "
    "leaves pods the runtimes it started with), signal (SIGHUP), systemd (restart), none. "
    "[default: auto]"
)


def config_option(command: str, what: str) -> CliOption:
    return CliOption(
        "config", ("--config",), (command,),
        f"The engine's file {what} [default: docker: daemon.json chosen for this host's "
        "Docker (rootful /etc/docker/daemon.json, rootless ~/.config/docker/daemon.json, snap "
        "/var/snap/docker/current/config/daemon.json; printed with why); containerd: "
        "/etc/containerd/config.toml; crio: /etc/crio/crio.conf.d/99-nvidia.conf].",
        rank=10, kind=Path, metavar="PATH")


def _flag(param: str, flags: tuple[str, ...], commands: tuple[str, ...], help: str,
          rank: int) -> CliOption:
    return CliOption(param, flags, commands, help, rank, kind=bool, default=False,
                     show_default=True)


COMMON = [
    config_option("install", "to add the runtime to"),
    config_option("uninstall", "to remove the runtime from"),
    config_option("rollback", "to restore from its backups"),
    config_option("backups", "whose backups to list"),
    config_option("status", "to report on"),
    CliOption("config", ("--config",), ("doctor",),
              "The engine's file to check [default: the one install would change, printed "
              "with why].",
              rank=10, kind=Path, metavar="PATH"),
    CliOption("runtime_name", ("--runtime-name",), ("install", "uninstall"),
              "Name of the runtime entry.", rank=20, default="nvidia", metavar="NAME",
              show_default=True),
    CliOption("runtime_path", ("--runtime-path",), ("install",),
              "Absolute path of nvidia-container-runtime [default: the one installed beside "
              "this nvdocker2].", rank=30, metavar="PATH"),
    _flag("allow_missing_runtime", ("--allow-missing-runtime",), ("install",),
          "Accept a --runtime-path that is not an executable file yet (a package will put "
          "it there); without it install refuses one, as every GPU container would fail.", 35),
    _flag("set_default", ("--set-default",), ("install",),
          "Also make it dockerd's default-runtime.", 50),
    _flag("dry_run", ("--dry-run",), CHANGING,
          "Print a unified diff of the change; touch nothing. Runs every check of the change; "
          "those that need the engine's daemon are listed as unchecked when it is not "
          "running.", 60),
    _flag("require_daemon", ("--require-daemon",), CHANGING,
          "With --dry-run: fail (exit 3) when the engine's daemon cannot be asked, as the "
          "change itself would, instead of listing its checks as unchecked.", 62),
    CliOption("reload", ("--reload",), CHANGING, RELOAD_HELP, rank=70, kind=ReloadMode,
              default=ReloadMode.auto, metavar="MODE"),
    _flag("no_verify", ("--no-verify",), CHANGING,
          "Do not ask dockerd (GET /info) whether it runs the change.", 90),
    CliOption("timeout", ("--timeout",), CHANGING,
              "How long to wait for the lock (another nvdocker2 running) and for dockerd to "
              "report the change.", rank=120, kind=float, default=30.0, metavar="SECONDS",
              show_default=True, minimum=0),
    _flag("json", ("--json",), CHANGING + ("backups", "status"),
          "Print one JSON object on stdout (for scripts).", 160),
    _flag("json", ("--json",), ("doctor",), "Print the results as a JSON list.", 160),
    _flag("verbose", ("--verbose", "-v"), ("doctor",),
          "Show every check on its own line, with what it found.", 166),
]


def to_typer(opt: CliOption, panel: Optional[str] = None) -> Any:
    """The typer OptionInfo for `opt` (a fresh one each time: typer keeps state in them)."""
    kw: dict[str, Any] = {"help": opt.help, "show_default": opt.show_default}
    if opt.metavar is not None:
        kw["metavar"] = opt.metavar
    if isinstance(opt.kind, type) and issubclass(opt.kind, Enum):
        kw["case_sensitive"] = False
    if opt.minimum is not None:  # checked here: typer's own check words it its own way
        kw["callback"] = _at_least(opt.minimum)
    if panel and _typer_has_panels():
        kw["rich_help_panel"] = panel  # shown by typer's rich help; ours prints click's plain
    return typer.Option(opt.default, *opt.flags, **kw)


@functools.lru_cache(maxsize=1)
def _typer_has_panels() -> bool:
    """Whether typer.Option takes rich_help_panel (typer >= 0.6); asked once, not for each
    option of each command every time the commands are built."""
    return "rich_help_panel" in inspect.signature(typer.Option).parameters


def _at_least(minimum: float) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is not None and value < minimum:
            raise typer.BadParameter(f"{value:g} is below {minimum:g}")
        return value
    return check


def install_option(param: str) -> Any:
    """A fresh typer option for `install`'s option `param`, for a command that means the same
    by it (cdi's --json and --timeout, the agent's install flags)."""
    return to_typer(next(o for o in COMMON if o.param == param and "install" in o.commands))


def _annotation(opt: CliOption) -> Any:
    kind = Path if opt.kind == "path" else opt.kind
    return Optional[kind] if opt.default is None else kind


def engine_option() -> inspect.Parameter:
    names = registry.names()
    choice = Enum("EngineName", [(n, n) for n in names], type=str)  # type: ignore[misc]
    listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
    info = typer.Option(choice[registry.BUILTIN[0]], "--engine", case_sensitive=False,
                        show_default=False, metavar="|".join(names),  # typer 0.7 would show
                        # "EngineName.docker"; click 8.2 writes choices in <>
                        help=f"Container engine to configure: {listed} "
                        f"[default: {registry.BUILTIN[0]}].")
    return inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, default=info,
                             annotation=choice)


class EngineCommand:
    """A command whose signature (what typer turns into options) is the CLI's options for it
    plus those of every registered engine, read when the command line is parsed. Calling it
    checks the flags against the chosen engine and runs `body(frontend, opts)` under the
    CLI's error handling."""

    def __init__(self, name: str, doc: str, body: Callable[[Any, Mapping[str, Any]], int],
                 argument: Optional[tuple[str, Any]] = None) -> None:
        self.name = self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.__annotations__: dict = {}
        self._body = body
        self._argument = argument

    @property
    def __signature__(self) -> inspect.Signature:
        params: list[tuple[int, inspect.Parameter]] = []
        kind = inspect.Parameter.KEYWORD_ONLY
        if self._argument is not None:
            name, make_info = self._argument
            params.append((0, inspect.Parameter(name, kind, default=make_info(),
                                                annotation=Optional[str])))
        for opt in COMMON:
            if self.name in opt.commands:
                params.append((opt.rank, inspect.Parameter(
                    opt.param, kind, default=to_typer(opt), annotation=_annotation(opt))))
        engines = registry.names()
        for opt, owners in registry.options(self.name):
            if len(owners) < len(engines):  # say which engines it serves
                opt = dataclasses.replace(opt, help=f"{opt.help} ({', '.join(owners)})")
            params.append((opt.rank, inspect.Parameter(
                opt.param, kind, default=to_typer(opt, f"{', '.join(owners)} options"),
                annotation=_annotation(opt))))
        params.append((170, engine_option()))
        return inspect.Signature([p for _, p in sorted(params, key=lambda rp: rp[0])])

    def __call__(self, **kw: Any) -> None:
        engine = kw["engine"].value

        def go() -> int:
            refuse_foreign_flags(self.name, engine, kw)
            opts = {k: v for k, v in kw.items() if k != "engine"}
            return self._body(registry.frontend(engine), opts)

        run_command(bool(kw.get("json")), go)


def refuse_foreign_flags(command: str, engine: str, given: Mapping[str, Any]) -> None:
    """BadInput (exit 2) naming the flags given that `engine` does not declare."""
    foreign = [(opt.flag, owners) for opt, owners in registry.options(command)
               if engine not in owners and given.get(opt.param)]
    if foreign:
        owners = foreign[0][1]
        raise BadInput(f"{', '.join(flag for flag, _ in foreign)} applies to --engine "
                       f"{' and '.join(owners)} only", f"leave it out with --engine {engine}")


def register(app: Any, name: str, body: Callable[[Any, Mapping[str, Any]], int], doc: str,
             argument: Optional[tuple[str, Any]] = None) -> None:
    from nvdocker2.cli.app import Command

    app.command(name, cls=Command)(EngineCommand(name, doc, body, argument))

