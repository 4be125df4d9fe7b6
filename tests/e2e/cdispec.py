"""A CDI spec for the fake driver, written as an operator writes it: `nvdocker2 cdi generate`
run as a process (the runtime's CDI mode e2e tests read it through `spec-dirs`), and
`nvdocker2` run as a process for the Podman tests' own commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def nvdocker2(*args: str, env=None) -> subprocess.CompletedProcess:
    """`nvdocker2 ARGS...` as a process, from the repository's top."""
    return subprocess.run([sys.executable, "-m", "nvdocker2", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=str(REPO))


def generate_spec(driver_root: Path, runtime: Path, output: Path) -> None:
    """Write the spec of the driver tree at `driver_root` to `output`; `runtime` is the
    nvidia-container-runtime its ld-cache hook names."""
    proc = subprocess.run(
        [sys.executable, "-m", "nvdocker2", "cdi", "generate", "--driver-root", str(driver_root),
         "--runtime-path", str(runtime), "--output", str(output)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
