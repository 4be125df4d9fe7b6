"""Checks of the running dockerd: reachable, what `/info` reports, whether it agrees with
daemon.json, keys given both as flags and in the file, and `--gpus` support."""

from __future__ import annotations

import os
import shlex
from pathlib import PurePosixPath

from nvdocker2.engines.docker.service.process import MERGED_KEYS, file_keys, flags_to_keys
from nvdocker2.engines.docker.doctor.checks_config import BUILTIN_RUNTIMES
from nvdocker2.doctor.context import HOOK_EXE, RUNTIME_NAME
from nvdocker2.engines.docker.doctor.facts import UNTRUSTED, dockerd_option_values
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.locations import ROOTFUL_CONFIG
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip, warn

CHECKS = Checks()
check = CHECKS.check

# Seconds of doubt between the hook's change time and dockerd's start time.
START_SLACK = 0.5


def restart_hint(ctx: Context) -> str:
    """How to restart this dockerd, the way it was started."""
    return f"restart dockerd: {ctx.restart_command()} (containers without live-restore stop)"


def _reload_hint(ctx: Context) -> str:
    """How to make this dockerd re-read its file: its unit's reload, else SIGHUP its pid."""
    return "reload dockerd: " + ctx.reload_command()


@check("dockerd.reachable", "dockerd answers the Engine API")
def dockerd_reachable(ctx: Context) -> Outcome:
    host = ctx.host_choice()
    res = ctx.info()
    if res.info is None:
        return fail(
            f"no answer from dockerd at {host.url} ({host.source}): {res.error}",
            res.hint
            or "start it (systemctl start docker), or name the right daemon with "
            "--docker-host / DOCKER_HOST",
        )
    info = res.info
    return ok(f"Docker {info.get('ServerVersion', '?')} at {host.url}")


@check("dockerd.desktop", "the daemon is not Docker Desktop's")
def dockerd_desktop(ctx: Context) -> Outcome:
    """Desktop's daemon reads its own daemon.json (in Desktop's settings), never this host's."""
    from nvdocker2.engines.docker.desktop import WHAT_WORKS, desktop_reason
    from nvdocker2.engines.docker.service.api import parse_docker_host
    from nvdocker2.errors import BadInput

    host = ctx.docker_host()
    try:
        socket_path = parse_docker_host(host.url).socket_path
    except BadInput:  # an address the client does not speak: no socket path to tell
        socket_path = None
    why = desktop_reason(ctx.info().info, socket_path)
    if why is None:
        return ok("not Docker Desktop")
    return warn(f"{host.url} is Docker Desktop's daemon ({why}): install refuses it", WHAT_WORKS)


@check("dockerd.trusted", "the process serving the Engine API is a trusted dockerd")
def dockerd_trusted(ctx: Context) -> Outcome:
    """reference §8: dockerd is the process behind the API socket, owned by root (or, rootless, by
    this user); another user's process there is never trusted, signalled or run from."""
    proc, why = ctx.dockerd_process()
    if proc is not None:
        return ok(f"dockerd pid {proc.pid} {proc.how}")
    if why.startswith(UNTRUSTED):
        return fail(
            f"{why[len(UNTRUSTED) :]}: its PATH and flags are not used and nothing it names is run",
            "point --docker-host at root's dockerd (unix:///var/run/docker.sock); find who "
            "serves that socket with: ss -xlp",
        )
    return skip(why)


@check("dockerd.runtimes", "runtimes dockerd has loaded", needs=("dockerd.reachable",))
def dockerd_runtimes(ctx: Context) -> Outcome:
    info = ctx.info().info or {}
    runtimes = info.get("Runtimes") or {}
    default = info.get("DefaultRuntime", "?")
    names = ", ".join(sorted(runtimes))
    detail = f"Runtimes: {names}; DefaultRuntime: {default}"
    if RUNTIME_NAME not in runtimes and ctx.cdi_only():
        return ok(f"{detail} (CDI mode: no {RUNTIME_NAME} runtime needed)")
    if RUNTIME_NAME not in runtimes:
        return fail(
            f"{detail}: no {RUNTIME_NAME} runtime loaded",
            f"{ctx.command('install')} (it adds the runtime and reloads dockerd)",
        )
    path = (runtimes[RUNTIME_NAME] or {}).get("path", "?")
    return ok(f"{detail} ({RUNTIME_NAME} → {path})")


