"""Docker's facts for the doctor, gathered once: which daemon.json and which dockerd are in
question (the Engine API's `/info`, the dockerd process behind the socket), over the host facts
of nvdocker2.doctor.context.

`DockerContext` adds the injected Docker boundaries (the Engine API getter, who serves a socket,
how to find daemon.json); `prefetch` starts `/info` beside the host's slow facts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from nvdocker2.doctor.context import RUNTIME_EXE, RUNTIME_NAME, Context
from nvdocker2.doctor.host import SYSTEM_PATH
from nvdocker2.engines.docker.service.api import DockerHost, parse_docker_host
from nvdocker2.engines.peer import INIT_PID, Peer, socket_peer, untrusted_owner
from nvdocker2.engines.docker.service.process import DockerdProcess, parse_flags
from nvdocker2.errors import NvDockerError
from nvdocker2.locations import ROOTFUL_CONFIG

DEFAULT_SOCKET = "/var/run/docker.sock"
DEFAULT_PIDFILE = "/var/run/docker.pid"

# dockerd flags that make it print something and exit instead of serving.
ONE_SHOT_FLAGS = frozenset({"version", "validate", "help"})

# The Engine API call gets this long.
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
    doc: dict[str, Any] | None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    hint: str | None = None
    needs_repair: bool = False  # empty, whitespace-only or a BOM: dockerd < 23 refuses it


@dataclass(frozen=True)
class InfoResult:
    info: dict[str, Any] | None
    error: str | None = None
    hint: str | None = None


@dataclass(frozen=True)
class HostChoice:
    """The Engine API address in question and what chose it."""

    host: DockerHost
    source: str  # "--docker-host", "DOCKER_HOST", "docker context X", ...
    context_name: str | None = None

    @property
    def url(self) -> str:
        return self.host.url


@dataclass(frozen=True)
class SeenDockerd(DockerdProcess):
    """A running dockerd as the doctor reads it: also its environment and start time."""

    environ: Mapping[str, str] | None  # None when /proc/PID/environ is unreadable
    start_time: float | None  # seconds since the epoch
    how: str  # how it was found


@dataclass
class DockerContext(Context):
    """The doctor's view of one Docker host. Tests build it over a tmp root with fakes."""

    config_override: PurePosixPath | None = None
    docker_host_override: str | None = None
    engine_info: EngineInfo | None = None
    peer_of: PeerOf = socket_peer
    locate_config: Callable[[DockerContext], ConfigLocation] | None = None
    smoke: bool = False
    smoke_image: str = "ubuntu"

    def slow_facts(self) -> list[Callable[[], Any]]:
        return [self.info, *super().slow_facts()]

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

    def host_choice(self) -> HostChoice:
        """The Engine API address in question and what chose it."""
        return self.fact("docker_host", lambda: _docker_host(self))

    def docker_host(self) -> DockerHost:
        return self.host_choice().host

    def info(self) -> InfoResult:
        def compute() -> InfoResult:
            if self.engine_info is None:
                return InfoResult(None, "no Engine API client")
            try:
                return InfoResult(self.engine_info(self.docker_host().url, ENGINE_TIMEOUT))
            except EngineUnreachable as exc:
                return InfoResult(None, str(exc), exc.hint)

        return self.fact("info", compute)

    def dockerd_process(self) -> tuple[SeenDockerd | None, str]:
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

    def rootless(self) -> bool:
        """True when the daemon in question is rootless Docker."""
        info = self.info().info
        if info is not None:
            return any("rootless" in str(o) for o in info.get("SecurityOptions") or ())
        return self.config_location().kind == "rootless"

    def cdi_spec(self) -> tuple[PurePosixPath, Path, str]:
        """CDI mode's spec, as `nvdocker2 install` recorded it: (the spec as the host names
        it, its real path, the runtime its hook runs)."""

        def compute() -> tuple[PurePosixPath, Path, str]:
            from nvdocker2 import locations
            from nvdocker2.engines.docker import cdi_journal
            from nvdocker2.store.lock import state_dir

            config = Path(str(self.config_location().path))
            rec: dict[str, Any] = {}
            try:
                rec = cdi_journal.CdiJournal(state_dir(), config).load()
            except NvDockerError:
                pass
            spec = rec.get("spec")
            if not isinstance(spec, dict):
                spec = {}
            shown = PurePosixPath(spec.get("path") or str(cdi_journal.spec_path(None)))
            runtime = rec.get("runtime_path") or locations.default_runtime_path()[0]
            return shown, self.root.path(shown), runtime

        return self.fact("cdi_spec", compute)

    def cdi_only(self) -> bool:
        """CDI mode is installed (its spec is there) and daemon.json has no nvidia runtime
        entry: the checks of the runtime entry say so instead of failing."""
        runtimes = (self.daemon_file().doc or {}).get("runtimes")
        has_runtime = isinstance(runtimes, dict) and RUNTIME_NAME in runtimes
        return not has_runtime and self.cdi_spec()[1].exists()

    def cgroup_driver(self) -> str | None:
        return (self.info().info or {}).get("CgroupDriver")

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


# -- helpers computing the facts ---------------------------------------------------------


def _kind_of(ctx: DockerContext, path: PurePosixPath) -> str:
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


def default_location(ctx: DockerContext) -> ConfigLocation:
    """docs/reference.md §2's default daemon.json for this user (the installer's own choice)."""
    from nvdocker2 import locations

    found, reason = locations.default_config(ctx.env, ctx.uid, str(ctx.root.root))
    path = PurePosixPath(found)
    kind = "rootless" if reason.startswith("rootless") else _kind_of(ctx, path)
    return ConfigLocation(path, reason, kind)


