"""Checks of the container toolkit side: the runtime shim and the hook (installed, same version
as nvdocker2), config.toml, libnvidia-container's CLI, and the low-level runtime."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nvdocker2
from nvdocker2.doctor.checks_driver import PERSISTENCE_HINT
from nvdocker2.doctor.context import CLI_EXE, HOOK_EXE, RUNTIME_EXE, Context
from nvdocker2.doctor.toolkit_files import BROKEN
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip, warn

CHECKS = Checks()
check = CHECKS.check

# libnvidia-container 1.16.2 fixed CVE-2024-0132 and 1.17.4 its bypass, CVE-2025-23359
# (NVIDIA security bulletins 5582 and 5616).
SAFE_CLI_VERSION = "1.17.4"
REINSTALL_HINT = "reinstall the nvdocker2 package so every executable comes from one version"


def _version_outcome(
    ctx: Context,
    exe: str,
    found: tuple[Path | None, str],
    version: tuple[str | None, str],
    missing_hint: str,
) -> Outcome:
    path, where = found
    if path is None:
        return fail(f"{exe} not found ({where})", missing_hint)
    shown = ctx.root.show(path)
    ver, how = version
    if how.startswith(BROKEN):
        return fail(
            f"{shown} cannot start: {how[len(BROKEN) :]}",
            REINSTALL_HINT,
        )
    if ver is None:
        return warn(
            f"{shown} ({where}) is not nvdocker2's: {how}",
            f"{REINSTALL_HINT} (another toolkit's {exe} may shadow it)",
        )
    if ver != nvdocker2.__version__:
        return warn(
            f"{shown} is nvdocker2 {ver}, this nvdocker2 is {nvdocker2.__version__}", REINSTALL_HINT
        )
    return ok(f"{shown} ({where}): {how}")


@check("runtime.installed", f"{RUNTIME_EXE} installed, same version")
def runtime_installed(ctx: Context) -> Outcome:
    return _version_outcome(
        ctx,
        RUNTIME_EXE,
        ctx.runtime_path(),
        ctx.runtime_version(),
        "install the nvdocker2 package (it ships the runtime)",
    )


@check("hook.installed", f"{HOOK_EXE} installed, same version")
def hook_installed(ctx: Context) -> Outcome:
    return _version_outcome(
        ctx,
        HOOK_EXE,
        ctx.hook_path(),
        ctx.hook_version(),
        "install the nvdocker2 package (it ships the hook), or set "
        "[nvidia-container-runtime-hook] path in config.toml",
    )


@check("toolkit.config", "config.toml parses, values valid")
def toolkit_config(ctx: Context) -> Outcome:
    cfg = ctx.toolkit_config()
    via = " (from NVIDIA_CONTAINER_RUNTIME_CONFIG)" if cfg.from_env else ""
    user = f"; per-user {cfg.user_path} over it" if cfg.user_exists else ""
    if cfg.error is not None:
        where = cfg.user_path if cfg.user_path is not None and \
            cfg.error.startswith(str(cfg.user_path)) else cfg.path
        return fail(
            f"{cfg.error}{via}: the runtime and the hook refuse it, so every GPU container "
            "fails to start",
            f"correct that key in {where}, or remove the file to use the defaults",
        )
    if not cfg.exists:
        return ok(f"{cfg.path}{via} absent: the runtime and hook use the defaults{user}")
    return ok(f"{cfg.path}{via}: valid{user}")


@check("toolkit.rootless", "no-cgroups matches rootless/rootful Docker", needs=("toolkit.config",))
def toolkit_rootless(ctx: Context) -> Outcome:
    tk = ctx.toolkit_config()
    no_cgroups = tk.config.cli.no_cgroups
    path = tk.path
    if ctx.rootless():
        where = tk.user_path or path
        if not no_cgroups:
            return fail(
                f"rootless Docker, but [nvidia-container-cli] no-cgroups is not true in "
                f"{path} or the per-user {where}: the hook cannot write device cgroups and "
                "GPU containers fail",
                f"run {ctx.command('install')} as this user (it sets it), or set no-cgroups = true "
                f"under [nvidia-container-cli] in {where}",
            )
        read = f"per-user {tk.user_path} read over {path}" if tk.user_exists else str(path)
        return ok(f"rootless Docker with no-cgroups = true ({read})")
    if no_cgroups:
        return warn(
            "rootful Docker with no-cgroups = true: GPUs are not added to the "
            "containers' device cgroup, so CUDA sees no device",
            f"remove no-cgroups (or set it false) in {path}",
        )
    return ok("rootful Docker, no-cgroups = false")


@check("toolkit.debug-logs", "debug log files writable", needs=("toolkit.config",))
def toolkit_debug_logs(ctx: Context) -> Outcome:
    cfg = ctx.toolkit_config().config
    logs = [
        (key, value)
        for key, value in (
            ("[nvidia-container-runtime] debug", cfg.runtime.debug),
            ("[nvidia-container-cli] debug", cfg.cli.debug),
        )
        if value
    ]
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
        return warn(
            "; ".join(bad) + ": the runtime/hook cannot log there",
            "create the directory or point the debug key at a writable absolute path",
        )
    return ok(", ".join(f"{k} = {v}" for k, v in logs))


def _direct_mode(ctx: Context) -> bool:
    from nvdocker2.doctor.checks_nvidia_config import ordinary_mode  # mode "auto" resolved

    return ordinary_mode(ctx)[0] == "direct"


@check("cli.installed", f"{CLI_EXE} (libnvidia-container) present", blocked_by=("driver.kernel",))
def cli_installed(ctx: Context) -> Outcome:
    path, where = ctx.cli_path()
    if path is None:
        if _direct_mode(ctx):
            return skip(f'{CLI_EXE} not found, not needed: config.toml sets mode = "direct"')
        if ctx.cdi_only():
            return skip(f"{CLI_EXE} not found, not needed: CDI mode is installed")
        return fail(
            f"{CLI_EXE} not found ({where}): the hook cannot set up GPU containers",
            "install libnvidia-container-tools from NVIDIA's repository, or set "
            'mode = "direct" under [nvidia-container-runtime] in config.toml',
        )
    res = ctx.cli_version()
    shown = ctx.root.show(path)
    if res is None or not res.ok:
        return fail(
            f"{shown} --version failed: {res.first_line() if res else '?'}",
            "reinstall libnvidia-container-tools",
        )
    version = next(
        (
            line.split(":", 1)[1].strip()
            for line in res.stdout.splitlines()
            if line.startswith("cli-version:")
        ),
        res.first_line(),
    )
    if _older(version, SAFE_CLI_VERSION):
        return warn(
            f"{shown} version {version} is older than {SAFE_CLI_VERSION}, which fixes "
            "CVE-2024-0132 and CVE-2025-23359 (a crafted image reaching the host's files)",
            f"upgrade libnvidia-container-tools to {SAFE_CLI_VERSION} or newer from NVIDIA's "
            'repository, or set mode = "direct" under [nvidia-container-runtime]',
        )
    return ok(f"{shown} version {version}")


def _older(version: str, than: str) -> bool:
    """True when the release numbers of `version` (1.14.3, 1.17.0~rc.1) come before `than`'s;
    an unreadable version is not called old."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    if not found:
        return False
    nums = [int(n) for n in found.group(0).split(".")]
    want = [int(n) for n in than.split(".")]
    return nums + [0] * (len(want) - len(nums)) < want


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
    nvrm = next(
        (
            line.split(":", 1)[1].strip()
            for line in res.stdout.splitlines()
            if line.startswith("NVRM version:")
        ),
        "?",
    )
    gpus = sum(1 for line in res.stdout.splitlines() if line.startswith("Device Index:"))
    return ok(f"driver {nvrm}, {gpus} GPU(s)")


