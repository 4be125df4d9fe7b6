"""Reading an OCI runtime command line the way runc/crun do (reference §3), without acting on it.

Global options come before the subcommand and some take a value (`--root DIR`, `--log FILE`,
…), so `runc --log create state ID` is a `state`, and `create --bundle create ID` has a bundle
named `create`. Go's flag package also accepts one dash (`-root DIR`) and `--flag=value`.
With `--help`/`-h`/`--version`/`-v` runc prints and creates nothing, so that is no `create`.
"""

from __future__ import annotations

import os

# runc and crun global options that take a value when written without `=`.
GLOBAL_VALUE_OPTIONS = frozenset((
    "root", "log", "log-format", "log-level", "criu", "rootless", "cgroup-manager",
))
# Boolean flags with which runc prints help or its version and creates nothing (urfave/cli).
GLOBAL_INFO_FLAGS = frozenset(("h", "help", "v", "version"))
CREATE_INFO_FLAGS = frozenset(("h", "help"))
_GO_FALSE = frozenset(("0", "f", "F", "false", "FALSE", "False"))
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


def _is_info_flag(arg: str, names: frozenset) -> bool:
    """`--help`, `-h=true`… (set, not `=false`) among `names`."""
    if not arg.startswith("-") or arg == "-":
        return False
    name, has_value = _option_name(arg)
    return name in names and not (has_value and arg.split("=", 1)[1] in _GO_FALSE)


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
    i = 1
    while i < index:
        if _is_info_flag(argv[i], GLOBAL_INFO_FLAGS):
            return False, None  # runc prints help or its version; no bundle must change
        name, has_value = _option_name(argv[i])
        i += 2 if (name in GLOBAL_VALUE_OPTIONS and not has_value) else 1
    bundle = None
    i = index + 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if _is_info_flag(arg, CREATE_INFO_FLAGS):
            return False, None
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
