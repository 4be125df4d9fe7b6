"""The prestart hook the runtime writes at `create`: everything decided, but the pid.

At `create` the runtime has config.toml and config.json in hand, so it makes every decision
`nvidia-container-runtime-hook` would make at prestart (docs/reference.md §4: is it a GPU
container, which
devices, capabilities and requirements, or a refusal) with the hook's own code, and refuses a
bad request before runc starts, in the hook's words. What it writes into config.json is the
finished nvidia-container-cli command line behind a few lines of POSIX sh, run by runc as
`sh -c SCRIPT nvidia-container-runtime-hook ROOTFS CLI ARGS...` with the cli's whole
environment as the hook's `env`. At prestart the script reads the container's pid from the
state runc writes on its stdin and execs the cli: no Python, no config file read, nothing
from the container's or runc's environment. A container that asks for no GPU gets no hook.

The script takes the first `"pid":` of the state. In JSON that text is either the key `pid` or
the end of a key that ends in `"pid` (an annotation could be named so); the value of such an
annotation is a string, so the script refuses it rather than reading a wrong number, and runc
and crun write the container's own `pid` before the annotations anyway.
"""

from __future__ import annotations

import os

from nvdocker2.hook import PROG as HOOK_PROG
from nvdocker2.hook import HookError, spec_rootfs
from nvdocker2.hook.request import RequestError, request_from_spec

SHELL = "/bin/sh"
# $1 is the rootfs, the rest the cli's command line up to --pid. Every expansion is quoted:
# nothing read from the state or written in config.json is ever parsed as shell.
SCRIPT = r"""s=
while IFS= read -r l; do s=$s$l; done
s=$s$l
p=${s#*\"pid\":}
if [ "$p" = "$s" ]; then
    echo "$0: error: container state on stdin has no 'pid'" >&2
    exit 1
fi
p=${p#"${p%%[!	 ]*}"}
n=${p%%[!0-9]*}
case $n:${p#"$n"} in
    0*|:*) ;;
    *:|*:[,}\ \	]*) r=$1; shift; exec "$@" "--pid=$n" "$r" ;;
esac
echo "$0: error: container state: 'pid' must be a positive integer" >&2
exit 1
"""
# Room left for `--pid=PID` and what the kernel counts besides the strings.
_ARG_SLACK = 4096
_MAX_ARG_STRLEN = 131072  # the kernel's limit on one argument or environment string


class Refusal(Exception):
    """What the hook would have refused at prestart, refused at create in the hook's words."""


def gpu_prestart_hook(spec: dict, spec_path: str, bundle: str, config) -> dict | None:
    """The prestart entry that configures this container's GPUs, or None when the container
    asks for none. Raises Refusal for a request the hook refuses."""
    try:
        rootfs = spec_rootfs(spec, spec_path, os.path.abspath(bundle))
        request = request_from_spec(spec, config)
    except HookError as e:
        raise Refusal(str(e)) from None
    except RequestError as e:
        raise Refusal(e.message) from None
    if request is None:
        return None
    # Only a GPU container needs the cli: where nvidia is the default runtime, most are not.
    from nvdocker2.hook.cli_argv import CliNotFound, argv_before_pid, cli_environment, find_cli

    try:
        cli = find_cli(config)
    except CliNotFound as e:
        raise Refusal(str(e)) from None
    argv = argv_before_pid(cli, request, config)
    env = [f"{name}={value}" for name, value in cli_environment(config).items()]
    # argv[0] "sh": a bash that is /bin/sh then runs in POSIX mode and reads no start-up file.
    args = ["sh", "-c", SCRIPT, HOOK_PROG, rootfs, *argv]
    _check_exec_size(cli, args, env)
    return {"path": SHELL, "args": args, "env": env}


def _check_exec_size(cli: str, args: list[str], env: list[str]) -> None:
    """Refuse at create a command line the kernel would refuse at prestart (E2BIG), with the
    message the hook gives when its exec of the cli fails so."""
    strings = [s.encode("utf-8", "surrogateescape") for s in (*args, *env)]
    try:
        limit = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):  # pragma: no cover - every Linux has it
        limit = 2 * 1024 * 1024
    total = sum(len(s) + 1 + 8 for s in strings) + _ARG_SLACK
    if total > limit or any(len(s) >= _MAX_ARG_STRLEN for s in strings):
        raise Refusal(f"cannot run {cli}: Argument list too long")
