"""Checks of daemon.json: which file, whether it parses and validates, the nvidia runtime entry,
its path, and default-runtime."""

from __future__ import annotations

from typing import Any, cast

from nvdocker2.doctor.context import RUNTIME_NAME
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.engines.docker.doctor.facts import norm_socket, dockerd_option_values
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip, warn

CHECKS = Checks()
check = CHECKS.check



def install_hint(ctx: Context, args: str = "install") -> str:
    return f"run: {ctx.command(args)}"

# Names dockerd always knows without a runtimes entry (dockerd's built-in runtimes).
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")


@check("config.location", "daemon.json location")
def config_location(ctx: Context) -> Outcome:
    loc = ctx.config_location()
    f = ctx.daemon_file()
    state = "present" if f.exists else "absent"
    return ok(f"{loc.path} ({loc.reason}; {state})")


@check("config.target", "the daemon that reads it")
def config_target(ctx: Context) -> Outcome:
    """Warn when DOCKER_HOST or a docker context points the CLI at a daemon other than the one
    whose daemon.json is checked, or when the running dockerd reads another file."""
    loc = ctx.config_location()
    host = ctx.host_choice()
    proc, _ = ctx.dockerd_process()
    if proc is not None:
        files = dockerd_option_values(proc.argv, "config-file")
        reads = files[-1] if files else "/etc/docker/daemon.json"
        if reads != str(loc.path):
            return warn(
                f"the dockerd at {host.url} (pid {proc.pid}) reads {reads}, not {loc.path}",
                f"check that daemon's file instead: nvdocker2 doctor --config {reads}",
            )
        return ok(f"dockerd pid {proc.pid} at {host.url} reads {loc.path}")
    if host.source in ("DOCKER_HOST",) or host.context_name is not None:
        expected = norm_socket(
            f"unix://{ctx.env.get('XDG_RUNTIME_DIR', '')}/docker.sock"
            if loc.kind == "rootless"
            else "unix:///var/run/docker.sock"
        )
        if norm_socket(host.url) != expected:
            return warn(
                f"{host.source} points at {host.url}, a different daemon than the one that "
                f"reads {loc.path} ({loc.reason})",
                "unset DOCKER_HOST / run `docker context use default`, or pass that daemon's "
                "file with --config and its address with --docker-host",
            )
    return ok(f"{host.url} ({host.source})")


def dockerd_major(ctx: Context) -> int | None:
    """The running dockerd's major version, when it answered."""
    version = str((ctx.info().info or {}).get("ServerVersion", ""))
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


@check("config.parse", "daemon.json parses", needs=("config.location",))
def config_parse(ctx: Context) -> Outcome:
    f = ctx.daemon_file()
    if not f.exists:
        return warn(
            f"{f.path} does not exist: dockerd runs with defaults and no nvidia runtime",
            install_hint(ctx),
        )
    if f.error is not None:
        return fail(
            f"{f.error}; dockerd will not start with it",
            f.hint or f"fix the JSON in {f.path} (or restore a backup: {ctx.command('rollback')})",
        )
    if f.needs_repair:
        detail = "; ".join(f.warnings)
        major = dockerd_major(ctx)
        if major is not None and major >= 23:
            return warn(detail, f"{ctx.command('install')} rewrites it as a plain JSON object")
        return fail(
            f"{detail}; dockerd before 23.0 refuses to start with it",
            f"write {{}} into it, or run {ctx.command('install')} (it rewrites the file)",
        )
    if f.warnings:
        return warn("; ".join(f.warnings), f"remove the duplicate keys from {f.path}")
    return ok(f"{f.path}: valid JSON, {len(f.doc or {})} top-level keys")


@check("config.validate", "daemon.json validates", needs=("config.parse",))
def config_validate(ctx: Context) -> Outcome:
    from nvdocker2.engines.docker.daemonjson import validate

    f = ctx.daemon_file()
    if f.doc is None or not f.exists:
        return skip("no daemon.json to validate")
    errors, warnings = validate.validate(f.doc)
    if errors:
        return fail(
            f"{f.path}: " + "; ".join(errors),
            f"fix these keys in {f.path}: dockerd refuses the file as it is",
        )
    if warnings:
        return warn(f"{f.path}: " + "; ".join(warnings), f"review these keys in {f.path}")
    return ok(f"{f.path}: matches the daemon.json schema")


@check("config.runtime", f"the {RUNTIME_NAME} runtime entry", needs=("config.parse",))
def config_runtime(ctx: Context) -> Outcome:
    f = ctx.daemon_file()
    runtimes = (f.doc or {}).get("runtimes")
    entry = runtimes.get(RUNTIME_NAME) if isinstance(runtimes, dict) else None
    if entry is None and ctx.cdi_only():
        return skip(f"no runtimes.{RUNTIME_NAME} entry, not needed: CDI mode is installed "
                    "(docker run --device nvidia.com/gpu=...)")
    if entry is None:
        return fail(
            f"{f.path} has no runtimes.{RUNTIME_NAME} entry: "
            f"`docker run --runtime={RUNTIME_NAME}` will fail",
            install_hint(ctx),
        )
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return fail(
            f'runtimes.{RUNTIME_NAME} in {f.path} has no "path" string: {entry!r}',
            f"repair it: {install_hint(ctx)}",
        )
    args = entry.get("runtimeArgs")
    extra = f" with runtimeArgs {args}" if args else ""
    return ok(f"runtimes.{RUNTIME_NAME}.path = {entry['path']}{extra}")


@check("config.runtime-path", "the runtime path is executable", needs=("config.runtime",))
def config_runtime_path(ctx: Context) -> Outcome:
    # needs config.runtime: the file parsed and holds the entry
    entry = cast("dict[str, Any]", ctx.daemon_file().doc)["runtimes"][RUNTIME_NAME]
    path = entry["path"]
    found, _ = ctx.runtime_path()
    if found is None:
        where = "" if path.startswith("/") else f" on {ctx.search_path()[1]}"
        return fail(
            f"{path}{where} is not an executable file: containers with "
            f"--runtime={RUNTIME_NAME} fail to start",
            "install nvdocker2's nvidia-container-runtime, or point the entry at it: "
            + ctx.command("install --runtime-path PATH"),
        )
    if not path.startswith("/"):
        return warn(
            f"{path} is a bare name, found as {ctx.root.show(found)} on {ctx.search_path()[1]}",
            "use an absolute path (dockerd's PATH may differ): " + ctx.command("install"),
        )
    return ok(f"{path} is executable")


@check("config.default-runtime", "default-runtime", needs=("config.parse",))
def config_default_runtime(ctx: Context) -> Outcome:
    f = ctx.daemon_file()
    doc = f.doc or {}
    default = doc.get("default-runtime")
    if default is None:
        return ok(
            f"not set: dockerd uses runc unless a container asks for --runtime={RUNTIME_NAME}"
        )
    runtimes = doc.get("runtimes")
    if not isinstance(runtimes, dict):
        runtimes = {}
    if default in runtimes or default in BUILTIN_RUNTIMES:
        return ok(f"default-runtime = {default}")
    return fail(
        f"default-runtime {default!r} names no runtime defined in {f.path}: "
        "dockerd refuses to start",
        f"define runtimes.{default} or set default-runtime "
        f'to "runc" ({ctx.command("uninstall")} repairs what install did)',
    )
