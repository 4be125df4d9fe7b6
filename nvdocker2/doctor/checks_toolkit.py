"""Checks of the container toolkit side: the runtime shim and the hook (installed, same version
as nvdocker2), config.toml, libnvidia-container's CLI, and the low-level runtime."""

from __future__ import annotations

import os
from pathlib import Path

import nvdocker2
from nvdocker2.doctor.checks_driver import PERSISTENCE_HINT
from nvdocker2.doctor.context import CLI_EXE, HOOK_EXE, RUNTIME_EXE, Context, _toolkit_value
from nvdocker2.doctor.registry import Outcome, check, fail, ok, skip, warn

REINSTALL_HINT = "reinstall the nvdocker2 package so every executable comes from one version"


def _version_outcome(ctx: Context, exe: str, found: tuple[Path | None, str],
                     version: tuple[str | None, str], missing_hint: str) -> Outcome:
    path, where = found
    if path is None:
        return fail(f"{exe} not found ({where})", missing_hint)
    shown = ctx.root.show(path)
    ver, how = version
    if ver is None:
        return warn(f"{shown} ({where}) is not nvdocker2's: {how}",
                    f"{REINSTALL_HINT} (another toolkit's {exe} may shadow it)")
    if ver != nvdocker2.__version__:
        return warn(f"{shown} is nvdocker2 {ver}, this nvdocker2 is {nvdocker2.__version__}",
                    REINSTALL_HINT)
    return ok(f"{shown} ({where}), nvdocker2 {ver}")


@check("runtime.installed", f"{RUNTIME_EXE} installed, same version")
def runtime_installed(ctx: Context) -> Outcome:
    return _version_outcome(ctx, RUNTIME_EXE, ctx.runtime_path(), ctx.runtime_version(),
                            "install the nvdocker2 package (it ships the runtime)")


@check("hook.installed", f"{HOOK_EXE} installed, same version")
def hook_installed(ctx: Context) -> Outcome:
    return _version_outcome(ctx, HOOK_EXE, ctx.hook_path(), ctx.hook_version(),
                            "install the nvdocker2 package (it ships the hook), or set "
                            "[nvidia-container-runtime-hook] path in config.toml")


# config.toml keys and their types (SPEC §3): section → key → type.
_TOOLKIT_TYPES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "": {"disable-require": bool, "supported-driver-capabilities": str,
         "accept-nvidia-visible-devices-envvar-when-unprivileged": bool,
         "accept-nvidia-visible-devices-as-volume-mounts": bool, "swarm-resource": str},
    "nvidia-container-runtime": {"runtimes": list, "debug": str, "log-level": str,
                                 "mode": str, "driver-root": str},
    "nvidia-container-runtime-hook": {"path": str},
    "nvidia-container-cli": {"path": str, "root": str, "ldconfig": str, "load-kmods": bool,
                             "no-cgroups": bool, "user": str, "debug": str,
                             "environment": list},
}


def _toolkit_errors(data: dict) -> list[str]:
    errors = []
    for section, types in _TOOLKIT_TYPES.items():
        table = data.get(section, {}) if section else data
        if not isinstance(table, dict):
            errors.append(f"[{section}] is not a table")
            continue
        for key, want in types.items():
            if key in table and not isinstance(table[key], want):
                name = f"[{section}] {key}" if section else key
                errors.append(f"{name} should be a {getattr(want, '__name__', want)}, "
                              f"not {table[key]!r}")
    return errors


@check("toolkit.config", "config.toml parses, values valid")
def toolkit_config(ctx: Context) -> Outcome:
    cfg = ctx.toolkit_config()
    via = " (from NVIDIA_CONTAINER_RUNTIME_CONFIG)" if cfg.from_env else ""
    if not cfg.exists:
        return ok(f"{cfg.path}{via} absent: the runtime and hook use the defaults")
    if cfg.data is None:
        return fail(f"{cfg.path}{via}: {cfg.error}; every GPU container start fails",
                    f"fix the TOML in {cfg.path}")
    errors = _toolkit_errors(cfg.data)
    if errors:
        return fail(f"{cfg.path}: " + "; ".join(errors), f"correct these keys in {cfg.path}")
    return ok(f"{cfg.path}{via}: valid")


@check("toolkit.rootless", "no-cgroups matches rootless/rootful Docker",
       needs=("toolkit.config",))
