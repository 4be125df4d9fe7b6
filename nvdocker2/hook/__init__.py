"""nvidia-container-runtime-hook: the OCI prestart hook (docs/reference.md §4).

`nvidia-container-runtime-hook [--config FILE] [--debug] prestart|poststart|poststop`

runc runs it with the container state on stdin and only the `env` its spec entry lists (often
nothing); under `docker run --gpus` dockerd adds it with dockerd's whole environment. Neither
environment decides anything here: the config file comes from `--config` (or
NVIDIA_CONTAINER_RUNTIME_CONFIG, or the default path), the cli from the config or a fixed
system PATH, and the cli's environment is built from scratch.

Only `prestart` works; a GPU request is turned into one exec of `nvidia-container-cli
configure …`. A refusal is one line on stderr (runc shows it in the error docker prints) and
exit 1.
"""

from __future__ import annotations

import os
import sys

PROG = "nvidia-container-runtime-hook"
MAX_STATE_BYTES = 4 * 1024 * 1024
MAX_SPEC_BYTES = 16 * 1024 * 1024
USAGE = f"usage: {PROG} [--config FILE] [--debug] prestart|poststart|poststop, or {PROG} --version"


class HookError(Exception):
    """A failure the hook reports as one line and exit 1."""


def _parse_argv(argv: list[str]) -> tuple[str | None, bool, str]:
    config = None
    debug = False
    command = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--config", "-config"):
            if i + 1 >= len(argv):
                raise _Usage("--config needs a file")
            config = argv[i + 1]
            i += 2
            continue
        if arg.startswith(("--config=", "-config=")):
            config = arg.split("=", 1)[1]
        elif arg in ("--debug", "-debug"):
            debug = True
        elif arg in ("prestart", "poststart", "poststop") and command is None:
            command = arg
        else:
            raise _Usage(f"unexpected argument {arg!r:.80}")
        i += 1
    if command is None:
        raise _Usage("missing the hook stage (prestart, poststart or poststop)")
    return config, debug, command


class _Usage(Exception):
    pass


def _read_limited(stream, limit: int, what: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise HookError(f"{what} is larger than {limit} bytes; refusing it")
    return data


def _load_json(data: bytes, what: str):
    from nvdocker2.runtime import jsonio

    try:
        return jsonio.loads(data)
    except (ValueError, RecursionError) as e:
        raise HookError(f"{what} is not valid JSON: {str(e)[:200]}") from None


def read_state(stream) -> tuple[str, int]:
    """The OCI state on stdin → (bundle, pid). Accepts the old `bundlePath` name."""
    state = _load_json(_read_limited(stream, MAX_STATE_BYTES, "container state on stdin"),
                       "container state on stdin")
    if not isinstance(state, dict):
        raise HookError("container state on stdin is not a JSON object")
    bundle = state.get("bundle", state.get("bundlePath"))
    if not isinstance(bundle, str) or not bundle:
        raise HookError("container state on stdin has no 'bundle'")
    if not os.path.isabs(bundle):
        raise HookError(f"container state: bundle {bundle!r:.200} is not an absolute path")
    pid = state.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise HookError(f"container state: 'pid' must be a positive integer, got {pid!r:.40}")
    return bundle, pid


def load_spec(bundle: str) -> tuple[dict, str]:
    """BUNDLE/config.json → (spec, absolute rootfs). Relative `root.path` is under the bundle."""
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, "rb") as f:
            data = _read_limited(f, MAX_SPEC_BYTES, path)
    except OSError as e:
        raise HookError(f"cannot read {path}: {e.strerror}") from None
    spec = _load_json(data, path)
    if not isinstance(spec, dict):
        raise HookError(f"{path}: not a JSON object")
    return spec, spec_rootfs(spec, path, bundle)


def spec_rootfs(spec: dict, path: str, bundle: str) -> str:
    """The absolute rootfs of an OCI spec read from `path` in `bundle`, after checking that the
    spec has what the hook needs; the runtime checks a bundle at `create` with the same words."""
    for key in ("ociVersion", "process", "root"):
        if key not in spec:
            raise HookError(f"{path}: missing '{key}'; not an OCI runtime spec")
    root = spec["root"]
    rootfs = root.get("path") if isinstance(root, dict) else None
    if not isinstance(rootfs, str) or not rootfs:
        raise HookError(f"{path}: 'root.path' must be a non-empty string")
    return os.path.normpath(os.path.join(bundle, rootfs))


def _debug(enabled: bool, message: str) -> None:
    if enabled:
        print(f"{PROG}: debug: {message}", file=sys.stderr)


def prestart(config_file: str | None, debug: bool, stdin) -> int:
    """Decide, then exec nvidia-container-cli (returns only when there is nothing to do)."""
    from nvdocker2 import toolkit_config
    from nvdocker2.hook.cli_argv import CliNotFound, build_argv, cli_environment, find_cli
    from nvdocker2.hook.request import RequestError, request_from_spec

    try:
        config = toolkit_config.load(config_file)
    except toolkit_config.ConfigError as e:
        raise HookError(str(e)) from None
    _debug(debug, f"config {config.path} ({'read' if config.source else 'absent, defaults'})"
           + (f", per-user {config.user_source} over it" if config.user_source else ""))
    bundle, pid = read_state(stdin)
    spec, rootfs = load_spec(bundle)
    try:
        request = request_from_spec(spec, config)
    except RequestError as e:
        raise HookError(e.message) from None
    if request is None:
        _debug(debug, "not a GPU container; nothing to do")
        return 0
    try:
        cli = find_cli(config)
    except CliNotFound as e:
        raise HookError(str(e)) from None
    argv = build_argv(cli, request, config, pid, rootfs)
    env = cli_environment(config)
    _debug(debug, f"exec {argv}")
    sys.stdout.flush()
    sys.stderr.flush()
    from nvdocker2.host.run import NotRun, exec_program

    try:
        exec_program(cli, argv, env)  # checked again: the file may have changed since
    except NotRun as e:
        if e.missing:  # gone since find_cli saw it
            raise HookError(f"cannot run {cli}: No such file or directory") from None
        raise HookError(f"refusing to run {cli}: {e.reason}") from None
    except OSError as e:
        raise HookError(f"cannot run {cli}: {e.strerror}") from None
    return 1  # not reached


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code (0, 1 refused/failed, 2 usage)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["-v"]):
        from nvdocker2 import __version__

        print(f"{PROG} version {__version__} (nvdocker2)")
        return 0
    try:
        config_file, debug, command = _parse_argv(args)
    except _Usage as e:
        _error(e)
        print(USAGE, file=sys.stderr)
        return 2
    if command != "prestart":
        return 0
    try:
        return prestart(config_file, debug, sys.stdin.buffer)
    except HookError as e:
        _error(e)
        return 1
    except Exception as e:  # one line, never a traceback in docker's error, unless --debug
        if debug:
            raise
        _error(f"internal error: {type(e).__name__}: {e}")
        return 1


def _error(text: object) -> None:
    # Imported here, on errors only: one module less at every container start.
    from nvdocker2.oneline import one_line

    print(f"{PROG}: error: {one_line(text)}", file=sys.stderr)
