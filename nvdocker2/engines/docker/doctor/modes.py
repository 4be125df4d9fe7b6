"""Which way this host gives containers GPUs, as `nvdocker2 install` recorded it: the
runtime entry, CDI mode (reference §9), or both. Checks of the one not in use say so instead of
failing."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from nvdocker2.doctor.context import RUNTIME_NAME
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context


def cdi_spec(ctx: Context) -> tuple[PurePosixPath, Path, str]:
    """(the spec as the host names it, its real path, the runtime its hook runs)."""

    def compute() -> tuple[PurePosixPath, Path, str]:
        from nvdocker2 import locations
        from nvdocker2.engines.docker import cdi
        from nvdocker2.store.lock import state_dir
        from nvdocker2.errors import NvDockerError

        config = Path(str(ctx.config_location().path))
        rec: dict = {}
        try:
            rec = cdi.CdiJournal(state_dir(), config).load()
        except NvDockerError:
            pass
        spec = rec.get("spec") if isinstance(rec.get("spec"), dict) else {}
        shown = PurePosixPath(spec.get("path") or str(cdi.spec_path(None)))
        runtime = rec.get("runtime_path") or locations.default_runtime_path()[0]
        return shown, ctx.root.path(shown), runtime

    return ctx.fact("cdi_spec", compute)


def cdi_only(ctx: Context) -> bool:
    """CDI mode is installed (its spec is there) and daemon.json has no nvidia runtime entry."""
    runtimes = (ctx.daemon_file().doc or {}).get("runtimes")
    has_runtime = isinstance(runtimes, dict) and RUNTIME_NAME in runtimes
    return not has_runtime and cdi_spec(ctx)[1].exists()
