"""nvidia-container-runtime: the OCI runtime shim (docs/reference.md §3).

containerd-shim runs it for every step of every container (create, start, state, kill,
delete, …). Only `create` is ours to change: it decides what the container asks of the GPUs
(or refuses it) and gives the bundle's config.json a prestart hook that only has to read the
container's pid and exec nvidia-container-cli (nvdocker2.runtime.prestart), then execs the
low-level runtime (runc/crun) with the untouched argv. Every other
subcommand is exec'd at once, importing as little as possible: this module imports only os and
sys, and reads config.toml with tomllib only when the file sets something a pass-through needs.
"""

from __future__ import annotations

import os
import sys

PROG = "nvidia-container-runtime"
HOOK_NAME = "nvidia-container-runtime-hook"
CONFIG_ENV = "NVIDIA_CONTAINER_RUNTIME_CONFIG"
DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
DEFAULT_RUNTIMES = ("docker-runc", "runc", "crun")
DIRECT_HOOK = "direct-hook"
# Left in the bundle by `create` when config.toml asked nothing of a pass-through (default
# runtimes, no debug log). containerd runs every call of a container from its bundle, so the
# calls after `create` find it there and need not read config.toml again.
PLAIN_MARK = ".nvidia-container-runtime-plain"
# What a pass-through needs from config.toml; a file whose non-comment lines never mention
# these (nor a backslash, which could spell them as an escape) needs no TOML parser.
_PASSTHROUGH_KEYS = (b"runtimes", b"debug", b"log-level", b"\\")
# The mode of a log file this runtime creates (its debug log; runc's --log file, normally
# made by containerd first).
LOG_MODE = 0o644


class RuntimeFailure(Exception):
    """The shim cannot do its job; reported as one `error:` line (and a `hint:`), exit 1.

    `prog` names who refuses: the hook's refusals, made at `create` now, keep the hook's name
    and words (`nvidia-container-runtime-hook: error: ...`), in docker's error too."""

    def __init__(self, message: str, hint: str | None = None, prog: str = PROG) -> None:
        super().__init__(message)
        self.hint = hint
        self.prog = prog

    def engine_line(self) -> str:
        """The line containerd reads from runc's log and docker shows."""
        if self.prog == PROG:
            return f"{PROG}: {self}"
        return f"{self.prog}: error: {self}"


def launch(args: list[str], self_path: str) -> None:
    """The launchers' entry (nvdocker2.runtime.launcher): `main`, then this process ends with
    its exit code at once. What comes back from `main` is direct mode's hook, which runc runs on
    every GPU container start, or a failure (every other call execs runc). Python's own exit
    would first tear the interpreter down, a full garbage collection and the unloading of every
    module: about 4 ms of CPU that closes nothing this process left open (its files are closed,
    its child is reaped). Only stdout's and stderr's buffers are written out, as Python's exit
    does, and a failure to write them is exit status 120, as there."""
    code = main(args, self_path)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            code = 120
    os._exit(code)


