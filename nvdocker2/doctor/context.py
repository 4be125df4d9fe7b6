"""The host facts every engine's checks look at, gathered once: the driver, the toolkit's
programs and config.toml, the file system under a (test) root.

A `Context` holds the injected boundaries (the host root, the command runner) and computes each
fact at most once, on first use, safe to share between threads: `prefetch` starts the slow ones
(external commands) concurrently so the whole run stays within about a second on a healthy
host. An engine's facts (Docker's: nvdocker2.engines.docker.doctor.facts) extend it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from nvdocker2.doctor.host import SYSTEM_PATH, CommandResult, HostRoot, Runner, run_command
from nvdocker2.doctor.model import Facts
from nvdocker2.doctor.toolkit_files import ToolkitFile, program_version, read_toolkit_config

__all__ = ["CLI_EXE", "HOOK_EXE", "RUNTIME_EXE", "RUNTIME_NAME", "Context", "CommandResult",
           "program_version", "run_command"]

RUNTIME_NAME = "nvidia"
RUNTIME_EXE = "nvidia-container-runtime"
HOOK_EXE = "nvidia-container-runtime-hook"
CLI_EXE = "nvidia-container-cli"

# Each external command gets this long.
COMMAND_TIMEOUT = 1.5


@dataclass
class Context(Facts):
    """The doctor's view of one host. Tests build it over a tmp root with fakes at the edges."""

    root: HostRoot = field(default_factory=HostRoot)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    uid: int = field(default_factory=os.getuid)
    runner: Runner = run_command
    bin_dir: PurePosixPath = field(default_factory=lambda: _own_bin_dir())

    def __post_init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def slow_facts(self) -> list[Callable[[], Any]]:
        """The facts `prefetch` starts in the background."""
        return [self.cli_version, self.cli_info, self.nvidia_smi, self.runtime_version,
                self.hook_version, self.low_level_runtime]

    def prefetch(self) -> None:
        """Start the slow facts in the background; checks then find them ready."""
        if self._pool is not None:
            return
        self._pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="doctor")
        for fetch in self.slow_facts():
            self._pool.submit(fetch)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def run(
        self,
        argv: list[str],
        timeout: float = COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a command through the injected runner, memoised by its argv."""
        return self.fact("cmd:" + "\0".join(argv), lambda: self.runner(argv, timeout, env))

    # -- what the engine in question decides (an engine's facts say more) --------------------

    def rootless(self) -> bool:
        """True when the engine in question runs rootless (Docker's facts say when)."""
        return False

    def cdi_only(self) -> bool:
        """True when the engine gives containers GPUs by CDI alone, with no nvidia runtime."""
        return False

    def cgroup_driver(self) -> str | None:
        """The engine's cgroup driver, when it reports one."""
        return None

    def command(self, args: str) -> str:
        """`nvdocker2 ARGS`, as a hint names it."""
        return f"nvdocker2 {args}"

    def search_path(self) -> tuple[str, str]:
        """The PATH the engine (and so the runtime it starts) sees, and where it came from."""
        return SYSTEM_PATH, "the standard system PATH"

    def runtime_path(self) -> tuple[Path | None, str]:
        """The nvidia-container-runtime the engine would run (real path), and where found."""
        return self.fact("runtime_path", lambda: self._beside_or_on_path(RUNTIME_EXE))

    # -- the programs of the stack --------------------------------------------------------

    def toolkit_config(self) -> ToolkitFile:
        return self.fact("toolkit_config", lambda: read_toolkit_config(self))

    def is_wsl(self) -> bool:
        return self.root.is_char_device("/dev/dxg") is not None

    def hook_path(self) -> tuple[Path | None, str]:
        def compute() -> tuple[Path | None, str]:
            path = self.toolkit_config().config.hook.path
            if path:
                return self.root.which(
                    path, None
                ), "config.toml [nvidia-container-runtime-hook] path"
            runtime, _ = self.runtime_path()
            if runtime is not None and (runtime.parent / HOOK_EXE).exists():
                found = self.root.which(self.root.show(runtime.parent / HOOK_EXE), None)
                return found, "beside nvidia-container-runtime"
            return self._beside_or_on_path(HOOK_EXE)

        return self.fact("hook_path", compute)

    def cli_path(self) -> tuple[Path | None, str]:
        def compute() -> tuple[Path | None, str]:
            path = self.toolkit_config().config.cli.path
            if path:
                return self.root.which(path, None), "config.toml [nvidia-container-cli] path"
            return self.root.which(CLI_EXE, SYSTEM_PATH), "the standard system PATH"

        return self.fact("cli_path", compute)

    def _beside_or_on_path(self, exe: str) -> tuple[Path | None, str]:
        beside = self.root.which(str(self.bin_dir / exe), None)
        if beside is not None:
            return beside, "installed beside nvdocker2"
        search, where = self.search_path()
        return self.root.which(exe, search), where

    def runtime_version(self) -> tuple[str | None, str]:
        return self.fact("runtime_version", lambda: program_version(self, self.runtime_path()[0]))

    def hook_version(self) -> tuple[str | None, str]:
        return self.fact("hook_version", lambda: program_version(self, self.hook_path()[0]))

    def cli_version(self) -> CommandResult | None:
        path = self.cli_path()[0]
        return None if path is None else self.run([str(path), "--version"])

    def cli_info(self) -> CommandResult | None:
        path = self.cli_path()[0]
        return None if path is None else self.run([str(path), "info"])

    def nvidia_smi(self) -> CommandResult | None:
        path = self.root.which("nvidia-smi", SYSTEM_PATH)
        if path is None:
            return None
        return self.run(
            [str(path), "--query-gpu=index,name,driver_version,uuid", "--format=csv,noheader"]
        )

    def low_level_runtime(self) -> tuple[Path | None, str, CommandResult | None]:
        """The low-level runtime the shim would exec (first of config.toml's list found)."""

        def compute() -> tuple[Path | None, str, CommandResult | None]:
            search, where = self.search_path()
            for name in self.toolkit_config().config.runtime.runtimes:
                found = self.root.which(name, search)
                if found is not None:
                    return found, where, self.run([str(found), "--version"])
            return None, where, None

        return self.fact("low_level", compute)


def _own_bin_dir() -> PurePosixPath:
    """Where this nvdocker2's executables are installed (the runtime's directory)."""
    from nvdocker2 import locations

    return PurePosixPath(os.path.dirname(locations.default_runtime_path()[0]))
