"""What the commands run for `--engine docker`: daemon.json's transactions (the runtime entry,
or CDI mode with `--mode cdi`), dockerd as their service, and the backups of daemon.json.
`status` is in `status.py`. Results go back to the CLI, which renders them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from nvdocker2 import locations
from nvdocker2.engines.commands import TransactionFront
from nvdocker2.engines.front import BackupList, Outcome, Report
from nvdocker2.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.engines.docker.engine import DockerEngine


def make() -> "DockerFront":
    return DockerFront()


def _resolve_config(config: Optional[Path]) -> tuple[Path, str]:
    return locations.resolve_config(config)


def _make_daemon(o: Mapping[str, Any], config: Path) -> tuple[Any, list[str]]:
    """The Daemon for the reload flags. The one place dockerd reloading gets wired in."""
    from nvdocker2.engines.docker.service.select import DaemonOptions, make_daemon
    from nvdocker2.engines.docker.service.progress import reporter_for

    mode = o["reload"].value
    options = DaemonOptions(
        mode=mode, restart=o["restart"], verify=not o["no_verify"],
        docker_host=o["docker_host"], pidfile=o["pidfile"], dockerd_log=o["dockerd_log"],
        config=config,
    )
    daemon = make_daemon(options, reporter_for(sys.stderr))
    notes = [f"reload mode {daemon.strategy}: {daemon.reason}"] if mode == "auto" else []
    return daemon, notes


def _applied(res: Any, notes: list[str]) -> list[str]:
    """The reload notes, when something was written and reloaded."""
    return notes if res.changed and not res.dry_run else []


class DockerFront(TransactionFront["DockerEngine"]):
    """The shared front with Docker's own commands: the flags that pick dockerd and how to
    reload it, rootless Docker, --mode and CDI mode, and daemon.json's backups one by one."""

    name = "docker"

    def engine(self, config: Optional[Path]) -> "DockerEngine":
        from nvdocker2.engines.docker.engine import DockerEngine

        cfg, why = _resolve_config(config)
        return DockerEngine(cfg, config_reason=why)

    def run(self, action: str, o: Mapping[str, Any], reporter: Any) -> Outcome:
        mode = o["mode"].value if o.get("mode") is not None else None
        if action == "rollback":
            return self._rollback(o, reporter)
        cfg, why = _resolve_config(o["config"])
        if action == "install":
            from nvdocker2.engines.docker import desktop

            # before anything is written; `--reload none` asks dockerd nothing, so there only
            # the socket's path can tell
            desktop.refuse_on_desktop(o["docker_host"], str(cfg),
                                      ask=o["reload"].value != "none")
        if mode == "cdi":
            return self._cdi(action, cfg, why, o, reporter)
        if action == "uninstall" and mode is not None:
            raise BadInput(f"uninstall --mode {mode}: only --mode cdi has something to "
                           "undo", "drop --mode (uninstall removes the runtime entry)")
        _no_cdi_spec_dir(o["cdi_spec_dir"])
        from nvdocker2.engines import docker as docker_engine

        if action == "uninstall":
            daemon, notes = _make_daemon(o, cfg)
            own, _ = locations.default_runtime_path()
            res = docker_engine.uninstall(
                cfg, runtime_name=o["runtime_name"], own_runtime_paths=[own],
                dry_run=o["dry_run"], daemon=daemon, reporter=reporter, timeout=o["timeout"],
                config_reason=why, dockerd_log=o["dockerd_log"],
                require_daemon=o["require_daemon"],
            )
            return Outcome(res, _applied(res, notes))
        warnings: list[str] = []
        path = o["runtime_path"]
        if path is None:
            path, exists = locations.default_runtime_path()
            if not exists:
                warnings.append(
                    f"no {locations.RUNTIME_EXE} beside nvdocker2 or on PATH; the entry points "
                    f"at {path}, which does not exist yet (pass --runtime-path)"
                )
        elif os.path.isabs(path) and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            warnings.append(f"--runtime-path {path} is not an executable file (yet)")
        daemon, notes = _make_daemon(o, cfg)
        from nvdocker2.engines.docker import rootless

        res = docker_engine.install(
            cfg, runtime_name=o["runtime_name"], runtime_path=path,
            runtime_args=o["runtime_arg"] or [], set_default=o["set_default"],
            dry_run=o["dry_run"], daemon=daemon, reporter=reporter, timeout=o["timeout"],
            config_reason=why, dockerd_log=o["dockerd_log"],
            require_daemon=o["require_daemon"], user_config=rootless.install_path(),
            mode=mode,
        )
        return Outcome(res, _applied(res, notes), warnings)

    def _rollback(self, o: Mapping[str, Any], reporter: Any) -> Outcome:
        from nvdocker2.engines import docker as docker_engine

        if o["config"] is None and o["backup_id"]:
            cfg, why = None, ""
        else:
            cfg, why = _resolve_config(o["config"])
        daemon, notes = _make_daemon(o, cfg or Path(locations.ROOTFUL_CONFIG))
        res = docker_engine.rollback(
            cfg, o["backup_id"], dry_run=o["dry_run"], daemon=daemon, reporter=reporter,
            timeout=o["timeout"], config_reason=why, dockerd_log=o["dockerd_log"],
            require_daemon=o["require_daemon"],
        )
        return Outcome(res, _applied(res, notes))

    def _cdi(self, action: str, cfg: Path, why: str, o: Mapping[str, Any],
             reporter: Any) -> Outcome:
        """install/uninstall --mode cdi: the spec, its devices and whether dockerd still
        needs a restart (docs/reference.md §9) beside the transaction's output."""
        from nvdocker2.engines.docker import cdi

        if action == "install":
            for flag, given in (("--set-default", o["set_default"]),
                                ("--runtime-arg", o["runtime_arg"]),
                                ("--runtime-name", o["runtime_name"] != "nvidia")):
                if given:
                    raise BadInput(f"{flag} has no meaning with --mode cdi (CDI mode adds no "
                                   "runtime entry)", f"drop {flag}, or drop --mode cdi")
        daemon, notes = _make_daemon(o, cfg)
        run = cdi.Run(daemon, o["docker_host"], o["restart"], o["dry_run"], reporter,
                      o["timeout"], why, dockerd_log=o["dockerd_log"],
                      require_daemon=o["require_daemon"])
        own = locations.default_runtime_path()[0]
        if action == "install":
            out = cdi.install(cfg, spec_dir=o["cdi_spec_dir"],
                              runtime_path=o["runtime_path"] or own, run=run)
        else:
            out = cdi.uninstall(cfg, spec_dir=o["cdi_spec_dir"], own_runtime_paths=[own],
                                run=run)
        res = out.result
        lines = _applied(res, notes)
        lines.append(f"CDI spec {out.spec}: {', '.join(out.devices) or 'no devices'}")
        lines.extend(out.notes)
        after = ["restart needed: yes (dockerd reads CDI settings only at start)"] \
            if out.restart_needed else []
        return Outcome(res, lines, [], out.extra_json(), after)

    def status(self, o: Mapping[str, Any]) -> Report:
        from nvdocker2.engines.docker.status import report

        cfg, why = _resolve_config(o["config"])
        return report(cfg, why, o["docker_host"], self.short, pidfile=o["pidfile"])

    def backups(self, o: Mapping[str, Any]) -> BackupList:
        from nvdocker2.store.backups import Backups
        from nvdocker2.store.lock import state_dir

        eng = self.engine(o["config"])
        bs = Backups(state_dir())
        return BackupList("docker", str(eng.config), eng.config_reason, [str(eng.config)],
                          str(bs.dir), [(None, bs.all(eng.config))], grouped=False)

    def doctor(self, o: Mapping[str, Any]) -> int:
        from nvdocker2.engines.docker.doctor import run_doctor

        config = o["config"]
        cfg = str(_resolve_config(config)[0]) if config is not None else None
        return run_doctor(cfg, o["docker_host"], o["json"], o["smoke"], verbose=o["verbose"])

    def cdi_refresh(self, config: Optional[Path], spec_dir: Optional[str],
                    timeout: float) -> Any:
        """`cdi refresh`: CDI mode's spec regenerated from the GPUs present."""
        from nvdocker2.engines.docker import cdi_refresh

        return cdi_refresh.command(config, spec_dir, timeout)


def _no_cdi_spec_dir(cdi_spec_dir: Optional[str]) -> None:
    if cdi_spec_dir is not None:
        raise BadInput("--cdi-spec-dir needs --mode cdi", "add --mode cdi, or drop --cdi-spec-dir")