def main(args: list[str] | None = None, self_path: str | None = None) -> int:
    """Entry point. `args` excludes argv[0]; `self_path` is this executable (never exec'd as
    the low-level runtime; direct mode's hook entry runs it). Returns only on failure."""
    if args is None:
        args = sys.argv[1:]
    if self_path is None:
        self_path = sys.argv[0]
    if args[:1] == [DIRECT_HOOK]:
        # Direct mode's createContainer hook role (docs/reference.md §7): runc runs this executable.
        from nvdocker2.direct.hook import main as direct_hook

        return direct_hook(args[1:])
    from nvdocker2.runtime.args import parse_args

    log_path = None
    try:
        is_create, bundle = parse_args([PROG, *args])
        if not is_create:
            runtimes, log_path, log_level = _passthrough_settings()
            if args[:1] in (["--version"], ["-v"]):
                return _version(runtimes, self_path, args)
            runtime = find_low_level_runtime(runtimes, self_path)
            if log_level == "debug":
                _log(log_path, f"exec {runtime} {' '.join(args)}")
            return _exec(runtime, args)
        from nvdocker2 import toolkit_config

        try:
            config = toolkit_config.load()
        except toolkit_config.ConfigError as e:
            raise RuntimeFailure(str(e)) from None
        log_path = config.runtime.debug
        runtime = find_low_level_runtime(config.runtime.runtimes, self_path)
        _prepare_bundle(config, bundle, self_path, log_path)
        _mark_bundle(bundle, config, runtime)
        _log(log_path, f"exec {runtime} {' '.join(args)}")
        return _exec(runtime, args)
    except RuntimeFailure as e:
        from nvdocker2.oneline import one_line  # only on errors: one module less per start

        print(f"{e.prog}: error: {one_line(e)}", file=sys.stderr)
        if e.hint:
            print(f"{e.prog}: hint: {one_line(e.hint)}", file=sys.stderr)
        _log(log_path, f"error: {one_line(e)}")
        _report_to_runtime_log(args, e.engine_line())
        return 1
    except Exception as e:  # one line, never a traceback on the start path (unless debugging)
        if os.environ.get("NVDOCKER2_DEBUG") == "1":
            raise
        from nvdocker2.oneline import one_line

        message = one_line(f"internal error: {type(e).__name__}: {str(e)[:300]}")
        print(f"{PROG}: error: {message}", file=sys.stderr)
        _log(log_path, f"error: {message}")
        _report_to_runtime_log(args, f"{PROG}: {message}")
        return 1