def _read_daemon_file(ctx: DockerContext) -> DaemonFile:
    """daemon.json through the engine's parser (the same reading `install` does)."""
    from nvdocker2.engines.docker.daemonjson import document

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


def _docker_config_dir(ctx: DockerContext) -> str:
    return ctx.env.get("DOCKER_CONFIG") or f"{ctx.env.get('HOME', '/root')}/.docker"


def current_context(ctx: DockerContext) -> tuple[str | None, str]:
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


def _docker_host(ctx: DockerContext) -> HostChoice:
    if ctx.docker_host_override:
        return _choice(ctx, ctx.docker_host_override, "--docker-host")
    if ctx.env.get("DOCKER_HOST"):
        return _choice(ctx, ctx.env["DOCKER_HOST"], "DOCKER_HOST")
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
            return _choice(ctx, host, f"docker context {name!r} (from {where})", name)
    loc = ctx.config_location()
    if loc.kind == "rootless" and ctx.env.get("XDG_RUNTIME_DIR"):
        return _choice(ctx, f"unix://{ctx.env['XDG_RUNTIME_DIR']}/docker.sock",
                       "rootless Docker")
    return _choice(ctx, f"unix://{DEFAULT_SOCKET}", "the default socket")


def _choice(ctx: DockerContext, url: str, source: str, name: str | None = None) -> HostChoice:
    """`url` as the installer's client reads it; an address it does not speak (ssh://, TLS)
    keeps only its url, and the Engine API check says why it gets no answer."""
    try:
        host = parse_docker_host(url, ctx.env)
    except NvDockerError:
        host = DockerHost(url)
    return HostChoice(host, source, name)


def norm_socket(url: str) -> str | None:
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
    return [v for name, v in parse_flags(tuple(argv[1:])) if name == long and v is not None]


def _proc_argv(ctx: DockerContext, pid: int) -> tuple[str, ...] | None:
    raw = ctx.root.read_bytes(f"/proc/{pid}/cmdline")
    if not raw:
        return None
    return tuple(a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0"))


def _is_dockerd(argv: tuple[str, ...] | None) -> bool:
    """A dockerd daemon (not a `dockerd --version` or `--validate` run)."""
    if not argv or os.path.basename(argv[0]) != "dockerd":
        return False
    return not any(name in ONE_SHOT_FLAGS for name, _ in parse_flags(tuple(argv[1:])))


def _find_dockerd(ctx: DockerContext) -> tuple[SeenDockerd | None, str]:
    """The process serving the socket (`SO_PEERCRED`); when nothing answers there, or init
    holds it (systemd socket activation), a trusted dockerd that says it listens there."""
    target = ctx.docker_host().url
    sock = norm_socket(target)
    if sock is None:
        return None, f"{target} is not a local socket, so its dockerd process cannot be inspected"
    proc_root = ctx.root.path("/proc")
    peer = ctx.peer_of(ctx.root.path(sock))
    if peer is not None and peer.pid != INIT_PID:
        why = untrusted_owner(peer.pid, proc_root, ctx.uid, peer.uid)
        if why is not None:
            return None, f"{UNTRUSTED}the process serving {target} is not trusted: {why}"
        argv = _proc_argv(ctx, peer.pid)
        if argv is None or not _is_dockerd(argv):
            return None, f"pid {peer.pid} serves {target} but is not a dockerd"
        return _process(ctx, peer.pid, argv, f"serves {target}"), ""
    try:
        pids = sorted(int(p.name) for p in proc_root.iterdir() if p.name.isdigit())
    except OSError:
        pids = []
    for pid in pids:
        argv = _proc_argv(ctx, pid)
        if argv is None or not _is_dockerd(argv) or \
                untrusted_owner(pid, proc_root, ctx.uid) is not None:
            continue
        if sock in {norm_socket(h) for h in _dockerd_hosts(ctx, argv)}:
            return _process(ctx, pid, argv, f"listens on {target}"), ""
    if sock == norm_socket(f"unix://{DEFAULT_SOCKET}"):
        text = ctx.root.read_text(DEFAULT_PIDFILE)
        if text and text.strip().isdigit():
            pid = int(text.strip())
            argv = _proc_argv(ctx, pid)
            if argv is not None and _is_dockerd(argv) and \
                    untrusted_owner(pid, proc_root, ctx.uid) is None:
                return _process(ctx, pid, argv, f"from {DEFAULT_PIDFILE}"), ""
    return None, f"no dockerd process on this host listens on {target}"


def _dockerd_hosts(ctx: DockerContext, argv: tuple[str, ...]) -> list[str]:
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


def _process(ctx: DockerContext, pid: int, argv: tuple[str, ...], how: str) -> SeenDockerd:
    environ = None
    raw = ctx.root.read_bytes(f"/proc/{pid}/environ")
    if raw is not None:
        environ = {}
        for item in raw.split(b"\0"):
            k, eq, v = item.decode("utf-8", "replace").partition("=")
            if eq:
                environ[k] = v
    try:
        exe: str | None = os.readlink(ctx.root.path(f"/proc/{pid}/exe")).replace(" (deleted)", "")
    except OSError:
        exe = None
    return SeenDockerd(pid, argv, exe, environ, _start_time(ctx, pid), how)


def _start_time(ctx: DockerContext, pid: int) -> float | None:
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
