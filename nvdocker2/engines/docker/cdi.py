"""CDI mode (docs/reference.md §9): `install --mode cdi` and `uninstall --mode cdi` (`cdi refresh`
is cdi_refresh.py).

The CDI spec of this host's GPUs (the same generator as `cdi generate`, built on direct
mode's discovery) is the second file of the daemon.json transaction (a `FileEdit` of its plan):
one lock,
backups of both, a journal, atomic writes, and both put back together when dockerd does not
come back right. dockerd registers CDI only when it starts, so a change that turns CDI on is
applied by a restart (`--restart`) or left for the operator with the command to run.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from nvdocker2 import locations
from nvdocker2.engines.docker.daemonjson import edit, features
from nvdocker2.store.atomic import (
    os_error,
)
from nvdocker2.store.journal import slot, unslot
from nvdocker2.changes import Change
from nvdocker2.engines.base import FileEdit, Plan
from nvdocker2.engines.docker.cdi_spec import build_spec
from nvdocker2.engines.docker.cdi_journal import (
    CdiJournal,
    more_specs,
    previous_bytes,
    recorded_paths,
    spec_path,
)
from nvdocker2.engines.docker.engine import DockerEngine, wrap_shape
from nvdocker2.engines.docker.engine import run as run_transaction
from nvdocker2.engines.docker.service import Daemon, Expectation, expectation
from nvdocker2.engines.transaction import Context, Reporter, Result
from nvdocker2.errors import BadInput
from nvdocker2.host import run as door

KIND = "nvidia.com/gpu"


# --- what the running Docker is ------------------------------------------------------------


@dataclass(frozen=True)
class DockerFacts:
    """The Docker that CDI mode configures: its version and, when /info answered, its CDI."""

    version: str | None
    source: str  # where the version came from
    cdi_dirs: tuple[str, ...] | None = None  # /info CDISpecDirs; None when /info not asked

    @property
    def release(self) -> tuple[int, int] | None:
        return features.version_tuple(self.version)

    @property
    def lists_devices(self) -> bool:
        """/info has DiscoveredDevices (Docker >= 28.2)."""
        r = self.release
        return r is not None and r >= features.CDI_DEFAULT_ON

    def registers(self, spec_dir: Path) -> bool | None:
        """Whether the running dockerd reads CDI specs from `spec_dir` (None: unknown)."""
        if self.cdi_dirs is None:
            return None
        want = os.path.normpath(str(spec_dir))
        return any(os.path.normpath(d) == want for d in self.cdi_dirs)


_DOCKERD_VERSION = re.compile(r"Docker version (\S+?),")


def docker_facts(daemon: Daemon, docker_host: str | None = None) -> DockerFacts:
    """Ask the Engine API (/info: the daemon's client, else `docker_host`), else
    `dockerd --version`."""
    from nvdocker2.engines.docker.service.api import (
        EngineClient,
        EngineError,
        EngineUnavailable,
        parse_docker_host,
    )

    from nvdocker2.engines.docker.service.process import trusted_peer

    client = getattr(daemon, "client", None)
    if client is None:
        client = EngineClient(parse_docker_host(docker_host), timeout=5.0)
    if client is not None:
        # What another user's process serves on the socket decides nothing (docs/reference.md §8).
        if getattr(client, "host", None) is not None:
            trusted_peer(client.host)
        try:
            info = client.info()
        except (EngineUnavailable, EngineError):
            info = None
        if info is not None:
            dirs = info.get("CDISpecDirs")
            dirs = tuple(d for d in dirs if isinstance(d, str)) if isinstance(dirs, list) else ()
            return DockerFacts(info.get("ServerVersion"), "/info", dirs)
    exe = door.find("dockerd", locations.DOCKERD_PLACES)
    if exe:
        try:
            out = door.run([exe, "--version"], timeout=10, text=True).stdout
        except OSError:
            out = ""
        m = _DOCKERD_VERSION.search(out)
        if m:
            return DockerFacts(m.group(1), f"{exe} --version")
    return DockerFacts(None, "unknown")


def check_supported(facts: DockerFacts) -> None:
    """Exit 2 on a Docker without CDI (< 25), naming the versions that have it."""
    release = facts.release
    if release is not None and release < features.CDI_MIN:
        raise BadInput(
            f"CDI mode needs Docker 25.0 or later; this dockerd is {facts.version} "
            f"(from {facts.source})",
            f"CDI works on {features.SUPPORTED}; on this Docker use the runtime: "
            "nvdocker2 install (without --mode cdi)",
        )


def restart_hint(config: Path) -> str:
    """The command that restarts the dockerd reading `config` (CDI is registered at start)."""
    if str(config) == locations.SNAP_CONFIG:
        return "sudo snap restart docker"
    if locations.reload_hint(config).startswith("systemctl --user"):
        return "systemctl --user restart docker"
    if str(config) == locations.ROOTFUL_CONFIG:
        return "sudo systemctl restart docker"
    return "restart the dockerd that reads this file"


# --- the spec (cdi_spec.py) -----------------------------------------------------------------


def read_optional(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise os_error(e, str(path)) from None


# --- the daemon in CDI mode -----------------------------------------------------------------


class CdiDaemon:
    """The transaction's `Daemon` for CDI mode: no reload (dockerd reads CDI at start only);
    `restart` restarts through the given daemon (built with restart=True); `verify` only asks
    /info; `none` writes and leaves the restart to the operator (`apply_hint`)."""

    def __init__(self, inner: Daemon, config: Path) -> None:
        self.inner = inner
        self.needs_transition = False
        self.apply_hint = restart_hint(config)
        self.log_description = getattr(inner, "log_description", None)
        self.decide("none")

    def decide(self, action: str) -> None:
        """Set the action ("restart", "verify", "none") once the file was read under the lock."""
        self.action = action
        self.strategy = f"{self.inner.strategy} restart" if action == "restart" else "none"
        self.verifies = self.inner.verifies and action in ("restart", "verify")

    def check_candidate(self, config_path: Path, candidate: dict[str, Any],
                        candidate_file: Path) -> None:
        self.inner.check_candidate(config_path, candidate, candidate_file)

    def reload(self) -> None:
        if self.action == "restart":
            self.inner.reload()

    def verify(self, expect: Expectation, timeout: float) -> str | None:
        return self.inner.verify(expect, timeout) if self.verifies else None


@dataclass(frozen=True)
class CdiOutcome:
    """A CDI-mode transaction's result plus what CDI mode adds to the output."""

    result: Result
    spec: str
    devices: tuple[str, ...]
    docker_version: str | None
    restart_needed: bool
    notes: tuple[str, ...] = ()

    def extra_json(self) -> dict[str, Any]:
        return {
            "mode": "cdi",
            "spec": self.spec,
            "devices": list(self.devices),
            "docker_version": self.docker_version,
            "restart_needed": self.restart_needed,
        }


@dataclass(frozen=True)
class Run:
    """How a CDI-mode transaction runs: the daemon flags of install/uninstall (reference §2)."""

    daemon: Daemon
    docker_host: str | None = None
    restart: bool = False
    dry_run: bool = False
    reporter: Reporter | None = None
    timeout: float = 30.0
    config_reason: str = ""
    state: Path | None = None
    dockerd_log: Path | None = None
    require_daemon: bool = False


def _begin(config: Path, run: Run) -> tuple[DockerFacts, CdiDaemon, DockerEngine]:
    """What Docker runs here, the CDI daemon around `run.daemon`, the Docker engine."""
    facts = docker_facts(run.daemon, run.docker_host)
    cdi_daemon = CdiDaemon(run.daemon, config)
    engine = DockerEngine(config, cdi_daemon, run.config_reason, run.dockerd_log)
    return facts, cdi_daemon, engine


def _run(engine: DockerEngine, action: str, planner: Any, run: Run) -> Result:
    return run_transaction(engine, action, planner, dry_run=run.dry_run, reporter=run.reporter,
                           timeout=run.timeout, state=run.state,
                           require_daemon=run.require_daemon)


def _expect(new: dict[str, Any], old: dict[str, Any], **cdi: Any) -> Expectation:
    return dataclasses.replace(expectation(new, old), **cdi)


def _action(needs_restart: bool, restart: bool, facts: DockerFacts) -> str:
    if needs_restart:
        return "restart" if restart else "none"
    return "verify" if facts.cdi_dirs is not None else "none"


def _restart_note(config: Path) -> str:
    return (
        "dockerd registers CDI only when it starts: restart it to apply this: "
        f"{restart_hint(config)} (or run again with --restart)"
    )


def _spec_change(path: Path, old: bytes | None, new: bytes | None) -> Change:
    if old == new:
        return Change(str(path), "unchanged")
    if new is None:
        return Change(str(path), "removed")
    return Change(str(path), "written" if old is None else "rewritten")


def install(
    config: Path,
    *,
    spec_dir: str | None,
    runtime_path: str,
    run: Run,
) -> CdiOutcome:
    """Write the spec and turn CDI on in daemon.json where this Docker needs it (reference §9)."""
    facts, cdi_daemon, engine = _begin(config, run)
    check_supported(facts)
    path = spec_path(spec_dir)
    spec = build_spec(path, runtime_path)
    decided: dict[str, bool] = {}

    def attempt(ctx: Context) -> Plan:
        doc = engine.load(ctx)
        wrap_shape(ctx.config, lambda: edit.check_shape(doc.data))
        before = wrap_shape(ctx.config, lambda: features.cdi_setting(doc.data))
        new, ch = wrap_shape(
            ctx.config, lambda: features.enable_cdi(doc.data, facts.release)
        )
        if str(path.parent) not in features.spec_dirs(new):
            raise BadInput(
                f"--cdi-spec-dir {path.parent}: dockerd does not read CDI specs there (it reads "
                f"{', '.join(features.spec_dirs(new))})",
                "use one of those directories, or add it to \"cdi-spec-dirs\" in "
                f"{ctx.config} first",
            )
        if ch.changed:
            new_bytes: bytes | None = doc.serialize(new)
            engine.schema_check(ctx, new)
        else:
            new_bytes = doc.raw if doc.existed else None
        old_spec = read_optional(path)
        journal = CdiJournal(ctx.state, ctx.config)
        record = None
        if not ctx.dry_run and (ch.changed or old_spec != spec.data):
            rec = dict(journal.load() or {"config": str(ctx.config)})
            if ch.changed and "features_cdi" not in rec:
                rec["features_cdi"] = {
                    "previous": slot(before),
                    "features_present": features.FEATURES in doc.data,
                }
            prev = base64.b64encode(old_spec).decode() if old_spec is not None else None
            if "spec" not in rec:
                rec["spec"] = {"path": str(path), "previous": prev}
            elif str(path) not in recorded_paths(rec):
                # Another --cdi-spec-dir than the first install's: uninstall puts back both.
                rec["more_specs"] = [*more_specs(rec), {"path": str(path), "previous": prev}]
            rec["runtime_path"] = runtime_path
            record = rec
        registers = facts.registers(path.parent)
        needs_restart = (not registers) if registers is not None else ch.changed
        decided["restart"] = needs_restart
        cdi_daemon.decide(_action(needs_restart, run.restart, facts))
        expect = _expect(
            new, doc.data, cdi_spec_dir=str(path.parent),
            cdi_devices=spec.devices if facts.lists_devices else (),
        )
        return engine.plan(
            doc, new, new_bytes, [ch, _spec_change(path, old_spec, spec.data)],
            "install CDI mode", expect, record, extras=[
                FileEdit(path, old_spec, spec.data, f"install CDI spec {path}")
            ], journal_file=journal,
        )

    res = _run(engine, "install", attempt, run)
    restart_needed = decided["restart"] and cdi_daemon.action != "restart" and not run.dry_run
    notes = (_restart_note(engine.config),) if restart_needed and not res.changed else ()
    return CdiOutcome(res, str(path), spec.devices, facts.version, restart_needed, notes)


def uninstall(
    config: Path,
    *,
    spec_dir: str | None,
    own_runtime_paths: Sequence[str],
    run: Run,
) -> CdiOutcome:
    """Remove the spec install wrote (or put back the one it replaced) and restore
    `features.cdi` as it was, from the journal. Without a journal the spec is removed only
    when it is one nvdocker2 wrote for this package's runtime, and features stay."""
    facts, cdi_daemon, engine = _begin(config, run)
    decided: dict[str, Any] = {}

    def attempt(ctx: Context) -> Plan:
        doc = engine.load(ctx)
        wrap_shape(ctx.config, lambda: edit.check_shape(doc.data))
        journal = CdiJournal(ctx.state, ctx.config)
        rec = journal.load()
        spec_rec = rec.get("spec") if isinstance(rec.get("spec"), dict) else None
        path = Path(spec_rec["path"]) if spec_rec and spec_dir is None else spec_path(spec_dir)
        old_spec = read_optional(path)
        new_spec: bytes | None = old_spec
        if spec_rec is not None:
            new_spec = previous_bytes(spec_rec)
        elif old_spec is not None:
            text = old_spec.decode("utf-8", "replace")
            if "nvdocker2" in text and any(p in text for p in own_runtime_paths):
                new_spec = None
            else:
                ctx.warnings.append(
                    f"{path} was not written by this package's install (no journal entry, and "
                    "it does not name this package's runtime): left in place"
                )
        new = doc.data
        changes: list[Change] = []
        frec = rec.get("features_cdi")
        if isinstance(frec, dict):
            new, ch = wrap_shape(
                ctx.config, lambda: features.put_cdi(doc.data, unslot(frec.get("previous")))
            )
            changes.append(ch)
            if not frec.get("features_present", True):
                new, ch = features.drop_empty_features(new)
                changes.append(ch)
        data_changed = any(c.changed for c in changes)
        new_bytes = doc.serialize(new) if data_changed else (doc.raw if doc.existed else None)
        if data_changed:
            engine.schema_check(ctx, new)
        changes.append(_spec_change(path, old_spec, new_spec))
        devices = devices_of(old_spec) if facts.lists_devices else ()
        # Turning CDI off takes a restart; removing the spec does not (dockerd rescans).
        needs_restart = data_changed and facts.cdi_dirs != ()
        decided.update(restart=needs_restart, path=path, devices=devices)
        cdi_daemon.decide(_action(needs_restart, run.restart, facts))
        extras = [FileEdit(path, old_spec, new_spec, f"uninstall CDI spec {path}")]
        if spec_dir is None:
            for more in more_specs(rec):
                other = Path(more["path"])
                if other == path:
                    continue
                other_old, other_new = read_optional(other), previous_bytes(more)
                changes.append(_spec_change(other, other_old, other_new))
                extras.append(FileEdit(other, other_old, other_new,
                                       f"uninstall CDI spec {other}"))
        expect = _expect(new, doc.data, cdi_devices_gone=devices if new_spec is None else ())
        record: dict[str, Any] | None = {} if not ctx.dry_run and rec else None
        return engine.plan(
            doc, new, new_bytes, changes, "uninstall CDI mode", expect, record,
            journal_before_write=False, extras=extras, journal_file=journal,
        )

    res = _run(engine, "uninstall", attempt, run)
    restart_needed = decided["restart"] and cdi_daemon.action != "restart" and not run.dry_run
    return CdiOutcome(res, str(decided["path"]), decided["devices"], facts.version,
                      restart_needed)


_DEVICE_NAME = re.compile(r'^\s*- name: "([^"]+)"', re.M)


def devices_of(spec: bytes | None) -> tuple[str, ...]:
    """Qualified device names of a spec this package wrote (its YAML puts names as JSON)."""
    if spec is None:
        return ()
    return tuple(f"{KIND}={n}" for n in _DEVICE_NAME.findall(spec.decode("utf-8", "replace")))


def spec_is_current(path: Path, runtime_path: str) -> tuple[bool | None, str]:
    """For doctor: (whether the spec on disk is what the GPUs present give, why)."""
    old = read_optional(path)
    if old is None:
        return None, f"no CDI spec at {path}"
    spec = build_spec(path, runtime_path)
    if spec.data == old:
        return True, f"{path} lists {', '.join(spec.devices)}"
    have, now = set(devices_of(old)), set(spec.devices)
    diff = []
    if have - now:
        diff.append("lists " + ", ".join(sorted(have - now)) + " no longer present")
    if now - have:
        diff.append("lacks " + ", ".join(sorted(now - have)))
    detail = f" ({'; '.join(diff)})" if diff else ""
    return False, f"{path} differs from the GPUs present{detail}"
