"""The `nvdocker2` console script: `cdi refresh` in its common forms straight, every other
command line through the CLI (nvdocker2.cli).

The packages run `nvdocker2 cdi refresh` at every boot, driver change and MIG change, and it
mostly finds nothing to do: the CLI's parser alone costs more to import than the refresh
costs to run. So a command line of only `cdi refresh` and its own options, each given once
with a plain value, runs here without the parser, printing what the CLI prints and exiting
as it exits; anything else (help, completion, a bad or empty value, an unknown word) goes
to the CLI, so every help text and usage error is the CLI's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, List, NoReturn, Optional

_VALUED = ("--config", "--cdi-spec-dir", "--timeout")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")  # what --timeout takes here; the CLI judges the rest


def refresh_options(argv: List[str]) -> Optional[dict[str, Any]]:
    """The options of a plain `cdi refresh ...` command line; None for any other (the CLI's)."""
    if argv[:2] != ["cdi", "refresh"] or os.environ.get("_NVDOCKER2_COMPLETE"):
        return None
    found: dict[str, Any] = {"json": False}
    words = argv[2:]
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if flag == "--json" and not eq:
            found["json"] = True
            i += 1
            continue
        if flag not in _VALUED or flag in found:
            return None
        if not eq:
            if i + 1 >= len(words):
                return None
            value = words[i + 1]
            i += 1
        if not value or value.startswith("-"):
            return None
        if flag == "--timeout" and not _NUMBER.fullmatch(value):
            return None
        found[flag] = value
        i += 1
    return found


def _on_signal(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cdi_refresh(found: dict[str, Any]) -> NoReturn:
    """`nvdocker2 cdi refresh` as nvdocker2.cli.cdi runs it: the same lines, JSON and exit
    codes (its errors are rendered by the CLI's one handler, imported only then)."""
    from nvdocker2 import redact
    from nvdocker2.errors import EXIT_INTERNAL, NvDockerError

    redact.mask_standard_streams()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, _on_signal)
    config = found.get("--config")
    try:
        from nvdocker2.engines.docker import cdi_refresh as refresh

        res = refresh.command(Path(config) if config else None, found.get("--cdi-spec-dir"),
                              float(found.get("--timeout", 30.0)))
    except NvDockerError as e:
        from nvdocker2.cli.app import Out, fail

        Out.json = found["json"]
        sys.exit(fail(e))
    except KeyboardInterrupt as e:
        from nvdocker2.cli.app import Out, interrupted

        Out.json = found["json"]
        sys.exit(interrupted(e))
    except Exception as e:  # as nvdocker2.cli.main: one line, a traceback only in debug
        from nvdocker2.cli.app import debug_mode, to_stderr

        if debug_mode():
            import traceback

            traceback.print_exc()
        to_stderr(f"error: internal error: {type(e).__name__}: {e}")
        to_stderr("hint: run again with NVDOCKER2_DEBUG=1 for a traceback and report it")
        sys.exit(EXIT_INTERNAL)
    if found["json"]:
        sys.stdout.write(json.dumps(res.to_json(), indent=2, ensure_ascii=False,
                                    default=str) + "\n")
    else:
        sys.stdout.write(res.line() + "\n")
    sys.stdout.flush()
    sys.exit(0)


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point (reference §2)."""
    args = sys.argv[1:] if argv is None else list(argv)
    found = refresh_options(args)
    if found is not None:
        cdi_refresh(found)
    from nvdocker2.cli import main as cli_main

    cli_main(argv)
