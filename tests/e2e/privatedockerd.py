"""A private dockerd for end-to-end tests, benchmarks and the demo.

Each daemon lives in its own temp dir: its own --config-file, --data-root, --exec-root,
--pidfile and unix socket, vfs storage, no iptables and no bridge, so the host's Docker is never
touched. It is stopped by the pid it wrote, after checking that pid is this daemon.
An image made with `docker import` from busybox-static is loaded into every daemon.

The command line and environment are kept in ROOT/dockerd.json so that a stand-in
`systemctl` (tests/fixtures) can restart the same daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

IMAGE = "nvd2-busybox:latest"
BUSYBOX = "/bin/busybox"
REQUIRED = ("dockerd", "containerd", "runc", "docker")

_rootfs_tar: Path | None = None


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a private dockerd (empty when it can)."""
    missing = [f"{tool} (on PATH)" for tool in REQUIRED if shutil.which(tool) is None]
    if not os.path.exists(BUSYBOX):
        missing.append(f"{BUSYBOX} (Debian package busybox-static)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def remove_rootfs_tar() -> None:
    """Delete the cached rootfs tar (end of a test session)."""
    global _rootfs_tar
    if _rootfs_tar is not None:
        shutil.rmtree(_rootfs_tar.parent, ignore_errors=True)
        _rootfs_tar = None


def busybox_rootfs_tar() -> Path:
    """A tar of a tiny rootfs: busybox-static with every applet linked in /bin."""
    global _rootfs_tar
    if _rootfs_tar is not None and _rootfs_tar.exists():
        return _rootfs_tar
    workdir = Path(tempfile.mkdtemp(prefix="nvd2-rootfs-"))
    root = workdir / "rootfs"
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "usr/lib", "lib"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    applets = subprocess.run(
        [BUSYBOX, "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    tar_path = workdir / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for entry in sorted(root.iterdir()):
            tar.add(entry, arcname=entry.name)
    _rootfs_tar = tar_path
    return tar_path


class PrivateDockerd:
    """One dockerd started by us, with everything under `root`."""

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        config: bytes = b"{}\n",
        env: Mapping[str, str] | None = None,
        path_prepend: Sequence[str | os.PathLike] = (),
    ) -> None:
        # Short paths: containerd's socket lives under the exec root and unix socket paths
        # are limited to 108 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="nvd2-", dir="/tmp"))
        self.config_file = self.root / "daemon.json"
        self.socket = self.root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.pidfile = self.root / "docker.pid"
        self.log_file = self.root / "dockerd.log"
        self.data_root = self.root / "data"
        self.exec_root = self.root / "exec"
        self.image = IMAGE
        self.initial_config = config
        self.config_file.write_bytes(config)
        self.extra_args = list(extra_args)
        base_env = dict(os.environ if env is None else env)
        base_env.pop("DOCKER_HOST", None)
        if path_prepend:
            base_env["PATH"] = os.pathsep.join(
                [str(p) for p in path_prepend] + [base_env.get("PATH", os.defpath)]
            )
        self.env = base_env
        self._proc: subprocess.Popen | None = None

    # -- life cycle -------------------------------------------------------------------------

    def argv(self, extra_args: Sequence[str] | None = None) -> list[str]:
        extra = self.extra_args if extra_args is None else list(extra_args)
        return [
            shutil.which("dockerd") or "dockerd",
            f"--config-file={self.config_file}",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--host={self.host}",
            "--storage-driver=vfs",
            "--iptables=false",
            "--bridge=none",
            *extra,
        ]

    def start(self, extra_args: Sequence[str] | None = None, timeout: float = 60) -> None:
        if extra_args is not None:
            self.extra_args = list(extra_args)
        argv = self.argv()
        (self.root / "dockerd.json").write_text(
            json.dumps({"argv": argv, "env": self.env, "log": str(self.log_file)})
        )
        log = open(self.log_file, "ab")
        try:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            log.close()
        self.wait_ready(timeout)
        if self.image_id() is None:
            self.docker("import", str(busybox_rootfs_tar()), self.image)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"private dockerd exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            if self.socket.exists():
                probe = self.docker("version", "--format", "{{.Server.Version}}", check=False,
                                    timeout=10)
                if probe.returncode == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"private dockerd not ready after {timeout}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        return int(self.pidfile.read_text().strip())

    def is_ours(self, pid: int) -> bool:
        """True when `pid` is a dockerd using this daemon's exec root."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return (
            bool(cmdline)
            and os.path.basename(cmdline[0]) == b"dockerd"
            and f"--exec-root={self.exec_root}".encode() in cmdline
        )

    def running(self) -> bool:
        try:
            return self.is_ours(self.pid)
        except (OSError, ValueError):
            return False

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM our dockerd (SIGKILL after `timeout`) and its containerd, by pid."""
        pids = []
        try:
            pid = self.pid
            if self.is_ours(pid):
                pids.append(pid)
        except (OSError, ValueError):
            pass
        if self._proc is not None and self._proc.poll() is None and self._proc.pid not in pids:
            pids.append(self._proc.pid)
        containerd_pid = self._containerd_pid()
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                self._reap(pid)
                time.sleep(0.05)
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
            self._reap(pid)
        if containerd_pid is not None and _alive(containerd_pid):
            _signal(containerd_pid, signal.SIGKILL)
        self._proc = None

    def restart(self, extra_args: Sequence[str] | None = None) -> None:
        self.stop()
        self.start(extra_args)

    def __enter__(self) -> PrivateDockerd:
        """`with PrivateDockerd(...) as daemon:` starts it, and cleans up even when the start
        fails."""
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """Stop the daemon, remove its containers first, unmount what it left, delete root."""
        if self.running():
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
        self.stop()
        for mount_point in reversed(_mounts_under(self.root)):
            subprocess.run(["umount", "-l", mount_point], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _containerd_pid(self) -> int | None:
        try:
            return int((self.exec_root / "containerd/containerd.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _reap(self, pid: int) -> None:
        if self._proc is not None and self._proc.pid == pid:
            self._proc.poll()

    # -- talking to it ----------------------------------------------------------------------

    def docker(
        self, *args: str, check: bool = True, timeout: float = 60, input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        proc_env = dict(os.environ if env is None else env)
        proc_env["DOCKER_HOST"] = self.host
        proc = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout,
            input=input, env=proc_env,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def info(self) -> dict:
        """What the Engine API's /info reports (through `docker info`)."""
        out = self.docker("info", "--format", "{{json .}}", timeout=30).stdout
        return json.loads(out)

    def image_id(self) -> str | None:
        proc = self.docker("image", "inspect", "--format", "{{.Id}}", self.image, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def sighup(self) -> None:
        os.kill(self.pid, signal.SIGHUP)

    def wait_info(self, predicate: Callable[[dict], bool], timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        info = self.info()
        while not predicate(info):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"dockerd did not reach the expected state in {timeout}s: "
                    f"Runtimes={sorted(info.get('Runtimes', {}))} "
                    f"DefaultRuntime={info.get('DefaultRuntime')}\n{self.log_tail()}"
                )
            time.sleep(0.1)
            info = self.info()
        return info

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no dockerd log)"

    def reset(self, base_args: Sequence[str] = ()) -> None:
        """Back to a fresh state between tests: running with `base_args`, no containers, no
        runtimes but the built-in ones, default runc, config file back to its first bytes."""
        if not self.running() or self.extra_args != list(base_args):
            self.stop()
            self.config_file.write_bytes(self.initial_config)
            self.start(list(base_args))
        ids = self.docker("ps", "-aq").stdout.split()
        if ids:
            self.docker("rm", "-f", *ids)
        info = self.info()
        if set(info.get("Runtimes", {})) - BUILTIN_RUNTIMES or info.get("DefaultRuntime") != "runc":
            # A reload replaces runtimes/default only when the keys are present (reference §2).
            self.config_file.write_text('{"runtimes": {}, "default-runtime": "runc"}\n')
            self.sighup()
            self.wait_info(
                lambda i: not set(i.get("Runtimes", {})) - BUILTIN_RUNTIMES
                and i.get("DefaultRuntime") == "runc"
            )
        self.config_file.write_bytes(self.initial_config)


BUILTIN_RUNTIMES = {"runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
    return points
