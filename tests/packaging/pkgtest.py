"""Helpers of the packaging tests: where the chroot comes from and how to run things in it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nvdocker2 import __version__

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("NVDOCKER2_TEST_CACHE", "/var/cache/nvdocker2-tests"))
MIRROR = os.environ.get("NVDOCKER2_TEST_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
# Part of the cache key: change it when bootstrap() changes what goes into the tarball.
RECIPE = "2"
# The package's Depends, so that `apt-get install ./x.deb` needs no network.
INCLUDE = [
    "python3",
    "python3-typer",
    "python3-rich",
    "python3-jsonschema",
    "python3-filelock",
    "python3-packaging",
    "python3-tomlkit",
    "python3-yaml",
]
UPGRADE_VERSION = f"{__version__}+pkgtest1"
CHROOT_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}
APT = "apt-get -y -q -o Dpkg::Use-Pty=0"

RUNTIME = "/usr/bin/nvidia-container-runtime"
OUR_CLI = "/usr/libexec/nvdocker2/nvidia-container-cli"  # never /usr/bin's, NVIDIA's
PROGRAMS = [
    "nvdocker2",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-docker",
]

# A hand-written daemon.json: each value below must survive install byte for byte (odd
# spacing inside a value, an integer past 2**53, non-ASCII text, a multi-line list).
USER_SNIPPETS = [
    '"data-root": "/srv/docker"',
    '"log-driver": "json-file"',
    '"log-opts": { "max-size": "10m",  "max-file": "3" }',
    '"labels": ["owner=Zoë", "rack=β-7"]',
    '"max-concurrent-downloads": 9007199254740993',
    '"shutdown-timeout": 15',
    '"registry-mirrors": [\n        "https://mirror.example.org"\n    ]',
]
USER_DAEMON_JSON = ("{\n    " + ",\n    ".join(USER_SNIPPETS) + "\n}\n").encode()


def runtimes(raw: bytes) -> dict:
    return json.loads(raw).get("runtimes", {})


def backups(chroot) -> list[str]:
    """The backup ids `nvdocker2 backups` lists inside the chroot."""
    listing = json.loads(chroot.ok("nvdocker2 backups --json 2>/dev/null"))
    return [backup["id"] for backup in listing["backups"]]


def script_lines(output: str) -> list[str]:
    """What the maintainer scripts said about Docker (their lines start with "nvdocker2")."""
    return [line for line in output.splitlines() if line.startswith("nvdocker2")]


def installed_line(backup_id: str) -> str:
    return ("nvdocker2: installed the nvidia runtime in /etc/docker/daemon.json "
            f"(backup {backup_id}: /var/lib/nvdocker2/backups/{backup_id}.json)")


# The removal's backup is gone with the purge that made it: its id is read from the line.
REMOVED_LINE = re.compile(r"nvdocker2: removed the nvidia runtime from /etc/docker/daemon\.json "
                          r"\(backup (\S+): /var/lib/nvdocker2/backups/\1\.json\)")


ALREADY_LINE = ("nvdocker2: the nvidia runtime is already in /etc/docker/daemon.json: "
                "nothing changed")
NOT_RELOADED_LINE = (
    "nvdocker2: dockerd was not reloaded (not running, or not allowed here): it uses the nvidia "
    "runtime once it starts; if it is running, run: systemctl reload docker "
    "(or: kill -HUP $(cat /var/run/docker.pid)), then: nvdocker2 status")
REMOVED_NOT_RELOADED_LINE = (
    "nvdocker2: dockerd was not reloaded (not running, or not allowed here): if it is running, "
    "run: systemctl reload docker (or: kill -HUP $(cat /var/run/docker.pid))")


def missing(reason: str) -> None:
    """Skip for a developer without the prerequisites; under CI a missing prerequisite fails."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"packaging test prerequisite missing under CI: {reason}")
    pytest.skip(reason)


