"""Checks of config.toml against NVIDIA's toolkit (docs/nvidia-toolkit.md): the keys no NVIDIA
release knows, the NVIDIA keys nvdocker2 does not use and why, and the mode that serves an
ordinary GPU container (`mode = "auto"` resolved as the runtime resolves it)."""

from __future__ import annotations

from nvdocker2.doctor.context import Context
from nvdocker2.doctor.model import Checks, Outcome, ok, warn
from nvdocker2.runtime.mode import resolve_auto
from nvdocker2.toolkit_config import NOT_USED

CHECKS = Checks()
check = CHECKS.check

ORDINARY = {"NVIDIA_VISIBLE_DEVICES": "all"}


def ordinary_mode(ctx: Context) -> tuple[str, str]:
    """(mode, why) of a container asking for NVIDIA_VISIBLE_DEVICES=all on this host."""
    config = ctx.toolkit_config().config
    given = config.runtime.mode_given
    if config.runtime.mode != "auto":
        return config.runtime.mode, f"mode = {given!r}"
    root = str(ctx.root.path(config.runtime.driver_root))
    mode, why = resolve_auto(ORDINARY, config, driver_root=root)
    return mode, f"mode = {given!r} resolves to {mode}: {ctx.root.unroot(why)}"


@check("toolkit.keys", "config.toml keys: known to NVIDIA's toolkit, used here",
       needs=("toolkit.config",))
def toolkit_keys(ctx: Context) -> Outcome:
    config = ctx.toolkit_config().config
    unused = "; ".join(f"{key}: not used by nvdocker2 ({NOT_USED[key]})"
                       for key in config.unused)
    if config.warnings:
        return warn(
            "; ".join(config.warnings) + (f"; {unused}" if unused else ""),
            f"check the spelling of those keys in {config.path}; the runtime ignores them",
        )
    return ok(unused or "every key set is one nvdocker2 uses as NVIDIA's toolkit does")


@check("toolkit.mode", "mode that serves GPU containers", needs=("toolkit.config",))
def toolkit_mode(ctx: Context) -> Outcome:
    mode, why = ordinary_mode(ctx)
    return ok(f"{why} (for NVIDIA_VISIBLE_DEVICES=all)")