def _report_to_runtime_log(args: list[str], message: str) -> None:
    """Write the error where containerd looks for a runtime's error: runc's `--log FILE` in
    `--log-format json`. Without it, docker shows "unable to retrieve OCI runtime error"."""
    from nvdocker2.runtime.args import subcommand

    _, end = subcommand([PROG, *args])
    globals_ = args[: end - 1] if end > 0 else args
    values: dict[str, str] = {}
    i = 0
    while i < len(globals_):
        name, sep, value = globals_[i].lstrip("-").partition("=")
        if name in ("log", "log-format"):
            if not sep and i + 1 < len(globals_):
                value = globals_[i + 1]
                i += 1
            values[name] = value
        i += 1
    if not values.get("log") or values.get("log-format") != "json":
        return
    import json
    import time

    from nvdocker2.host.files import append_text

    line = json.dumps({"level": "error", "msg": message,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    try:
        append_text(values["log"], line + "\n", LOG_MODE)
    except OSError:
        pass


def _prepare_bundle(config, bundle: str, self_path: str, log_path: str | None) -> None:
    from nvdocker2.runtime.spec import SpecError, read_spec, write_spec

    from nvdocker2.runtime.mode import container_mode

    spec_path = os.path.join(bundle, "config.json")
    for warning in config.warnings:
        _log(log_path, f"warning: {config.path}: {warning}")
    try:
        spec = read_spec(spec_path)
        mode, why = container_mode(spec, config)
        if config.runtime.mode == "auto":
            _log(log_path, f"mode: {why}")
        if mode == "direct":
            changed = _direct_mode(spec, bundle, config, self_path)
        elif mode == "cdi":
            changed = _cdi_mode(spec, config, log_path)
        elif mode == "csv":
            changed = _csv_mode(spec, bundle, config, self_path)
        else:
            changed = _legacy_mode(spec, spec_path, bundle, config)
        if changed:
            write_spec(spec_path, spec)
    except SpecError as e:
        raise RuntimeFailure(str(e)) from None
    _log(log_path, f"{spec_path}: {'updated' if changed else 'unchanged'} ({mode})")


def _direct_mode(spec: dict, bundle: str, config, self_path: str) -> bool:
    """reference §7: the spec is edited here instead of by the hook (nvdocker2.direct). The whole
    edit is computed first; `spec` changes only when all of it resolved."""
    from nvdocker2.direct.create import edit_for_create
    from nvdocker2.direct.errors import DirectError

    try:
        new = edit_for_create(spec, bundle, config, self_path)
    except DirectError as e:
        raise RuntimeFailure(e.message, e.hint) from None
    except RecursionError:
        raise RuntimeFailure(f"{bundle}/config.json nests too deeply to be edited") from None
    if new is None:
        return False
    spec.clear()
    spec.update(new)
    return True


def _cdi_mode(spec: dict, config, log_path: str | None) -> bool:
    """The CDI devices the container names, resolved in `spec-dirs` and applied to `spec`
    (nvdocker2.runtime.cdi); a name no spec defines fails `create`. True when changed."""
    from nvdocker2.device_ids import RequestError
    from nvdocker2.runtime import cdi

    try:
        names, source = cdi.requested(spec, config)
    except RequestError as e:
        raise RuntimeFailure(e.message, prog=HOOK_NAME) from None
    if not names:
        return False
    registry = cdi.Registry(config.cdi.spec_dirs, lambda w: _log(log_path, f"warning: {w}"))
    try:
        cdi.inject(spec, registry.resolve(names, source))
    except cdi.CdiRefusal as e:
        raise RuntimeFailure(e.message, e.hint) from None
    _log(log_path, f"cdi: {', '.join(names)[:200]} ({source})")
    return True


def _csv_mode(spec: dict, bundle: str, config, self_path: str) -> bool:
    """Tegra's mount-spec CSV files, applied as direct mode applies its plan
    (nvdocker2.direct.csv_mode); `spec` changes only when all of it resolved."""
    from nvdocker2.direct.create import runtime_self_path
    from nvdocker2.direct.csv_mode import csv_edit_for_create
    from nvdocker2.direct.errors import DirectError

    try:
        new = csv_edit_for_create(spec, bundle, config, runtime_self_path(self_path))
    except DirectError as e:
        raise RuntimeFailure(e.message, e.hint) from None
    if new is None:
        return False
    spec.clear()
    spec.update(new)
    return True


def _mark_bundle(bundle: str, config, runtime: str) -> None:
    """Leave PLAIN_MARK in the bundle when the pass-throughs of this container can skip
    config.toml, remove it otherwise. It names `runtime`, which passed the door's check here:
    the sh launcher execs it without checking it again (a runtime that passed could only have
    been changed since by root). Best effort: without it they read config.toml."""
    path = os.path.join(bundle, PLAIN_MARK)
    try:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if (tuple(config.runtime.runtimes) == DEFAULT_RUNTIMES and not config.runtime.debug
                and "\n" not in runtime):
            from nvdocker2.host.files import create_exclusive

            fd = create_exclusive(path, 0o644)
            try:
                os.write(fd, os.fsencode(runtime + "\n"))
            finally:
                os.close(fd)
    except OSError:
        pass


def _legacy_mode(spec: dict, spec_path: str, bundle: str, config) -> bool:
    """docs/reference.md §3 and §4 at `create`: the hook's whole decision is made here and written
    into config.json as the finished nvidia-container-cli command line (nvdocker2.runtime.prestart);
    a refused request fails `create`. With `[nvidia-container-runtime-hook] path` set, that
    program is the prestart hook and decides at prestart. True when `spec` changed."""
    from nvdocker2.runtime.prestart import Refusal, gpu_prestart_hook
    from nvdocker2.runtime.spec import add_prestart_hook, append_prestart, has_gpu_hook

    if config.hook.path:
        return add_prestart_hook(spec, config.hook.path,
                                 config.path if config.from_env else None)
    if has_gpu_hook(spec):
        return False
    try:
        entry = gpu_prestart_hook(spec, spec_path, bundle, config)
    except Refusal as e:
        raise RuntimeFailure(str(e), prog=HOOK_NAME) from None
    if entry is None:
        return False
    append_prestart(spec, entry)
    return True


def _version(runtimes: tuple[str, ...], self_path: str | None, args: list[str]) -> int:
    """Our own name and version first, then the low-level runtime's own lines; without a
    low-level runtime, a second line saying so, and exit 0: the version is still ours."""
    from nvdocker2 import __version__

    sys.stdout.write(f"{PROG} version {__version__} (nvdocker2)\n")
    try:
        runtime = find_low_level_runtime(runtimes, self_path)
    except RuntimeFailure as e:
        sys.stdout.write(f"{e}\n")
        return 0
    sys.stdout.write("\n")
    sys.stdout.flush()
    return _exec(runtime, args)


def find_low_level_runtime(names, self_path: str | None = None, path: str | None = None) -> str:
    """The first of `names` that is an executable file: an absolute path as is, a bare name
    looked up on PATH (its absolute entries). A file that is this executable itself is skipped
    (no exec loop). The one found is refused when a user other than root (or this runtime's
    own user) could have placed or replaced it (`nvdocker2.host.run.unsafe_to_run`)."""
    me = None
    if self_path:
        try:
            me = os.stat(self_path)
        except OSError:
            pass
    search = (os.environ.get("PATH", os.defpath) if path is None else path).split(":")
    for name in names:
        if "/" in name:
            candidates = [name] if os.path.isabs(name) else []
        else:
            # Absolute entries only: an empty or relative one is the working directory's.
            candidates = [os.path.join(d, name) for d in search if d.startswith("/")]
        for candidate in candidates:
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            if not (st.st_mode & 0o170000 == 0o100000 and os.access(candidate, os.X_OK)):
                continue
            if me is not None and (st.st_dev, st.st_ino) == (me.st_dev, me.st_ino):
                continue
            return _safe_runtime(os.path.abspath(candidate))
    raise RuntimeFailure(
        f"no low-level runtime found: none of {', '.join(names)} is an executable on PATH"
        " (or an absolute path); install runc or set [nvidia-container-runtime] runtimes"
    )


def _safe_runtime(runtime: str) -> str:
    from nvdocker2.host.run import unsafe_to_run

    why = unsafe_to_run(runtime)
    if why is not None:
        raise _unsafe(runtime, why)
    return runtime


def _unsafe(runtime: str, why: str) -> RuntimeFailure:
    return RuntimeFailure(
        f"refusing to run {runtime}: {why}",
        "the low-level runtime must belong to root, in directories only root can write",
    )


def _passthrough_settings() -> tuple[tuple[str, ...], str | None, str]:
    """(runtimes, debug log, log level) for a pass-through, parsing TOML only when needed.

    A broken config.toml must not keep anyone from stopping and deleting running containers,
    so here it falls back to the defaults with a warning; `create` refuses it. In a bundle
    that `create` marked (PLAIN_MARK: the cwd containerd runs each call in), config.toml asked
    nothing of a pass-through when the container was created, and is not read again."""
    if os.path.isfile(PLAIN_MARK):
        return DEFAULT_RUNTIMES, None, "info"
    path = os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH
    try:
        with open(path, "rb") as f:
            data = f.read(1024 * 1024 + 1)
    except OSError:
        data = b""
    if _needs_full_config(data) or _user_config_exists():
        from nvdocker2 import toolkit_config

        try:
            config = toolkit_config.load()
        except toolkit_config.ConfigError as e:
            print(f"{PROG}: warning: {e}; using the default runtimes", file=sys.stderr)
            return DEFAULT_RUNTIMES, None, "info"
        return config.runtime.runtimes, config.runtime.debug, config.runtime.log_level
    return DEFAULT_RUNTIMES, None, "info"


def _user_config_exists() -> bool:
    """Rootless, a per-user config.toml may set what a pass-through reads too."""
    from nvdocker2.host.run import rootless

    if not rootless():
        return False
    from nvdocker2.toolkit_config import user_config_path

    path = user_config_path()
    return path is not None and os.path.lexists(path)


def _needs_full_config(data: bytes) -> bool:
    for line in data.splitlines():
        line = line.strip()
        if line and not line.startswith(b"#") and any(k in line for k in _PASSTHROUGH_KEYS):
            return True
    return False


def _log(path: str | None, message: str) -> None:
    if not path:
        return
    import time

    from nvdocker2.host.files import append_text

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        append_text(path, f"{stamp} {PROG}[{os.getpid()}]: {message}\n", LOG_MODE)
    except OSError:
        pass


def _exec(runtime: str, args: list[str]) -> int:
    from nvdocker2.host.run import NotRun, exec_program

    try:
        exec_program(runtime, [runtime, *args])  # checked again: it may have changed since
    except NotRun as e:
        if e.missing:  # gone since find_low_level_runtime saw it
            raise RuntimeFailure(f"cannot run {runtime}: No such file or directory") from None
        raise _unsafe(runtime, e.reason) from None
    except OSError as e:
        raise RuntimeFailure(f"cannot run {runtime}: {e.strerror}") from None
    return 1  # not reached
