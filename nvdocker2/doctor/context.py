"""Everything the checks look at, gathered once: the facts about this host and its dockerd.

A `Context` holds the injected boundaries (the host root, the command runner, the Engine API
getter, how to find daemon.json) and computes each fact at most once, on first use, safe to
share between threads: `prefetch` starts the slow ones (the Engine API, external commands)
concurrently so the whole run stays within about a second on a healthy host.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from nvdocker2.engines.peer import INIT_PID, Peer, socket_peer, untrusted_owner
from nvdocker2.doctor.host import SYSTEM_PATH, CommandResult, HostRoot, Runner, run_command
from nvdocker2.doctor.toolkit_files import ToolkitFile, _program_version, _read_toolkit_config
from nvdocker2.locations import ROOTFUL_CONFIG

RUNTIME_NAME = "nvidia"
RUNTIME_EXE = "nvidia-container-runtime"
HOOK_EXE = "nvidia-container-runtime-hook"
CLI_EXE = "nvidia-container-cli"
DEFAULT_SOCKET = "/var/run/docker.sock"
DEFAULT_PIDFILE = "/var/run/docker.pid"

# dockerd flags that make it print something and exit instead of serving.
ONE_SHOT_FLAGS = frozenset({"version", "validate", "help"})

# Each external command gets this long; the Engine API call a little more.
COMMAND_TIMEOUT = 1.5
ENGINE_TIMEOUT = 1.5

EngineInfo = Callable[[str, float], "dict[str, Any]"]
# Who serves a unix socket (a real path): `SO_PEERCRED`; tests give a fake one.
PeerOf = Callable[[Path], "Peer | None"]
# Prefix of the reason `dockerd_process` gives when the process behind the socket is not
# trusted (docs/reference.md §8): the dockerd.trusted check fails on it.
UNTRUSTED = "untrusted: "


class EngineUnreachable(Exception):
    """The Engine API did not answer `GET /info`; the message says what happened, `hint`
    (when set) what to do instead of starting dockerd."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class ConfigLocation:
    path: PurePosixPath
    reason: str
    kind: str  # rootful | rootless | snap | given


@dataclass(frozen=True)
class DaemonFile:
    """daemon.json as read: `doc` is None when it is missing or does not parse (`error`)."""

    path: PurePosixPath
    exists: bool
    doc: dict | None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    hint: str | None = None
    needs_repair: bool = False  # empty, whitespace-only or a BOM: dockerd < 23 refuses it


@dataclass(frozen=True)
class DockerHost:
    url: str
    source: str  # what chose it: "--docker-host", "DOCKER_HOST", "docker context X", ...
    context_name: str | None = None


@dataclass(frozen=True)
class InfoResult:
    info: dict | None
    error: str | None = None
    hint: str | None = None


@dataclass(frozen=True)
class DockerdProcess:
    pid: int
    argv: tuple[str, ...]
    environ: Mapping[str, str] | None  # None when /proc/PID/environ is unreadable
    start_time: float | None  # seconds since the epoch
    how: str  # how it was found