def toolkit_rootless(ctx: Context) -> Outcome:
    no_cgroups = _toolkit_value(ctx, "nvidia-container-cli", "no-cgroups", False)
    path = ctx.toolkit_config().path
    if ctx.rootless():
        if no_cgroups is not True:
            return fail("rootless Docker, but [nvidia-container-cli] no-cgroups is not true: "
                        "the hook cannot write device cgroups and GPU containers fail",
                        f"set no-cgroups = true under [nvidia-container-cli] in {path}")
        return ok("rootless Docker with no-cgroups = true")
    if no_cgroups is True:
        return warn("rootful Docker with no-cgroups = true: GPUs are not added to the "
                    "containers' device cgroup, so CUDA sees no device",
                    f"remove no-cgroups (or set it false) in {path}")
    return ok("rootful Docker, no-cgroups = false")


@check("toolkit.debug-logs", "debug log files writable", needs=("toolkit.config",))
def toolkit_debug_logs(ctx: Context) -> Outcome:
    logs = [(f"[{s}] debug", _toolkit_value(ctx, s, "debug", None))
            for s in ("nvidia-container-runtime", "nvidia-container-cli")]
    logs = [(k, v) for k, v in logs if isinstance(v, str) and v]
    if not logs:
        return ok("no debug log configured")
    bad = []
    for key, value in logs:
        real = ctx.root.path(value)
        target = real if real.exists() else real.parent
        if not value.startswith("/"):
            bad.append(f"{key} = {value!r} is not an absolute path")
        elif not os.access(target, os.W_OK):
            bad.append(f"{key} = {value} is not writable")
    if bad:
        return warn("; ".join(bad) + ": the runtime/hook cannot log there",
                    "create the directory or point the debug key at a writable absolute path")
    return ok(", ".join(f"{k} = {v}" for k, v in logs))


def _direct_mode(ctx: Context) -> bool:
    return _toolkit_value(ctx, "nvidia-container-runtime", "mode", "legacy") == "direct"


@check("cli.installed", f"{CLI_EXE} (libnvidia-container) present")
def cli_installed(ctx: Context) -> Outcome:
    path, where = ctx.cli_path()
    if path is None:
        if _direct_mode(ctx):
            return skip(f"{CLI_EXE} not found, not needed: config.toml sets mode = \"direct\"")
        return fail(f"{CLI_EXE} not found ({where}): the hook cannot set up GPU containers",
                    "install libnvidia-container-tools from NVIDIA's repository, or set "
                    "mode = \"direct\" under [nvidia-container-runtime] in config.toml")
    res = ctx.cli_version()
    shown = ctx.root.show(path)
    if res is None or not res.ok:
        return fail(f"{shown} --version failed: {res.first_line() if res else '?'}",
                    "reinstall libnvidia-container-tools")
    version = next((line.split(":", 1)[1].strip() for line in res.stdout.splitlines()
                    if line.startswith("cli-version:")), res.first_line())
    return ok(f"{shown} version {version}")


@check("cli.info", f"`{CLI_EXE} info`", needs=("cli.installed",))
def cli_info(ctx: Context) -> Outcome:
    res = ctx.cli_info()
    if res is None:
        return skip(f"{CLI_EXE} not found")
    if not res.ok:
        msg = res.first_line()
        hint = "check the NVIDIA driver checks below"
        if "timed out" in msg:
            hint = PERSISTENCE_HINT
        elif "driver" in msg.lower() or "nvml" in msg.lower():
            hint = "load the NVIDIA driver (modprobe nvidia) or reinstall it; then rerun doctor"
        elif "load library" in msg.lower():
            hint = "install the driver's user-space libraries (libnvidia-ml, libcuda)"
        return fail(f"`{CLI_EXE} info` failed: {msg}", hint)
    nvrm = next((line.split(":", 1)[1].strip() for line in res.stdout.splitlines()
                 if line.startswith("NVRM version:")), "?")
    gpus = sum(1 for line in res.stdout.splitlines() if line.startswith("Device Index:"))
    return ok(f"driver {nvrm}, {gpus} GPU(s)")


@check("runtime.low-level", "low-level runtime (runc/crun)")
def runtime_low_level(ctx: Context) -> Outcome:
    path, where, res = ctx.low_level_runtime()
    names = _toolkit_value(ctx, "nvidia-container-runtime", "runtimes",
                           ["docker-runc", "runc", "crun"])
    if path is None:
        return fail(f"none of {names} found on {where}: the runtime shim has nothing to exec",
                    "install runc (apt-get install runc) or crun")
    shown = ctx.root.show(path)
    if res is None or not res.ok:
        return fail(f"{shown} --version failed: {res.first_line() if res else '?'}",
                    f"reinstall {path.name}")
    return ok(f"{shown}: {res.stdout.splitlines()[0].strip() if res.stdout else '?'}")
