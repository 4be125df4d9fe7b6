"""doctor's checks for containerd (reference §5, §11): the binary, config.toml, the nvidia runtime
in it, the effective configuration (config dump) and what the running containerd reports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from nvdocker2.doctor.registry import Outcome, fail, ok, skip, warn
from nvdocker2.errors import NvDockerError


def _exe_ok(path: object) -> bool:
    return isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK)


def containerd_checks(config: Path, address: str, unit: str, runtime: str = "nvidia"
                      ) -> list[tuple[str, str, Callable[[], Outcome]]]:
    from nvdocker2.engines.containerd import service
    from nvdocker2.engines.containerd.engine import ContainerdEngine
    from nvdocker2.engines.containerd.front import ContainerdFront

    state: dict = {}

    def binary() -> Outcome:
        exe = service.binary()
        if not exe:
            return fail("containerd is not on PATH", "install containerd (apt install containerd)")
        state["exe"] = exe
        return ok(f"{exe}, major version {service.major_version(exe)}")

    def cfg() -> Outcome:
        try:
            eng = ContainerdEngine(config, check=False)
            st = ContainerdFront().describe(eng, runtime)
        except NvDockerError as e:
            return fail(e.message, e.hint or "fix the file")
        state["status"], state["engine"] = st, eng
        return ok(f"{config}: config version {st['version']}, changes go {st['layout']}")

    def shadow() -> Outcome:
        from nvdocker2.engines.containerd import edit
        from nvdocker2.engines.transaction import read

        eng = state.get("engine")
        if eng is None:
            return skip("skipped: the config did not parse")
        try:
            root = eng.root(read)
            found = edit.shadowing(root, eng.imports(root, read, None),
                                   edit.layout(root, eng.major).deep_merge)
        except NvDockerError as e:
            return fail(e.message, e.hint or "fix the file")
        if not found:
            return ok(f"no import replaces {config}'s CRI section")
        names = ", ".join(map(str, found))
        detail = (f"{names} replace{'s' if len(found) == 1 else ''} {config}'s whole CRI "
                  f"section (containerd {eng.major or 1}.x takes a plugin section from the last "
                  f"file that has one): every CRI setting in {config}, and every later edit of "
                  "it, is ignored")
        if eng.found.legacy in found:
            return fail(detail, f"{eng.found.legacy} was written by an older nvdocker2: run "
                        "nvdocker2 install --engine containerd, which puts the runtime into "
                        f"{config} and removes that file")
        return warn(detail, f"keep the CRI settings in one file: move them from {names} into "
                    f"{config}, or all of them out of it")

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
        r = service.lookup(d, cri + ("runtimes", runtime))
        if not isinstance(r, dict):
            return fail(f'containerd config dump has no runtime "{runtime}" (an import '
                        "replaces the CRI section?)", "check imports; containerd ≤ 1.7 replaces "
                        "whole plugin sections")
        binary = service.lookup(r, ("options", "BinaryName"))
        return ok(f"containerd config dump: {runtime} runs {binary}")

    def running() -> Outcome:
        if not service.ctr_alive(address):
            return warn(f"containerd does not answer on {address}",
                        f"systemctl start {unit}, or pass --containerd-address")
        st = service.SystemdContainerd(unit, address).cri_state(since=0)
        if st is None:
            return warn("containerd is running; its CRI plugin's configuration was not seen "
                        "(no crictl, nothing in the journal)", "install crictl (cri-tools)")
        if runtime not in st[0]:
            return fail(f'the running containerd\'s CRI plugin has no runtime "{runtime}"',
                        f"systemctl restart {unit} (containerd has no reload)")
        return ok(f"running containerd's CRI plugin has {runtime} → {st[0][runtime]}")

    return [("containerd-binary", "containerd installed", binary),
            ("containerd-config", "config.toml parses", cfg),
            ("containerd-shadow", "no import hides config.toml's CRI section", shadow),
            ("containerd-runtime", "nvidia runtime in config", rt),
            ("containerd-effective", "effective config (config dump)", dump),
            ("containerd-running", "running containerd reports it", running)]