def run(cmd: list[str], timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command on this machine (text, output captured, no check)."""
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def ensure_tool(command: str, package: str) -> None:
    """Install a missing Debian tool the tests need (CI starts from a fresh machine)."""
    if shutil.which(command):
        return
    proc = run(["apt-get", "install", "-y", "-q", "--no-install-recommends", package])
    if proc.returncode != 0 or not shutil.which(command):
        missing(f"{command} not found and `apt-get install {package}` failed: {proc.stderr[-500:]}")


def bootstrap(tarball: Path) -> None:
    """debootstrap the chroot once and store it as an uncompressed tarball (fast to unpack)."""
    ensure_tool("debootstrap", "debootstrap")
    work = Path(f"{tarball}.work")
    shutil.rmtree(work, ignore_errors=True)
    root = work / "root"
    proc = run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(INCLUDE)}",
            SUITE,
            str(root),
            MIRROR,
        ],
        timeout=1200,
    )
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        missing(f"debootstrap {SUITE} from {MIRROR} failed: {(proc.stdout + proc.stderr)[-800:]}")
    # Downloaded .debs, package lists, documentation and translations: not needed to install
    # a local .deb, and a quarter of the tree.
    for junk in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/locale",
        "usr/share/man",
        "usr/share/info",
    ):
        for entry in (root / junk).glob("*"):
            if entry.name == "partial":  # apt wants these directories
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    partial = Path(f"{tarball}.partial")
    subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
    os.replace(partial, tarball)
    shutil.rmtree(work, ignore_errors=True)


class Chroot:
    """A fresh bookworm root in a temporary directory; `sh` runs a shell command inside it
    with a clean environment (the tests' own NVDOCKER2_STATE_DIR etc. do not leak in)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def sh(self, command: str, env: dict | None = None, timeout: int = 300):
        return run(
            ["chroot", str(self.root), "/bin/sh", "-c", command],
            env={**CHROOT_ENV, **(env or {})},
            timeout=timeout,
        )

    def host(self, cmd: list[str]) -> subprocess.CompletedProcess:
        """A command of this machine acting on the chroot (rpm --root) with the same clean
        environment, so scriptlets run inside see none of the tests' variables."""
        return run(cmd, env=dict(CHROOT_ENV))

    def ok(self, command: str, env: dict | None = None) -> str:
        """Run, assert exit 0, return stdout and stderr together (what apt shows)."""
        proc = self.sh(command, env)
        assert proc.returncode == 0, (
            f"{command!r} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
        return proc.stdout + proc.stderr

    def put(self, file: Path) -> str:
        """Copy a file into the chroot's /tmp, returning its path inside."""
        shutil.copy(file, self.path("/tmp"))
        return f"/tmp/{file.name}"


def check_launchers(chroot) -> None:
    """What the installed runtime and hook launchers do for a user (both packages ship them):
    the runtime passes every step but `create` straight to runc with no Python at all, the hook
    ignores the PYTHONPATH dockerd hands it under --gpus, and doctor reads both versions."""
    runtime = chroot.path(RUNTIME).read_text()
    assert runtime.startswith("#!/bin/sh\n"), runtime[:80]
    # A stand-in runc first on PATH records its argv; the chroot's python3 is moved away while
    # `state` runs, so the pass-through works only if no Python starts.
    chroot.path("/tmp/fakebin").mkdir()
    runc = chroot.path("/tmp/fakebin/runc")
    runc.write_text('#!/bin/sh\necho "$0 $*" > /tmp/runc-argv\nexit 7\n')
    runc.chmod(0o755)
    python = chroot.path("/usr/bin/python3").resolve()
    hidden = python.with_name(python.name + ".hidden")
    python.rename(hidden)
    try:
        state = chroot.sh(f"PATH=/tmp/fakebin:$PATH {RUNTIME} state x")
    finally:
        hidden.rename(python)
    assert state.returncode == 7, state.stdout + state.stderr
    assert chroot.path("/tmp/runc-argv").read_text() == "/tmp/fakebin/runc state x\n"

    hook = "/usr/bin/nvidia-container-runtime-hook"
    assert chroot.path(hook).read_text().startswith("#!/usr/bin/python3 -IS\n")
    # dockerd's environment with a PYTHONPATH that shadows the package with an empty one.
    chroot.path("/tmp/shadow/nvdocker2/hook").mkdir(parents=True)
    chroot.path("/tmp/shadow/nvdocker2/__init__.py").write_text("")
    chroot.path("/tmp/shadow/nvdocker2/hook/__init__.py").write_text("")
    env = {"PYTHONPATH": "/tmp/shadow", "PYTHONHOME": "/nonexistent"}
    assert chroot.sh(f"{hook} poststart </dev/null", env).returncode == 0
    bad = chroot.sh(f"echo '{{not json' | {hook} prestart", env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-runtime-hook: error: "), (
        bad.stderr
    )
    assert "Traceback" not in bad.stderr and "ImportError" not in bad.stderr
    # The same shadowing PYTHONPATH leaves nvdocker2 itself (python3 -I) working.
    assert chroot.sh("nvdocker2 --version", env).returncode == 0

    # Our nvidia-container-cli: a sh launcher in libexec running python3 -I -S, deaf to the
    # same PYTHONPATH, and no nvidia-container-cli in /usr/bin (libnvidia-container-tools').
    assert chroot.path(OUR_CLI).read_text().startswith("#!/bin/sh\n")
    version = chroot.sh(f"{OUR_CLI} --version", env)
    assert (version.returncode, version.stdout.splitlines()[:1]) == (
        0, [f"cli-version: {__version__}"]), version.stdout + version.stderr
    bad = chroot.sh(f"{OUR_CLI} --root=/nonexistent info", env)
    assert bad.returncode == 1 and bad.stderr.startswith(
        "nvidia-container-cli: initialization error: "), bad.stderr
    assert not chroot.path("/usr/bin/nvidia-container-cli").exists()

    doctor = chroot.sh("nvdocker2 doctor --json")
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    for name in ("runtime.installed", "hook.installed"):
        check = checks[name]
        assert check["status"] in ("ok", "warn"), check
        assert "unknown" not in check["detail"], check
        print(f"doctor {name}: {check['status']}: {check['detail']}")
        assert __version__ in check["detail"], check
