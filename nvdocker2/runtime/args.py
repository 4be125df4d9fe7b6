"""Reading an OCI runtime command line the way runc/crun do (SPEC §3), without acting on it.

Global options come before the subcommand and some take a value (`--root DIR`, `--log FILE`,
…), so `runc --log create state ID` is a `state`, and `create --bundle create ID` has a bundle
named `create`. Go's flag package also accepts one dash (`-root DIR`) and `--flag=value`.
"""

from __future__ import annotations

import os

# runc and crun global options that take a value when written without `=`.
GLOBAL_VALUE_OPTIONS = frozenset((
    "root", "log", "log-format", "log-level", "criu", "rootless", "cgroup-manager",
))
# `create` options that take a value (runc and crun); `--bundle`/`-b` is among them.
CREATE_VALUE_OPTIONS = frozenset((
    "bundle", "b", "console-socket", "pid-file", "preserve-fds",
))


def _option_name(arg: str) -> tuple[str, bool]:
    """`--root=/x` → ("root", True); `-b` → ("b", False)."""
    name = arg.lstrip("-")
    if "=" in name:
        return name.split("=", 1)[0], True
    return name, False


def subcommand(argv: list[str]) -> tuple[str | None, int]:
    """The subcommand of a runtime argv (argv[0] is the program) and its index, or (None, -1)."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("-") and arg != "-":
            name, has_value = _option_name(arg)
            i += 2 if (name in GLOBAL_VALUE_OPTIONS and not has_value) else 1
            continue
        return arg, i
    if i < len(argv):
        return argv[i], i
    return None, -1


def parse_args(argv: list[str], cwd: str | None = None) -> tuple[bool, str | None]:
    """(is_create, bundle): bundle is the absolute bundle dir of a `create` (from `--bundle DIR`,
    `--bundle=DIR`, `-b DIR`, `-b=DIR`, the last one winning, else `cwd`), None otherwise."""
    command, index = subcommand(argv)
    if command != "create":
        return False, None
    bundle = None
    i = index + 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            name, has_value = _option_name(arg)
            if name in CREATE_VALUE_OPTIONS:
                if has_value:
                    value = arg.split("=", 1)[1]
                    i += 1
                elif i + 1 < len(argv):
                    value = argv[i + 1]
                    i += 2
                else:
                    value = None
                    i += 1
                if name in ("bundle", "b") and value is not None:
                    bundle = value
                continue
        i += 1
    base = os.getcwd() if cwd is None else cwd
    if not bundle:
        return True, base
    return True, os.path.normpath(os.path.join(base, bundle))