@check("direct.driver", "direct mode finds the driver under driver-root", needs=("toolkit.config",))
def direct_driver(ctx: Context) -> Outcome:
    """In direct mode the runtime itself reads GPUs, device nodes and driver files from
    driver-root on every `create` (docs/reference.md §7): the same discovery, run once here."""
    from nvdocker2.direct.discover import discover
    from nvdocker2.direct.errors import DirectError

    if not _direct_mode(ctx):
        return skip('mode is "legacy": the hook and nvidia-container-cli set up GPUs')
    driver_root = ctx.toolkit_config().config.runtime.driver_root
    try:
        found = discover(str(ctx.root.path(driver_root)))
    except DirectError as exc:
        return fail(ctx.root.unroot(exc.message), exc.hint or "install and load the NVIDIA driver")
    detail = (
        f"driver-root {driver_root}: driver {found.driver_version or '?'}, "
        f"{len(found.gpus)} GPU(s), {len(found.files)} driver files"
    )
    if found.problems:
        return warn(
            detail + "; " + "; ".join(f"{p}: {why}" for p, why in found.problems),
            "create the device nodes: nvidia-modprobe -u -c=0",
        )
    if not found.gpus:
        return warn(detail, "check that the GPUs are visible to the driver (nvidia-smi)")
    return ok(detail)


@check("runtime.low-level", "low-level runtime (runc/crun)")
def runtime_low_level(ctx: Context) -> Outcome:
    path, where, res = ctx.low_level_runtime()
    names = ", ".join(ctx.toolkit_config().config.runtime.runtimes)
    if path is None:
        return fail(
            f"none of {names} found on {where}: the runtime shim has nothing to exec",
            "install runc (apt-get install runc) or crun",
        )
    shown = ctx.root.show(path)
    if res is None or not res.ok:
        return fail(
            f"{shown} --version failed: {res.first_line() if res else '?'}",
            f"reinstall {path.name}",
        )
    return ok(f"{shown}: {res.stdout.splitlines()[0].strip() if res.stdout else '?'}")
