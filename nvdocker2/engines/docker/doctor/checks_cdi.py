"""Checks of CDI mode (reference §9): the spec install wrote still matches the GPUs present, and
the running dockerd has CDI on and reads that spec. Skipped where CDI mode is not installed."""

from __future__ import annotations

from pathlib import Path

from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip, warn

CHECKS = Checks()
check = CHECKS.check


@check("cdi.spec", "the CDI spec matches the GPUs present")
def cdi_spec(ctx: Context) -> Outcome:
    from nvdocker2.engines.docker import cdi
    from nvdocker2.errors import NvDockerError

    shown, real, runtime = ctx.cdi_spec()
    if not real.exists():
        return skip(f"no CDI spec at {shown} (CDI mode is not installed)")
    try:
        current, why = cdi.spec_is_current(real, runtime)
    except NvDockerError as exc:
        return fail(f"{shown}: the GPUs cannot be read: {exc.message}",
                    exc.hint or "check the NVIDIA driver (nvidia-smi)")
    why = why.replace(str(real), str(shown))
    if current:
        return ok(why)
    return warn(why, "regenerate it: nvdocker2 cdi refresh (the packages run it at boot)")


@check("cdi.dockerd", "dockerd has CDI on and reads the spec",
       needs=("cdi.spec", "dockerd.reachable"))
def cdi_dockerd(ctx: Context) -> Outcome:
    from nvdocker2.engines.docker.daemonjson import features

    shown, _, _ = ctx.cdi_spec()
    info = ctx.info().info or {}
    version = info.get("ServerVersion", "?")
    release = features.version_tuple(version)
    if release is not None and release < features.CDI_MIN:
        return fail(f"Docker {version} has no CDI, but a CDI spec is installed at {shown}",
                    f"CDI works on {features.SUPPORTED}; use the runtime here: "
                    f"{ctx.command('uninstall --mode cdi')} && {ctx.command('install')}")
    dirs = info.get("CDISpecDirs") or []
    if not dirs:
        return fail(f"Docker {version} runs with CDI off (CDISpecDirs is empty)",
                    f"turn it on: {ctx.command('install --mode cdi --restart')}")
    if str(shown.parent) not in dirs:
        return fail(f"dockerd reads CDI specs from {', '.join(dirs)}, not from {shown.parent}",
                    f"add {shown.parent} to \"cdi-spec-dirs\" in daemon.json and restart dockerd")
    if release is not None and release >= features.CDI_DEFAULT_ON:
        from nvdocker2.engines.docker.cdi import devices_of

        listed = {d.get("ID") for d in info.get("DiscoveredDevices") or [] if isinstance(d, dict)}
        try:
            wanted = devices_of(Path(ctx.cdi_spec()[1]).read_bytes())
        except OSError:
            wanted = ()
        missing = [d for d in wanted if d not in listed]
        if missing:
            return warn(f"dockerd does not list {', '.join(missing)} (DiscoveredDevices)",
                        "see the CDI warnings in: docker info")
        return ok(f"Docker {version} reads {shown.parent} and lists {len(wanted)} devices")
    return ok(f"Docker {version} has CDI on and reads {shown.parent}")
