"""doctor's checks for containerd and CRI-O (SPEC §5, §11): the same `CheckResult`s and
renderers as Docker's, plus this host's driver checks."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from nvdocker2.host import run as door
from nvdocker2.host.run import safe_which
from nvdocker2.doctor.registry import CheckResult, Outcome, fail, ok, skip, warn
from nvdocker2.errors import NvDockerError


def _exe_ok(path: object) -> bool:
    return isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK)


def containerd_checks(config: Path, address: str, unit: str, runtime: str = "nvidia"
                      ) -> list[tuple[str, str, Callable[[], Outcome]]]:
    from nvdocker2.engines import commands
    from nvdocker2.engines.containerd import ContainerdEngine, service

    state: dict = {}

    def binary() -> Outcome:
        exe = service.binary()
        if not exe:
            return fail("containerd is not on PATH", "install containerd (apt install containerd)")
        state["exe"] = exe
        return ok(f"{exe}, major version {service.major_version(exe)}")

    def cfg() -> Outcome:
        try:
            st = commands.status(ContainerdEngine(config, check=False), runtime)
        except NvDockerError as e:
            return fail(e.message, e.hint or "fix the file")
        state["status"] = st
        return ok(f"{config}: config version {st['version']}, changes go {st['layout']}")

    def rt() -> Outcome:
        st = state.get("status")
        if st is None:
            return skip("skipped: the config did not parse")
        path = st["runtimes"].get(runtime)
        if path is None:
            return fail(f'no runtime "{runtime}" in the CRI plugin\'s runtimes',
                        "run: nvdocker2 install --engine containerd")
        if not _exe_ok(path):
            return fail(f'runtime "{runtime}" has BinaryName {path!r}, not an executable file',
                        "reinstall the package, or nvdocker2 install --engine containerd "
                        "--runtime-path PATH")
        return ok(f'runtime "{runtime}" → {path}; default runtime {st["default_runtime"]}')

    def dump() -> Outcome:
        exe = state.get("exe")
        if not exe:
            return skip("skipped: no containerd binary")
        if runtime not in (state.get("status") or {}).get("runtimes", {}):
            return skip("skipped: the runtime is not in the config files")
        try:
            d = service.dump_current(exe, config)
        except NvDockerError as e:
            return fail(e.message, e.hint or "")
        cri = service.dump_cri(d)
        r = service._get(d, cri + ("runtimes", runtime))
        if not isinstance(r, dict):
            return fail(f'containerd config dump has no runtime "{runtime}" (an import '
                        "replaces the CRI section?)", "check imports; containerd ≤ 1.7 replaces "
                        "whole plugin sections")
        return ok(f"containerd config dump: {runtime} runs {service._get(r, ('options', 'BinaryName'))}")

    def running() -> Outcome:
        if not service._ctr_alive(address):
            return warn(f"containerd does not answer on {address}",
                        f"systemctl start {unit}, or pass --containerd-address")
        svc = service.SystemdContainerd(unit, address)
        svc._since = 0
        st = svc._cri_state()
        if st is None:
            return warn("containerd is running; its CRI plugin's configuration was not seen "
                        "(no crictl, nothing in the journal)", "install crictl (cri-tools)")
        if runtime not in st[0]:
            return fail(f'the running containerd\'s CRI plugin has no runtime "{runtime}"',
                        f"systemctl restart {unit} (containerd has no reload)")
        return ok(f"running containerd's CRI plugin has {runtime} → {st[0][runtime]}")

    return [("containerd-binary", "containerd installed", binary),
            ("containerd-config", "config.toml parses", cfg),
            ("containerd-runtime", "nvidia runtime in config", rt),
            ("containerd-effective", "effective config (config dump)", dump),
            ("containerd-running", "running containerd reports it", running)]


def crio_checks(dropin: Path, runtime: str = "nvidia"):
    from nvdocker2.engines.containerd.document import tomllib
    from nvdocker2.engines.crio import MARK

    def drop() -> Outcome:
        try:
            text = dropin.read_text()
        except FileNotFoundError:
            return fail(f"{dropin} does not exist", "run: nvdocker2 install --engine crio")
        except (OSError, UnicodeDecodeError) as e:
            return fail(f"{dropin}: {e}", "check the file")
        if not text.startswith(MARK):
            return warn(f"{dropin} was not written by nvdocker2", "compare it with what "
                        "nvdocker2 install --engine crio --dry-run would write")
        try:
            rts = tomllib.loads(text)["crio"]["runtime"]["runtimes"]
        except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
            return fail(f"{dropin}: {e}", "reinstall: nvdocker2 install --engine crio")
        path = (rts.get(runtime) or {}).get("runtime_path")
        if not _exe_ok(path):
            return fail(f"{dropin}: runtime_path {path!r} is not an executable file",
                        "reinstall the package")
        return ok(f"{dropin}: {runtime} → {path}")

    def binary() -> Outcome:
        exe = safe_which("crio")
        if not exe:
            return warn("no crio on PATH that is safe to run (owned by root, in directories no "
                        "other user can write)", "install CRI-O, or ignore on a host without it")
        try:
            p = door.run([exe, "status", "config"], timeout=15, text=True)
        except OSError as e:
            return warn(f"crio status failed: {e}", "systemctl status crio")
        if p.returncode != 0 or f"runtimes.{runtime}]" not in p.stdout:
            return fail(f"the running CRI-O does not report runtime {runtime}",
                        "systemctl restart crio")
        return ok(f"the running CRI-O reports runtime {runtime}")

    return [("crio-dropin", "CRI-O drop-in", drop), ("crio-running", "running CRI-O", binary)]


def run(engine: str, config: Path | None, address: str | None, unit: str | None,
        as_json: bool, verbose: bool = False) -> int:
    from nvdocker2.doctor.registry import FAIL
    from nvdocker2.doctor.render import render

    if engine == "containerd":
        from nvdocker2.engines.containerd import DEFAULT_CONFIG
        from nvdocker2.engines.containerd.service import DEFAULT_ADDRESS, DEFAULT_UNIT

        checks = containerd_checks(config or DEFAULT_CONFIG, address or DEFAULT_ADDRESS,
                                   unit or DEFAULT_UNIT)
    else:
        from nvdocker2.engines.crio import DEFAULT_DROPIN

        checks = crio_checks(config or DEFAULT_DROPIN)
    results = []
    for cid, title, fn in checks:
        o = fn()
        results.append(CheckResult(cid, title, o.status, o.detail, o.hint))
    render(results, sys.stdout, as_json, verbose)
    return 1 if any(r.status == FAIL for r in results) else 0
