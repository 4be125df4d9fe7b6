"""Fixtures for fault injection: small tmpfs mounts and read-only bind mounts under tmp_path,
always unmounted afterwards. They need root with mount rights (the CI machine has them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"


def _need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"prerequisite missing under CI: {why}")
        pytest.skip(why)


@pytest.fixture
def mounts() -> Iterator[Callable[..., Path]]:
    """`mount(kind, path, **opts)`: kind "tmpfs" (size=BYTES) or "ro-bind" (src=Path)."""
    done: list[Path] = []
    _need(os.geteuid() == 0, "needs root to mount")

    def mount(kind: str, path: Path, size: int = 65536, src: Path | None = None) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if kind == "tmpfs":
            cmd = [["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)]]
        else:
            cmd = [
                ["mount", "--bind", str(src), str(path)],
                ["mount", "-o", "remount,bind,ro", str(path)],
            ]
        for c in cmd:
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0 and c is cmd[0]:
                _need(False, f"cannot mount: {r.stderr.strip()}")
            if c is cmd[0]:
                done.append(path)
            assert r.returncode == 0, r.stderr
        return path

    yield mount
    for p in reversed(done):
        subprocess.run(["umount", "-l", str(p)], capture_output=True)


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(NVDOCKER2), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def fill(path: Path) -> None:
    """Fill the file system holding `path` until it has no space left."""
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    # A tmpfs may still have room in a partly used page; take that too.
    i = 0
    while True:
        try:
            (path / f"f{i}").write_bytes(b"x")
            i += 1
        except OSError:
            break