@check("dockerd.cgroup", "cgroup driver and version", needs=("dockerd.reachable",))
def dockerd_cgroup(ctx: Context) -> Outcome:
    info = ctx.info().info or {}
    driver = info.get("CgroupDriver", "?")
    version = info.get("CgroupVersion", "?")
    detail = f"CgroupDriver: {driver}, CgroupVersion: {version}"
    if driver == "none":
        return warn(
            f"{detail}: dockerd manages no cgroups (rootless on cgroup v1?)",
            "GPU containers need no-cgroups = true in config.toml; use cgroup v2 "
            "with systemd delegation for resource limits",
        )
    return ok(detail)


@check(
    "dockerd.sync",
    "daemon.json and the running dockerd agree",
    needs=("dockerd.reachable", "config.parse"),
)
def dockerd_sync(ctx: Context) -> Outcome:
    """A runtime in the file that dockerd has not loaded means the file changed since the last
    reload; one loaded but not in the file means it was removed without a reload (or came from
    `--add-runtime`)."""
    f = ctx.daemon_file()
    proc, _ = ctx.dockerd_process()
    if proc is not None:
        files = dockerd_option_values(proc.argv, "config-file")
        reads = files[-1] if files else ROOTFUL_CONFIG
        if reads != str(f.path):
            return skip(f"the running dockerd reads {reads}, not {f.path}")
    info = ctx.info().info or {}
    loaded = info.get("Runtimes") or {}
    doc = f.doc or {}
    in_file = doc.get("runtimes")
    if not isinstance(in_file, dict):
        in_file = {}
    flagged = set()
    if proc is not None:
        flagged = {v.split("=", 1)[0] for v in dockerd_option_values(proc.argv, "add-runtime")}
    problems = []
    for name, entry in in_file.items():
        if name in BUILTIN_RUNTIMES:
            continue
        if name not in loaded:
            problems.append(
                f"runtime {name!r} is in {f.path} but the running dockerd has not "
                "loaded it (file changed, dockerd not reloaded)"
            )
            continue
        want = entry.get("path") if isinstance(entry, dict) else None
        have = (loaded[name] or {}).get("path")
        if want is not None and have is not None and want != have:
            problems.append(f"runtime {name!r} has path {want} in the file but {have} in dockerd")
    for name in loaded:
        if name not in in_file and name not in BUILTIN_RUNTIMES and name not in flagged:
            problems.append(f"dockerd has runtime {name!r} loaded that {f.path} does not define")
    want_default = doc.get("default-runtime") or "runc"
    have_default = info.get("DefaultRuntime")
    if have_default is not None and have_default != want_default:
        problems.append(
            f"default-runtime is {want_default!r} in the file but dockerd uses {have_default!r}"
        )
    if problems:
        return warn("; ".join(problems), _reload_hint(ctx))
    return ok(f"dockerd runs with the runtimes and default-runtime of {f.path}")


def _unit_argv(ctx: Context) -> tuple[list[str] | None, str]:
    """dockerd's argv from the systemd unit (the last ExecStart after drop-ins) and its file."""
    units = [
        PurePosixPath(d) / "docker.service"
        for d in (
            "/etc/systemd/system",
            "/run/systemd/system",
            "/lib/systemd/system",
            "/usr/lib/systemd/system",
        )
    ]
    main = next((u for u in units if ctx.root.path(u).is_file()), None)
    if main is None:
        return None, ""
    files = [main]
    dropins: dict[str, PurePosixPath] = {}
    for d in reversed(units):
        dir_ = ctx.root.path(str(d) + ".d")
        if dir_.is_dir():
            for conf in dir_.glob("*.conf"):
                dropins[conf.name] = PurePosixPath(str(d) + ".d") / conf.name
    files += [dropins[n] for n in sorted(dropins)]
    exec_start: str | None = None
    source = ""
    env: dict[str, str] = {}
    for path in files:
        for line in (ctx.root.read_text(path) or "").splitlines():
            line = line.strip()
            if line.startswith("EnvironmentFile="):
                env.update(_env_file(ctx, line.split("=", 1)[1].lstrip("-")))
            elif line.startswith("ExecStart="):
                value = line.split("=", 1)[1].strip()
                exec_start, source = (value or None), str(path)
    if exec_start is None:
        return None, source
    words = []
    for word in shlex.split(exec_start.lstrip("-@:+!")):
        if word.startswith("$") and word.strip("${}") in env:
            words += shlex.split(env[word.strip("${}")])
        elif not word.startswith("$"):
            words.append(word)
    return words, source


