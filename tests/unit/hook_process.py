"""The hook started as runc starts it, for tests: a bundle in a temporary directory, a
config.toml naming the TEST FIXTURE nvidia-container-cli (tests/fixtures), which records the
arguments it was given. The child gets a clean environment, as under runc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE_CLI = Path(__file__).parent.parent / "fixtures" / "nvidia-container-cli"
PROG = "nvidia-container-runtime-hook"


class HookProcess:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = root / "record"
        self.record.mkdir()
        self.cli = root / "cli" / "nvidia-container-cli"
        self.cli.parent.mkdir()
        shutil.copy(FIXTURE_CLI, self.cli)
        self.bundle = root / "bundle"
        (self.bundle / "rootfs").mkdir(parents=True)
        self.config = root / "config.toml"

    def spec(self, env, mounts=None, privileged=True) -> dict:
        process = {"args": ["sh"], "env": env}
        if privileged:
            process["capabilities"] = {"bounding": ["CAP_SYS_ADMIN"]}
        spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": process}
        if mounts is not None:
            spec["mounts"] = mounts
        return spec

    def prestart(self, spec: dict, accept_volume_mounts: bool = False):
        """(the finished process, the cli's arguments after its path or None if not run)."""
        self.config.write_text(
            "accept-nvidia-visible-devices-as-volume-mounts = "
            f"{str(accept_volume_mounts).lower()}\n"
            f'[nvidia-container-cli]\npath = "{self.cli}"\n'
            f'environment = ["FIXTURE_RECORD_DIR={self.record}"]\n')
        (self.bundle / "config.json").write_text(json.dumps(spec))
        state = {"ociVersion": "1.0.2", "id": "ctr", "status": "creating",
                 "pid": os.getpid(), "bundle": str(self.bundle)}
        argv = self.record / "argv"
        if argv.exists():
            argv.unlink()
        proc = subprocess.run(
            [sys.executable, "-m", "nvdocker2.hook", "--config", str(self.config), "prestart"],
            input=json.dumps(state), capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ["PATH"]}, check=False)
        return proc, (argv.read_text().splitlines()[1:] if argv.exists() else None)


class Hook(HookProcess):
    """The hook as runc runs it, with a config.toml naming the fixture cli and its record
    directory: `write_spec`, `run`, then what the cli `recorded`."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.config.write_text(
            f'[nvidia-container-cli]\npath = "{self.cli}"\n'
            f'environment = ["FIXTURE_RECORD_DIR={self.record}"]\n')

    def write_spec(self, env, root_path="rootfs", **extra):
        spec = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": env},
                "root": {"path": root_path}, **extra}
        (self.bundle / "config.json").write_text(json.dumps(spec))

    def state(self, **changes):
        state = {"ociVersion": "1.0.2", "id": "ctr", "status": "creating",
                 "pid": os.getpid(), "bundle": str(self.bundle)}
        state.update(changes)
        return json.dumps(state)

    def run(self, *args, stdin=None, env=None, config=True):
        argv = [sys.executable, "-m", "nvdocker2.hook"]
        if config:
            argv += ["--config", str(self.config)]
        argv += list(args or ["prestart"])
        return subprocess.run(argv, input=self.state() if stdin is None else stdin,
                              capture_output=True, text=True, timeout=60,
                              env=env if env is not None else {"PATH": os.environ["PATH"]})

    def recorded(self, name):
        f = self.record / name
        return f.read_text() if f.exists() else None
