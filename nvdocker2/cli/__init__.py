"""The `nvdocker2` command (SPEC §2): one module per command group, each parsing its flags,
resolving the engine by name (nvdocker2.engines.registry) and rendering what it returns.

`app` holds the typer plumbing and the one place errors become output; `options` the
options (the CLI's own and those the engines declare); `render` how results look;
`install` (install, uninstall, rollback), `state` (backups, status), `doctor` and `cdi` the
commands. `main` is the console script: it maps every outcome to a SPEC exit code.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import traceback
from typing import Any, List, Optional

from nvdocker2 import redact
from nvdocker2.cli import agent, cdi, doctor, install, state
from nvdocker2.cli.app import (
    _click_errors,
    _debug,
    _fail,
    _interrupted,
    _stderr,
    app,
    typer,
)
from nvdocker2.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, NvDockerError

for _group in (install, state, doctor, cdi, agent):  # the order of `nvdocker2 --help`
    _group.add(app)


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