def _env_file(ctx: Context, path: str) -> dict[str, str]:
    env = {}
    for line in (ctx.root.read_text(path) or "").splitlines():
        k, eq, v = line.strip().partition("=")
        if eq and not k.startswith("#"):
            env[k.strip()] = v.strip().strip("\"'")
    return env


@check("dockerd.flags", "no key both as dockerd flag and in daemon.json", needs=("config.parse",))
def dockerd_flags(ctx: Context) -> Outcome:
    f = ctx.daemon_file()
    doc = f.doc or {}
    sources: list[tuple[str, dict[str, str]]] = []
    proc, why = ctx.dockerd_process()
    if proc is not None:
        files = dockerd_option_values(proc.argv, "config-file")
        if (files[-1] if files else ROOTFUL_CONFIG) == str(f.path):
            sources.append((f"the running dockerd (pid {proc.pid})", flags_to_keys(proc.argv[1:])))
    unit_argv, unit_file = _unit_argv(ctx)
    if unit_argv is not None:
        files = dockerd_option_values(unit_argv, "config-file")
        if (files[-1] if files else ROOTFUL_CONFIG) == str(f.path):
            sources.append((f"ExecStart in {unit_file}", flags_to_keys(unit_argv[1:])))
    if not sources:
        return skip(f"no dockerd command line found that reads {f.path} ({why or 'no unit'})")
    in_file = file_keys(doc)
    conflicts = [
        (key, flag, where)
        for where, keys in sources
        for key, flag in sorted(keys.items())
        if key in in_file and key not in MERGED_KEYS
    ]
    if conflicts:
        detail = "; ".join(
            f"{key!r} is set both in {f.path} and as {flag} in {where}"
            for key, flag, where in conflicts
        )
        key, flag, where = conflicts[0]
        return fail(
            f"{detail}: dockerd refuses to start or reload with both",
            f"remove {key!r} from {f.path}, or the {flag} flag from {where}",
        )
    checked = " and ".join(where for where, _ in sources)
    return ok(f"no daemon.json key repeated by the flags of {checked}")


@check("dockerd.gpus", "`docker run --gpus` support (the hook on dockerd's PATH)")
def dockerd_gpus(ctx: Context) -> Outcome:
    """dockerd registers the nvidia device driver only at start, and only when it finds
    nvidia-container-runtime-hook on its own PATH (docs/reference.md §4)."""
    proc, why = ctx.dockerd_process()
    if proc is None:
        return skip(f"{why}; cannot read its PATH")
    if proc.environ is None:
        return skip(f"cannot read /proc/{proc.pid}/environ to learn dockerd's PATH")
    search = proc.environ.get("PATH", "")
    hook = ctx.root.which(HOOK_EXE, search)
    if hook is None:
        return warn(
            f"{HOOK_EXE} is not on dockerd's PATH ({search or 'unset'}): "
            "`docker run --gpus` fails with 'could not select device driver'",
            f"install the hook into a directory of that PATH (e.g. /usr/bin), then "
            f"{restart_hint(ctx)}",
        )
    shown = ctx.root.show(hook)
    if proc.start_time is not None:
        try:
            installed = max(os.lstat(hook).st_ctime, os.stat(hook).st_ctime)
        except OSError:
            installed = 0.0
        if installed > proc.start_time + START_SLACK:
            return warn(
                f"{shown} was installed or replaced after dockerd (pid {proc.pid}) "
                "started: if it was not there before, dockerd has not registered it "
                "and `docker run --gpus` fails until a restart",
                restart_hint(ctx),
            )
    return ok(f"{shown} is on dockerd's PATH (pid {proc.pid})")
