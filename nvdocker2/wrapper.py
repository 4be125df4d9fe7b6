"""`nvidia-docker`: the classic wrapper around the docker CLI (docs/reference.md §1).

`nvidia-docker run …` becomes `docker run --runtime=nvidia …` (likewise `create`, and the
`container run` / `container create` spellings), with `-e NVIDIA_VISIBLE_DEVICES=…` added
when `NV_GPU` is set. `NV_DOCKER` names the docker command. `nvidia-docker version` prints
our version line before docker's output. Everything else is handed to docker unchanged.

The docker CLI replaces this process (`execvp`), so signals, the terminal and the exit code
are docker's own. Standard library only: this runs on every `nvidia-docker` call.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, TextIO

from nvdocker2 import __version__
from nvdocker2.host import run as door
from nvdocker2.device_ids import RequestError, is_void, parse_device_list
from nvdocker2.oneline import one_line

EXIT_BAD_INPUT = 2
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

# docker's global options (docker CLI 20.10 to 27) that take a value, long and short forms.
_VALUE_LONG = frozenset(
    {"--config", "--context", "--host", "--log-level", "--tlscacert", "--tlscert", "--tlskey"}
)
_VALUE_SHORT = frozenset("cHl")
# docker's global flags without a value.
_BOOL_LONG = frozenset({"--debug", "--tls", "--tlsverify", "--version", "--help"})
_BOOL_SHORT = frozenset("Dvh")

_GPU_COMMANDS = frozenset({"run", "create"})


class WrapperError(Exception):
    """A bad environment variable: `message` is the `error:` line, `hint` the `hint:` line."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Plan:
    """What to exec: the full argv (argv[0] is looked up on PATH) and an optional line to print."""

    argv: list[str]
    banner: str | None = None
    banner_to_stderr: bool = False


def find_subcommand(args: Sequence[str]) -> int | None:
    """Index in `args` of docker's subcommand, skipping docker's global options and their values.

    Returns None when there is no subcommand (`nvidia-docker --help`) or when an option is one
    this wrapper does not know, in which case it cannot tell a value from a subcommand and
    leaves the command line alone.
    """
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1 if i + 1 < len(args) else None
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            if name in _VALUE_LONG and not has_value:
                i += 2
                continue
            if name in _VALUE_LONG or name in _BOOL_LONG:
                i += 1
                continue
            return None
        if arg.startswith("-") and arg != "-":
            # A group of short flags, as pflag reads it: -D, -Dl debug, -Hunix://…, -H=unix://…
            takes_next = False
            for pos, char in enumerate(arg[1:], start=1):
                if char in _BOOL_SHORT:
                    continue
                if char in _VALUE_SHORT:
                    takes_next = pos == len(arg) - 1
                    break
                return None
            i += 2 if takes_next else 1
            continue
        return i
    return None


def visible_devices(nv_gpu: str) -> str | None:
    """`NV_GPU` ("0 1", "0,1", "GPU-…") as a NVIDIA_VISIBLE_DEVICES value, None when empty.

    Checked by the hook's own validator (`nvdocker2.device_ids`), so an id the hook would
    refuse at container start (`٣`, `MIG-GPU-…/1/0`, `all,0`) is refused here, before docker
    runs; `void` is passed as the hook reads it (no GPU at all).
    """
    ids = [part for part in re.split(r"[\s,]+", nv_gpu) if part]
    if not ids:
        return None
    value = ",".join(ids)
    if is_void(value):
        return value
    try:
        parse_device_list(value, "NV_GPU")
    except RequestError as exc:
        raise WrapperError(
            f"NV_GPU={nv_gpu!r}: {exc.message.removeprefix('NV_GPU: ')}",
            "set NV_GPU to GPU indices (0 1), N:M MIG indices or GPU-/MIG- UUIDs separated by "
            "spaces or commas, or to all or none alone; or unset it",
        ) from None
    return value


def docker_command(nv_docker: str | None) -> list[str]:
    """The docker command from `NV_DOCKER`, split like a shell word list ("sudo docker" works,
    as it did with the original shell wrapper); `docker` when unset or blank."""
    if not nv_docker or not nv_docker.strip():
        return ["docker"]
    try:
        words = shlex.split(nv_docker)
    except ValueError as exc:
        raise WrapperError(
            f"NV_DOCKER={nv_docker!r}: {exc}",
            "set NV_DOCKER to the docker command, e.g. NV_DOCKER=/usr/bin/docker",
        ) from None
    return words


def plan(args: Sequence[str], environ: Mapping[str, str]) -> Plan:
    """The docker argv for `nvidia-docker ARGS` under `environ`. Pure: no I/O."""
    docker = docker_command(environ.get("NV_DOCKER"))
    args = list(args)
    index = find_subcommand(args)
    if index is None:
        return Plan(docker + args)
    command = args[index]
    if command == "version":
        rest = args[index + 1 :]
        formatted = any(a in ("-f", "--format") or a.startswith(("--format=", "-f=")) for a in rest)
        # With --format the output is read by a program: keep stdout docker's alone.
        return Plan(docker + args, f"NVIDIA Docker: {__version__}", banner_to_stderr=formatted)
    if command == "container" and index + 1 < len(args) and args[index + 1] in _GPU_COMMANDS:
        index += 1
        command = args[index]
    if command in _GPU_COMMANDS:
        extra = ["--runtime=nvidia"]
        devices = visible_devices(environ.get("NV_GPU", ""))
        if devices is not None:
            extra += ["-e", f"NVIDIA_VISIBLE_DEVICES={devices}"]
        return Plan(docker + args[: index + 1] + extra + args[index + 1 :])
    return Plan(docker + args)


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    execvp: Callable[[str, list[str]], object] = door.exec_program,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Entry point of `nvidia-docker`: exec docker, or return an exit code when that fails.

    `execvp`, `environ` and the streams are parameters so tests can see the exact argv.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    environ = os.environ if environ is None else environ
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        what = plan(args, environ)
    except WrapperError as exc:
        print(f"error: {one_line(exc.message)}", file=stderr)
        print(f"hint: {one_line(exc.hint)}", file=stderr)
        return EXIT_BAD_INPUT
    if what.banner is not None:
        out = stderr if what.banner_to_stderr else stdout
        print(what.banner, file=out)
        out.flush()
    try:
        execvp(what.argv[0], what.argv)
    except door.NotRun as exc:
        print(f"error: cannot run {what.argv[0]!r}: {one_line(str(exc))}", file=stderr)
        if exc.missing:
            print("hint: install the docker CLI, or set NV_DOCKER to its path", file=stderr)
            return EXIT_NOT_FOUND
        print("hint: set NV_DOCKER to a docker CLI that only root (or you) can replace",
              file=stderr)
        return EXIT_NOT_EXECUTABLE
    except FileNotFoundError:
        print(f"error: cannot run {what.argv[0]!r}: command not found", file=stderr)
        print("hint: install the docker CLI, or set NV_DOCKER to its path", file=stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"error: cannot run {what.argv[0]!r}: {one_line(exc.strerror)}", file=stderr)
        print("hint: set NV_DOCKER to an executable docker CLI", file=stderr)
        return EXIT_NOT_EXECUTABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
