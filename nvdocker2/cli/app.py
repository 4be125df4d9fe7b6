"""The typer plumbing of the `nvdocker2` command (docs/reference.md §2) and where its output goes.

Errors are `NvDockerError`s carrying their exit code (reference §2); they become one `error:`
line and one `hint:` line in exactly one place (`fail`), with a traceback only when
NVDOCKER2_DEBUG=1. With --json, stdout gets one JSON object whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any, Callable, Iterator

from nvdocker2 import __version__
from nvdocker2.cli import values
from nvdocker2.errors import EXIT_INTERNAL, NvDockerError
from nvdocker2.oneline import one_line


def _import_typer() -> Any:
    """typer, loaded without rich. typer < 0.8 imports rich (and markdown-it, ~0.1 s) as it
    loads, only to format help, which we print plain on every typer version (see `Command`);
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
click_errors = sys.modules[typer.BadParameter.__module__]


class Command(typer.core.TyperCommand):
    """Plain click help on every typer: typer < 0.8 formats help with rich whenever rich is
    importable, and rich's tables cut long defaults with "…". Option values are converted
    without pydantic where typer >= 0.29 would import it for them (nvdocker2.cli.values)."""

    def parse_args(self, ctx: Any, args: Any) -> Any:
        values.quicken(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(typer.core.TyperCommand, self).format_help(ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        """The command's first paragraph, whole (click cuts it at `limit` with "...")."""
        return " ".join((self.short_help or (self.help or "").split("\n\n")[0]).split())


class _Group(typer.core.TyperGroup):
    __doc__ = Command.__doc__ + """ `--install-completion` says the shell by its name
    (`_install_completion`)."""

    def parse_args(self, ctx: Any, args: Any) -> Any:
        params = self.get_params(ctx)
        values.quicken(params)
        for p in params:
            if p.name == "install_completion":
                p.callback = _install_completion
        return super().parse_args(ctx, args)


def _install_completion(ctx: Any, param: Any, value: Any) -> Any:
    """typer's --install-completion, saying "bash completion installed in PATH": typer's own
    prints its Shells Enum where it has one ("Shells.bash ...", typer 0.7 on Python 3.11)."""
    if not value or ctx.resilient_parsing:
        return value
    from typer import completion

    if isinstance(value, str):  # a shell named (a Shells Enum is a str too)
        shell, path = completion.install(shell=getattr(value, "value", value))
    else:  # the flag alone: typer detects the shell
        shell, path = completion.install()
    typer.secho(f"{getattr(shell, 'value', shell)} completion installed in {path}", fg="green")
    typer.echo("Completion will take effect once you restart the terminal")
    raise typer.Exit(0)


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def make_typer(**kw: Any) -> Any:
    return typer.Typer(cls=_Group, context_settings=CONTEXT, no_args_is_help=True,
                       rich_markup_mode=None, pretty_exceptions_enable=False, **kw)


app = make_typer(
    add_completion=True,
    help="Configure Docker for NVIDIA GPUs: add, remove and check the nvidia runtime in "
    "daemon.json safely (merge, backup, atomic write, reload, verify, roll back).",
)


# --- output ------------------------------------------------------------------------------------


class Out:
    """Where the current command writes; set once per command."""

    json = False


def to_stderr(line: str) -> None:
    """One line on stderr; control characters in it are escaped (reference §8: one line each)."""
    sys.stderr.write(one_line(line) + "\n")
    sys.stderr.flush()


def emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def debug_mode() -> bool:
    return os.environ.get("NVDOCKER2_DEBUG", "") not in ("", "0")


def fail(e: NvDockerError) -> int:
    """The one place an NvDockerError becomes output; returns the exit code."""
    if debug_mode():
        traceback.print_exception(type(e), e, e.__traceback__)
    if Out.json:
        emit_json(dict(_failed_json(e), error=e.message, hint=e.hint, exit_code=e.exit_code))
    to_stderr(f"error: {e.message}")
    if e.hint:
        to_stderr(f"hint: {e.hint}")
    return e.exit_code


class CliReporter:
    """Progress lines and a spinner on stderr when a person is watching (a TTY, no --json)."""

    def __init__(self, json_mode: bool) -> None:
        self.live = not json_mode and sys.stderr.isatty()

    def progress(self, message: str) -> None:
        if self.live:
            to_stderr(f"... {message}")

    @contextlib.contextmanager
    def waiting(self, message: str) -> Iterator[None]:
        if not self.live:
            yield
            return
        from rich.console import Console

        with Console(stderr=True).status(message):
            yield


def _failed_json(e: Any) -> dict:
    """The keys every --json answer has (reference §2), for a run that failed: what the
    transaction said of its file and backup (null when it did not get that far)."""
    return {"changed": False, "config": getattr(e, "config", None),
            "backup": getattr(e, "backup", None), "reload": None, "verified": False,
            "warnings": [], "notes": [], "changes": [], "dry_run": None, "before": None,
            "after": None}


def interrupted(e: BaseException | None = None) -> int:
    # The transaction says exactly what the files hold (nvdocker2.errors.Interrupted).
    if e is not None and not hasattr(e, "state"):
        e = getattr(e, "__cause__", None) or e  # click's Abort, raised from the interrupt
    state = getattr(e, "state", None) or "daemon.json is unchanged or was restored"
    message = f"interrupted; {state}"
    if Out.json:
        emit_json(dict(_failed_json(e), error=message, hint=None, exit_code=EXIT_INTERNAL))
    to_stderr(f"error: {message}")
    return EXIT_INTERNAL


def run_command(json_mode: bool, fn: Callable[[], int | None]) -> None:
    Out.json = json_mode
    try:
        code = fn()
    except NvDockerError as e:
        raise typer.Exit(fail(e)) from None
    except KeyboardInterrupt as e:  # recent typer turns it into a silent exit 130
        raise typer.Exit(interrupted(e)) from None
    if code:
        raise typer.Exit(code)


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