@dataclass
class Context:
    """The doctor's view of one host. Tests build it over a tmp root with fakes at the edges."""

    root: HostRoot = field(default_factory=HostRoot)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    uid: int = field(default_factory=os.getuid)
    config_override: PurePosixPath | None = None
    docker_host_override: str | None = None
    runner: Runner = run_command
    engine_info: EngineInfo | None = None
    peer_of: PeerOf = socket_peer
    locate_config: Callable[[Context], ConfigLocation] | None = None
    bin_dir: PurePosixPath = field(default_factory=lambda: _own_bin_dir())
    smoke: bool = False
    smoke_image: str = "ubuntu"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- memoised facts -------------------------------------------------------------------

    def fact(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value of fact `key`, computed once (by the first caller) and shared."""
        with self._lock:
            fut = self._facts.get(key)
            owner = fut is None
            if owner:
                fut = self._facts[key] = Future()
        if owner:
            try:
                fut.set_result(compute())
            except BaseException as exc:
                fut.set_exception(exc)
        return fut.result()

    def prefetch(self) -> None:
        """Start the slow facts in the background; checks then find them ready."""
        if self._pool is not None:
            return
        self._pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="doctor")
        for fetch in (
            self.info,
            self.cli_version,
            self.cli_info,
            self.nvidia_smi,
            self.runtime_version,
            self.hook_version,
            self.low_level_runtime,
        ):
            self._pool.submit(fetch)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def run(
        self,
        argv: list[str],
        timeout: float = COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a command through the injected runner, memoised by its argv."""
        return self.fact("cmd:" + "\0".join(argv), lambda: self.runner(argv, timeout, env))

    # -- which daemon, which file ---------------------------------------------------------

    def config_location(self) -> ConfigLocation:
        def compute() -> ConfigLocation:
            if self.config_override is not None:
                return ConfigLocation(
                    PurePosixPath(self.config_override),
                    "given with --config",
                    _kind_of(self, PurePosixPath(self.config_override)),
                )
            locate = self.locate_config or default_location
            return locate(self)

        return self.fact("config_location", compute)

    def daemon_file(self) -> DaemonFile:
        return self.fact("daemon_file", lambda: _read_daemon_file(self))

    def docker_host(self) -> DockerHost:
        return self.fact("docker_host", lambda: _docker_host(self))

    def info(self) -> InfoResult:
        def compute() -> InfoResult:
            if self.engine_info is None:
                return InfoResult(None, "no Engine API client")
            try:
                return InfoResult(self.engine_info(self.docker_host().url, ENGINE_TIMEOUT))
            except EngineUnreachable as exc:
                return InfoResult(None, str(exc), exc.hint)

        return self.fact("info", compute)

    def dockerd_process(self) -> tuple[DockerdProcess | None, str]:
        """The local dockerd serving `docker_host()`, or None and why it was not found.

        Only a dockerd that root (or, rootless, this user) owns is returned: its PATH and
        flags are read, never those of a process another user started (docs/reference.md §8).
        """
        return self.fact("dockerd_process", lambda: _find_dockerd(self))

    def command(self, args: str) -> str:
        """`nvdocker2 ARGS` with the --config the doctor was given, so a hint's command changes
        the file that was checked."""
        import shlex

        given = f" --config {shlex.quote(str(self.config_override))}" \
            if self.config_override is not None else ""
        return f"nvdocker2 {args}{given}"

    def restart_command(self) -> str:
        """What restarts the dockerd in question as it was started: its docker systemd unit,
        else words naming its pid and parent (docs/reference.md §5: never a systemctl that
        would not reach it)."""
        from nvdocker2.engines.docker.service.started import restart_command

        proc, _ = self.dockerd_process()
        config = PurePosixPath(self.config_location().path)
        return restart_command(proc.pid if proc else None, Path(str(config)),
                               self.root.path("/proc"), self.env)

    def reload_command(self) -> str:
        """What makes the dockerd in question re-read its file (its unit's reload, else SIGHUP)."""
        from nvdocker2.engines.docker.service.started import reload_command

        proc, _ = self.dockerd_process()
        config = PurePosixPath(self.config_location().path)
        return reload_command(proc.pid if proc else None, Path(str(config)),
                              self.root.path("/proc"), self.env)

    def toolkit_config(self) -> ToolkitFile:
        return self.fact("toolkit_config", lambda: _read_toolkit_config(self))

    def rootless(self) -> bool:
        """True when the daemon in question is rootless Docker."""
        info = self.info().info
        if info is not None:
            return any("rootless" in str(o) for o in info.get("SecurityOptions") or ())
        return self.config_location().kind == "rootless"

    def is_wsl(self) -> bool:
        return self.root.is_char_device("/dev/dxg") is not None

    def search_path(self) -> tuple[str, str]:
        """The PATH dockerd (and so the runtime it starts) sees, and where it came from."""
        proc, _ = self.dockerd_process()
        if proc is not None and proc.environ is not None:
            return proc.environ.get("PATH", ""), f"dockerd's PATH (pid {proc.pid})"
        return SYSTEM_PATH, "the standard system PATH"

    # -- the programs of the stack --------------------------------------------------------

    def runtime_path(self) -> tuple[Path | None, str]:
        """The nvidia-container-runtime dockerd would run (real path), and where it was found."""

        def compute() -> tuple[Path | None, str]:
            doc = self.daemon_file().doc or {}
            runtimes = doc.get("runtimes")
            entry = runtimes.get(RUNTIME_NAME) if isinstance(runtimes, dict) else None
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                where = f"daemon.json runtimes.{RUNTIME_NAME}.path"
                return self.root.which(entry["path"], self.search_path()[0]), where
            return self._beside_or_on_path(RUNTIME_EXE)

        return self.fact("runtime_path", compute)

    def hook_path(self) -> tuple[Path | None, str]:
        def compute() -> tuple[Path | None, str]:
            path = self.toolkit_config().config.hook.path
            if path:
                return self.root.which(
                    path, None
                ), "config.toml [nvidia-container-runtime-hook] path"
            runtime, _ = self.runtime_path()
            if runtime is not None and (runtime.parent / HOOK_EXE).exists():
                found = self.root.which(self.root.show(runtime.parent / HOOK_EXE), None)
                return found, "beside nvidia-container-runtime"
            return self._beside_or_on_path(HOOK_EXE)

        return self.fact("hook_path", compute)

    def cli_path(self) -> tuple[Path | None, str]:
        def compute() -> tuple[Path | None, str]:
            path = self.toolkit_config().config.cli.path
            if path:
                return self.root.which(path, None), "config.toml [nvidia-container-cli] path"
            return self.root.which(CLI_EXE, SYSTEM_PATH), "the standard system PATH"

        return self.fact("cli_path", compute)

    def _beside_or_on_path(self, exe: str) -> tuple[Path | None, str]:
        beside = self.root.which(str(self.bin_dir / exe), None)
        if beside is not None:
            return beside, "installed beside nvdocker2"
        search, where = self.search_path()
        return self.root.which(exe, search), where

    def runtime_version(self) -> tuple[str | None, str]:
        return self.fact("runtime_version", lambda: _program_version(self, self.runtime_path()[0]))

    def hook_version(self) -> tuple[str | None, str]:
        return self.fact("hook_version", lambda: _program_version(self, self.hook_path()[0]))

    def cli_version(self) -> CommandResult | None:
        path = self.cli_path()[0]
        return None if path is None else self.run([str(path), "--version"])

    def cli_info(self) -> CommandResult | None:
        path = self.cli_path()[0]
        return None if path is None else self.run([str(path), "info"])

    def nvidia_smi(self) -> CommandResult | None:
        path = self.root.which("nvidia-smi", SYSTEM_PATH)
        if path is None:
            return None
        return self.run(
            [str(path), "--query-gpu=index,name,driver_version,uuid", "--format=csv,noheader"]
        )

    def low_level_runtime(self) -> tuple[Path | None, str, CommandResult | None]:
        """The low-level runtime the shim would exec (first of config.toml's list found)."""

        def compute() -> tuple[Path | None, str, CommandResult | None]:
            search, where = self.search_path()
            for name in self.toolkit_config().config.runtime.runtimes:
                found = self.root.which(name, search)
                if found is not None:
                    return found, where, self.run([str(found), "--version"])
            return None, where, None

        return self.fact("low_level", compute)


# -- helpers computing the facts ---------------------------------------------------------


def _own_bin_dir() -> PurePosixPath:
    """Where this nvdocker2's executables are installed (the runtime's directory)."""
    from nvdocker2 import locations

    return PurePosixPath(os.path.dirname(locations.default_runtime_path()[0]))


def _kind_of(ctx: Context, path: PurePosixPath) -> str:
    if str(path) == ROOTFUL_CONFIG:
        return "rootful"
    if str(path).startswith("/var/snap/docker/"):
        return "snap"
    home = ctx.env.get("HOME", "")
    xdg = ctx.env.get("XDG_CONFIG_HOME", "")
    if (home and str(path).startswith(home.rstrip("/") + "/")) or (
        xdg and str(path).startswith(xdg.rstrip("/") + "/")
    ):
        return "rootless"
    return "given"


def default_location(ctx: Context) -> ConfigLocation:
    """docs/reference.md §2's default daemon.json for this user (the installer's own choice)."""
    from nvdocker2 import locations

    path, reason = locations.default_config(ctx.env, ctx.uid, str(ctx.root.root))
    path = PurePosixPath(path)
    kind = "rootless" if reason.startswith("rootless") else _kind_of(ctx, path)
    return ConfigLocation(path, reason, kind)


def _read_daemon_file(ctx: Context) -> DaemonFile:
    """daemon.json through the engine's parser (the same reading `install` does)."""
    from nvdocker2.engines.docker.daemonjson import document
    from nvdocker2.errors import NvDockerError

    path = ctx.config_location().path
    real = ctx.root.path(path)
    try:
        doc = document.load(real)
    except NvDockerError as exc:
        message = exc.message.replace(str(real), str(path))
        return DaemonFile(path, True, None, message, hint=exc.hint)
    return DaemonFile(
        path,
        doc.existed,
        doc.data,
        None,
        tuple(w.replace(str(real), str(path)) for w in doc.warnings),
        needs_repair=doc.existed and (doc.had_bom or not doc.raw.strip()),
    )


def _docker_config_dir(ctx: Context) -> str:
    return ctx.env.get("DOCKER_CONFIG") or f"{ctx.env.get('HOME', '/root')}/.docker"


def current_context(ctx: Context) -> tuple[str | None, str]:
    """The docker CLI's current context name (None for "default") and where it was set."""
    name = ctx.env.get("DOCKER_CONTEXT")
    if name:
        return (None if name == "default" else name), "DOCKER_CONTEXT"
    cfg_path = f"{_docker_config_dir(ctx)}/config.json"
    text = ctx.root.read_text(cfg_path)
    if text:
        try:
            name = json.loads(text).get("currentContext")
        except (ValueError, AttributeError):
            name = None
        if isinstance(name, str) and name and name != "default":
            return name, cfg_path
    return None, ""


def _docker_host(ctx: Context) -> DockerHost:
    if ctx.docker_host_override:
        return DockerHost(ctx.docker_host_override, "--docker-host")
    if ctx.env.get("DOCKER_HOST"):
        return DockerHost(ctx.env["DOCKER_HOST"], "DOCKER_HOST")
    name, where = current_context(ctx)
    if name is not None:
        digest = hashlib.sha256(name.encode()).hexdigest()
        meta = ctx.root.read_text(f"{_docker_config_dir(ctx)}/contexts/meta/{digest}/meta.json")
        host = None
        if meta:
            try:
                host = json.loads(meta)["Endpoints"]["docker"]["Host"]
            except (ValueError, KeyError, TypeError):
                host = None
        if isinstance(host, str) and host:
            return DockerHost(host, f"docker context {name!r} (from {where})", name)
    loc = ctx.config_location()
    if loc.kind == "rootless" and ctx.env.get("XDG_RUNTIME_DIR"):
        return DockerHost(f"unix://{ctx.env['XDG_RUNTIME_DIR']}/docker.sock", "rootless Docker")
    return DockerHost(f"unix://{DEFAULT_SOCKET}", "the default socket")


def _norm_socket(url: str) -> str | None:
    """The socket path of a unix:// (or fd://, systemd's socket) address, /var/run as /run."""
    if url.startswith("fd://"):
        path = "/run/docker.sock"
    elif url.startswith("unix://"):
        path = url[len("unix://") :]
    else:
        return None
    if path.startswith("/var/run/"):
        path = path[len("/var") :]
    return path


def dockerd_option_values(argv: tuple[str, ...] | list[str], long: str) -> list[str]:
    """The values given to one dockerd option (`--host`, `-H` …) in `argv`, in order."""
    from nvdocker2.engines.docker.service.process import parse_flags

    return [v for name, v in parse_flags(tuple(argv[1:])) if name == long and v is not None]


def _proc_argv(ctx: Context, pid: int) -> tuple[str, ...] | None:
    raw = ctx.root.read_bytes(f"/proc/{pid}/cmdline")
    if not raw:
        return None
    return tuple(a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0"))


def _is_dockerd(argv: tuple[str, ...] | None) -> bool:
    """A dockerd daemon (not a `dockerd --version` or `--validate` run)."""
    if not argv or os.path.basename(argv[0]) != "dockerd":
        return False
    from nvdocker2.engines.docker.service.process import parse_flags

    return not any(name in ONE_SHOT_FLAGS for name, _ in parse_flags(tuple(argv[1:])))


def _find_dockerd(ctx: Context) -> tuple[DockerdProcess | None, str]:
    """The process serving the socket (`SO_PEERCRED`); when nothing answers there, or init
    holds it (systemd socket activation), a trusted dockerd that says it listens there."""
    target = ctx.docker_host().url
    sock = _norm_socket(target)
    if sock is None:
        return None, f"{target} is not a local socket, so its dockerd process cannot be inspected"
    proc_root = ctx.root.path("/proc")
    peer = ctx.peer_of(ctx.root.path(sock))
    if peer is not None and peer.pid != INIT_PID:
        why = untrusted_owner(peer.pid, proc_root, ctx.uid, peer.uid)
        if why is not None:
            return None, f"{UNTRUSTED}the process serving {target} is not trusted: {why}"
        argv = _proc_argv(ctx, peer.pid)
        if not _is_dockerd(argv):
            return None, f"pid {peer.pid} serves {target} but is not a dockerd"
        return _process(ctx, peer.pid, argv, f"serves {target}"), ""
    try:
        pids = sorted(int(p.name) for p in proc_root.iterdir() if p.name.isdigit())
    except OSError:
        pids = []
    for pid in pids:
        argv = _proc_argv(ctx, pid)
        if not _is_dockerd(argv) or untrusted_owner(pid, proc_root, ctx.uid) is not None:
            continue
        if sock in {_norm_socket(h) for h in _dockerd_hosts(ctx, argv)}:
            return _process(ctx, pid, argv, f"listens on {target}"), ""
    if sock == _norm_socket(f"unix://{DEFAULT_SOCKET}"):
        text = ctx.root.read_text(DEFAULT_PIDFILE)
        if text and text.strip().isdigit():
            pid = int(text.strip())
            argv = _proc_argv(ctx, pid)
            if _is_dockerd(argv) and untrusted_owner(pid, proc_root, ctx.uid) is None:
                return _process(ctx, pid, argv, f"from {DEFAULT_PIDFILE}"), ""
    return None, f"no dockerd process on this host listens on {target}"


def _dockerd_hosts(ctx: Context, argv: tuple[str, ...]) -> list[str]:
    """Where a dockerd listens: its -H flags, else `hosts` in its daemon.json, else the
    default socket."""
    hosts = dockerd_option_values(argv, "host")
    if hosts:
        return hosts
    files = dockerd_option_values(argv, "config-file")
    try:
        doc = json.loads(ctx.root.read_text(files[-1] if files else ROOTFUL_CONFIG) or "{}")
    except ValueError:
        doc = {}
    listed = doc.get("hosts") if isinstance(doc, dict) else None
    if isinstance(listed, list) and listed and all(isinstance(h, str) for h in listed):
        return listed
    return [f"unix://{DEFAULT_SOCKET}"]


def _process(ctx: Context, pid: int, argv: tuple[str, ...], how: str) -> DockerdProcess:
    environ = None
    raw = ctx.root.read_bytes(f"/proc/{pid}/environ")
    if raw is not None:
        environ = {}
        for item in raw.split(b"\0"):
            k, eq, v = item.decode("utf-8", "replace").partition("=")
            if eq:
                environ[k] = v
    return DockerdProcess(pid, argv, environ, _start_time(ctx, pid), how)


def _start_time(ctx: Context, pid: int) -> float | None:
    """When the process started (epoch seconds), from /proc/PID/stat's start tick and
    /proc/uptime (to 10 ms), else /proc/stat's btime (whole seconds)."""
    stat_text = ctx.root.read_text(f"/proc/{pid}/stat")
    if not stat_text:
        return None
    try:
        since_boot = int(stat_text.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None
    uptime = ctx.root.read_text("/proc/uptime")
    try:
        return time.time() - float(uptime.split()[0]) + since_boot  # type: ignore[union-attr]
    except (AttributeError, IndexError, ValueError):
        pass
    for line in (ctx.root.read_text("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1]) + since_boot
            except (IndexError, ValueError):
                return None
    return None
