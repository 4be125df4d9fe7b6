"""The `nvdocker2` command (reference §2): one module per command group, each parsing its flags,
resolving the engine by name (nvdocker2.engines.registry) and rendering what it returns.

`app` holds the typer plumbing and the one place errors become output; `options` the
options (the CLI's own and those the engines declare); `render` how results look;
`install` (install, uninstall, rollback), `state` (backups, status), `doctor`, `cdi` and
`system` the commands. `main` is the console script: it maps every outcome to an exit code
(reference §2).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import sys
import traceback
from typing import Any, List, Optional

from nvdocker2 import redact
from nvdocker2.cli import agent, cdi, doctor, install, state, system
from nvdocker2.cli.app import (
    click_errors,
    debug_mode,
    fail,
    interrupted,
    to_stderr,
    app,
    typer,
)
from nvdocker2.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, NvDockerError

for _group in (install, state, doctor, cdi, system, agent):  # the order of `nvdocker2 --help`
    _group.add(app)


def _on_signal(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _command(argv: List[str]) -> tuple[str, Any]:
    """`nvdocker2 COMMAND...` for the commands named at the head of `argv`, and the last one's
    click command (click raises some usage errors, a missing option value among them, before
    it knows the command)."""
    path, group = ["nvdocker2"], typer.main.get_command(app)
    for word in argv:
        sub = getattr(group, "commands", {}).get(word)
        if sub is None:
            break
        path.append(word)
        group = sub
    return " ".join(path), group


def _empty_path(argv: List[str]) -> Optional[str]:
    """The first option taking a path that `argv` gives an empty value (`--config ''`), which
    would otherwise name the working directory."""
    if "" not in argv and not any(word.endswith("=") for word in argv):
        return None  # the common case, without building the commands
    _, command = _command(argv)
    flags = {flag for p in getattr(command, "params", ())
             if getattr(p, "metavar", None) in ("PATH", "DIR") for flag in p.opts}
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in flags and ((eq and not value) or (not eq and argv[i + 1:i + 2] == [""])):
            return flag
    return None


def _plain_words(message: str, argv: List[str]) -> str:
    """typer >= 0.20 words some errors in pydantic's terms; say them as click does."""
    message = message.replace(": Value error, ", ": ")
    m = re.match(r"Invalid value for '(--[\w-]+)': Input should be a valid number", message)
    if m:
        flag = m.group(1)
        given = [a.partition("=")[2] for a in argv if a.startswith(flag + "=")]
        given += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
        if given:
            message = f"Invalid value for '{flag}': {given[-1]!r} is not a valid float."
    return message


def _usage_error(e: Any, argv: List[str]) -> int:
    """A usage error (unknown option or command, bad value, missing argument): our two lines,
    exit 2, the same on every typer version."""
    message = " ".join(e.format_message().split()) or "bad usage"
    message = _plain_words(message, argv)
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else _command(argv)[0]
    to_stderr(f"error: {message}")
    to_stderr(f"hint: see '{where} --help' for its options")
    return EXIT_BAD_INPUT


def _app_for(args: List[str]) -> Any:
    """`app`, or a copy holding only what `args` can reach: typer builds every command it holds
    (each one's options, from every engine) on each start, though a command line runs one.
    The named command or group alone where the first word that is not an option names one;
    no command for a plain `--version`; the whole app for help, completion and anything
    else, so that every error and every help text is the one the whole app gives."""
    if os.environ.get("_NVDOCKER2_COMPLETE") or "-h" in args or "--help" in args:
        return app
    word = next((a for a in args if not a.startswith("-")), None)
    if word is None:
        if "--version" not in args:
            return app
        names: set = set()
    else:
        names = {word}
        known = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
        if word not in known:
            return app
    narrow = copy.copy(app)
    narrow.registered_commands = [c for c in app.registered_commands if c.name in names]
    narrow.registered_groups = [g for g in app.registered_groups if g.name in names]
    return narrow


def _exits() -> tuple:
    """typer.Exit, and click's Exit where typer raises that instead (typer < 0.20)."""
    return tuple({typer.Exit, getattr(click_errors, "Exit", typer.Exit)})


def _aborts() -> tuple:
    return tuple({typer.Abort, getattr(click_errors, "Abort", typer.Abort)})


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the app and maps every outcome to an exit code
    (reference §2)."""
    redact.mask_standard_streams()  # no URL password reaches a terminal or a log
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, _on_signal)
    no_args = getattr(click_errors, "NoArgsIsHelpError", None)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        empty = _empty_path(args)
        if empty is not None:
            raise click_errors.BadParameter("an empty path names no file",
                                             param_hint=f"'{empty}'")
        rv = _app_for(args)(args=argv, prog_name="nvdocker2", standalone_mode=False)
    except _exits() as e:
        sys.exit(e.exit_code)
    except click_errors.UsageError as e:
        if no_args is not None and isinstance(e, no_args) and e.ctx is not None:
            # click >= 8.2 (typer >= 0.20): no command given is an error; typer 0.7 prints the
            # help and exits 0, which every version does here.
            typer.echo(e.ctx.get_help())
            sys.exit(0)
        sys.exit(_usage_error(e, args))
    except click_errors.ClickException as e:
        to_stderr(f"error: {' '.join(e.format_message().split())}")
        to_stderr("hint: see 'nvdocker2 --help'")
        sys.exit(e.exit_code)
    except _aborts() as e:
        sys.exit(interrupted(e))
    except NvDockerError as e:
        sys.exit(fail(e))
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    except Exception as e:  # an unexpected internal error: one line, traceback only in debug
        if debug_mode():
            traceback.print_exc()
        to_stderr(f"error: internal error: {type(e).__name__}: {e}")
        to_stderr("hint: run again with NVDOCKER2_DEBUG=1 for a traceback and report it")
        sys.exit(EXIT_INTERNAL)
    sys.exit(rv if isinstance(rv, int) else 0)
