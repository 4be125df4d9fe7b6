"""doctor's checks for containerd (reference §5, §11): the binary, config.toml, the nvidia runtime
in it, the effective configuration (config dump) and what the running containerd reports.

The checks read one `ContainerdFacts`; what one check needs from another is a dependency
(`needs`), so a config that does not parse skips the checks that read it and says so."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from nvdocker2.doctor.model import CheckPlan, Checks, Facts, Outcome, fail, ok, skip, warn
from nvdocker2.errors import NvDockerError

if TYPE_CHECKING:  # pragma: no cover
    from nvdocker2.engines.containerd.engine import ContainerdEngine

CHECKS = Checks()
check = CHECKS.check


def _exe_ok(path: object) -> bool:
    return isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK)


@dataclass
class ContainerdFacts(Facts):
    """What the containerd checks read, each computed once."""

    config: Path
    address: str
    unit: str
    # the front's: what the files say, for `status`
    describe: Callable[[ContainerdEngine, str], dict[str, Any]]
    runtime: str = "nvidia"

    def exe(self) -> str | None:
        """The containerd binary on PATH that is safe to run, or None."""
        from nvdocker2.engines.containerd import service

        return self.fact("exe", service.binary)

    def parsed(self) -> tuple[ContainerdEngine, dict[str, Any]]:
        """The engine over config.toml and what its files say (NvDockerError: they do not
        parse)."""

        def compute() -> tuple[ContainerdEngine, dict[str, Any]]:
            from nvdocker2.engines.containerd.engine import ContainerdEngine

            eng = ContainerdEngine(self.config, check=False)
            return eng, self.describe(eng, self.runtime)

        return self.fact("parsed", compute)


def containerd_checks(config: Path, address: str, unit: str,
                      describe: Callable[[ContainerdEngine, str], dict[str, Any]],
                      runtime: str = "nvidia"
                      ) -> CheckPlan:
    """containerd's checks against `config` and the containerd answering on `address`;
    `describe`: the front's reading of the files (`status`), which the checks report on."""
    return CheckPlan(ContainerdFacts(config, address, unit, describe, runtime), list(CHECKS))


@check("containerd-binary", "containerd installed")
def binary(f: ContainerdFacts) -> Outcome:
    from nvdocker2.engines.containerd import service

    exe = f.exe()
    if not exe:
        return fail("containerd is not on PATH", "install containerd (apt install containerd)")
    return ok(f"{exe}, major version {service.major_version(exe)}")


@check("containerd-config", "config.toml parses")
def cfg(f: ContainerdFacts) -> Outcome:
    try:
        _, st = f.parsed()
    except NvDockerError as e:
        return fail(e.message, e.hint or "fix the file")
    return ok(f"{f.config}: config version {st['version']}, changes go {st['layout']}")


@check("containerd-shadow", "no import hides config.toml's CRI section",
       needs=("containerd-config",))
def shadow(f: ContainerdFacts) -> Outcome:
    from nvdocker2.engines.containerd import edit
    from nvdocker2.engines.transaction import read

    eng, _ = f.parsed()
    config = f.config
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


@check("containerd-runtime", "nvidia runtime in config", needs=("containerd-config",))
def rt(f: ContainerdFacts) -> Outcome:
    _, st = f.parsed()
    runtime = f.runtime
    path = st["runtimes"].get(runtime)
    if path is None:
        return fail(f'no runtime "{runtime}" in the CRI plugin\'s runtimes',
                    "run: nvdocker2 install --engine containerd")
    if not _exe_ok(path):
        return fail(f'runtime "{runtime}" has BinaryName {path!r}, not an executable file',
                    "reinstall the package, or nvdocker2 install --engine containerd "
                    "--runtime-path PATH")
    return ok(f'runtime "{runtime}" → {path}; default runtime {st["default_runtime"]}')


@check("containerd-effective", "effective config (config dump)",
       needs=("containerd-binary", "containerd-config"))
def dump(f: ContainerdFacts) -> Outcome:
    from nvdocker2.engines.containerd import service

    runtime = f.runtime
    if runtime not in f.parsed()[1]["runtimes"]:
        return skip("skipped: the runtime is not in the config files")
    try:
        # needs containerd-binary: that check found the binary
        d = service.dump_current(cast(str, f.exe()), f.config)
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


@check("containerd-running", "running containerd reports it")
def running(f: ContainerdFacts) -> Outcome:
    from nvdocker2.engines.containerd import service

    runtime, address, unit = f.runtime, f.address, f.unit
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
