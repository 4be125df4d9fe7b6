"""A private rootful Podman for end-to-end tests of CDI specs (Podman reads /etc/cdi itself).

Everything Podman writes lives under one temp dir: its storage (graphroot, runroot), its
containers.conf (cgroupfs, runc, a file events log, the ulimits this VM needs), its tmp and
volume dirs. Podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi and, as root, keeps
a blob cache in /var/lib/containers, and runc keeps its state in /run/runc; so Podman runs
inside a mount namespace of our own (a holder process made by `unshare -m`, entered with
`nsenter -m`) in which /etc and /var/lib are overlays whose writes land in the temp dir and
/run is an empty tmpfs. The machine's /etc, /var/lib, /run and Podman storage are never
written. Stopping: `podman rm -af`, then SIGKILL to each process still in our
namespace (found by comparing /proc/PID/ns/mnt with the holder's), the holder last.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from privatedockerd import BUSYBOX, busybox_rootfs_tar

REQUIRED = ("podman", "runc", "unshare", "nsenter")

# What this VM needs of any Podman (rootless too): cgroupfs, runc, ulimits, a file event log.
ENGINE_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = "{root}/events.log"
"""
CONTAINERS_CONF = ENGINE_CONF + """\
tmp_dir = "{root}/tmp"
image_copy_tmp_dir = "{root}/tmp"
static_dir = "{root}/storage/libpod"
volume_path = "{root}/storage/volumes"
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""


def runtime_launcher(root: Path) -> str:
    """This checkout's nvidia-container-runtime launcher, written into ROOT/bin; its path."""
    from nvdocker2.runtime.launcher import write_launchers

    bindir = root / "bin"
    bindir.mkdir()
    write_launchers(str(bindir))
    return str(bindir / "nvidia-container-runtime")


def image_tar(base: Path, extra: Iterable[tuple[str, object]] = ()) -> bytes:
    """The rootfs tar `base` plus `extra` entries: (path, what), what is bytes (a file, 0644),
    ("symlink", target), ("dir",) or ("file", bytes, mode)."""
    buf = io.BytesIO()
    with tarfile.open(base) as rootfs, tarfile.open(fileobj=buf, mode="w") as out:
        for member in rootfs.getmembers():
            data = rootfs.extractfile(member) if member.isfile() else None
            out.addfile(member, data)
        for path, what in extra:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mtime = int(time.time())
            data = None
            if isinstance(what, bytes):
                what = ("file", what, 0o644)
            if what[0] == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = what[1]
            elif what[0] == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            else:
                info.size = len(what[1])
                info.mode = what[2]
                data = io.BytesIO(what[1])
            out.addfile(info, data)
    return buf.getvalue()


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a private Podman (empty when it can)."""
    missing = [f"{tool} (on PATH)" for tool in REQUIRED if shutil.which(tool) is None]
    if "podman (on PATH)" in missing:
        missing[missing.index("podman (on PATH)")] = "podman (Debian package podman)"
    if not os.path.exists(BUSYBOX):
        missing.append(f"{BUSYBOX} (Debian package busybox-static)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


class PrivatePodman:
    """Rootful Podman with all of its state under `root`, in a mount namespace of our own."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="nvd2-podman-"))
        self.holder: subprocess.Popen | None = None
        self.env = dict(os.environ)
        self.env.update(
            CONTAINERS_CONF=str(self.root / "containers.conf"),
            CONTAINERS_STORAGE_CONF=str(self.root / "storage.conf"),
        )

    def start(self) -> None:
        for d in ("tmp", "storage", "run"):
            self.host_path(self.root / d).mkdir(parents=True, exist_ok=True)
        self.host_path(self.root / "containers.conf").write_text(
            CONTAINERS_CONF.format(root=self.root))
        self.host_path(self.root / "storage.conf").write_text(
            STORAGE_CONF.format(root=self.root))
        self.holder = subprocess.Popen(
            self.holder_argv(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            err = self.holder.stderr.read() if self.holder.poll() is not None else ""
            self.cleanup()
            raise RuntimeError(f"private podman namespace did not start: {line!r} {err}")

    def holder_argv(self) -> list[str]:
        """The namespace's holder: overlays on /etc and /var/lib, a tmpfs on /run; it prints
        `ready` and sleeps."""
        ovl = self.root / "ovl"
        for d in ("etc/up", "etc/work", "var-lib/up", "var-lib/work"):
            (ovl / d).mkdir(parents=True, exist_ok=True)
        script = (
            "set -e\n"
            f"mount -t overlay nvd2-etc -o lowerdir=/etc,upperdir={ovl}/etc/up,"
            f"workdir={ovl}/etc/work /etc\n"
            f"mount -t overlay nvd2-var-lib -o lowerdir=/var/lib,upperdir={ovl}/var-lib/up,"
            f"workdir={ovl}/var-lib/work /var/lib\n"
            "mount -t tmpfs -o mode=0755 nvd2-run /run\n"
            "mkdir -p /etc/cdi\n"
            "echo ready\n"
            "exec sleep 86400\n"
        )
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]

    # --- running things inside the namespace -------------------------------------------------

    def sh(self, command: str, *, check: bool = True, timeout: float = 60):
        """`sh -c command` in our mount namespace (where /etc/cdi is ours)."""
        return self._run(["sh", "-c", command], check=check, timeout=timeout)

    def podman(self, *args: str, check: bool = True, timeout: float = 120, input=None):
        return self._run(["podman", *args], check=check, timeout=timeout, input=input)

    def _run(self, argv: Sequence[str], *, check: bool, timeout: float, input=None):
        assert self.holder is not None and self.holder.poll() is None, "namespace not running"
        proc = subprocess.run(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv],
            capture_output=True, text=True, timeout=timeout, env=self.env, input=input,
            check=False, cwd="/",
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)}: exit {proc.returncode}\nstdout: {proc.stdout}\n"
                f"stderr: {proc.stderr}"
            )
        return proc

    def write_cdi_spec(self, name: str, text: str) -> None:
        """Put a spec into /etc/cdi as Podman in our namespace sees it."""
        self._run(["sh", "-c", f"cat > /etc/cdi/{name}"], check=True, timeout=30, input=text)

    def import_image(self, tag: str, extra: Iterable[tuple[str, object]] = (),
                     engine=None) -> str:
        """`podman import` of the busybox-static rootfs plus `extra` (see image_tar), by this
        Podman or by `engine` (a RootlessUser); the tag."""
        tar = self.root / f"{tag.replace('/', '_').replace(':', '_')}.tar"
        self.host_path(tar).write_bytes(image_tar(busybox_rootfs_tar(), extra))
        self.host_path(tar).chmod(0o644)
        (engine or self).podman("import", str(tar), tag)
        return tag

    @staticmethod
    def host_path(path: str | os.PathLike) -> Path:
        """This machine's path of a path the namespace's commands see (the same here)."""
        return Path(path)

    # --- stopping ----------------------------------------------------------------------------

    def _namespace_pids(self) -> list[int]:
        if self.holder is None:
            return []
        try:
            ours = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        except OSError:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.holder.pid:
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/mnt") == ours:
                    pids.append(int(entry))
            except OSError:
                continue
        return pids

    def cleanup(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.podman("rm", "-af", "-t", "0", check=False)
            for pid in self._namespace_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.holder.kill()
        if self.holder is not None:
            self.holder.wait(timeout=30)
            for stream in (self.holder.stdout, self.holder.stderr):
                if stream:
                    stream.close()
            self.holder = None
        shutil.rmtree(self.host_path(self.root), ignore_errors=True)


class RootlessUser:
    """A throwaway user running rootless Podman inside a started `PrivatePodman`'s namespace
    (or any `pod` with the same `sh`, `root` and `host_path`: a platform tree's Podman).

    The user, its subuid/subgid ranges and its runtime directory are made in the namespace,
    whose /etc is an overlay (or a tree's own): the machine's /etc/passwd and /etc/subuid never
    hold it, and it is gone with the namespace. Rootless Podman 4.3 bind-mounts each device
    node from its container `path`, so the namespace's /dev becomes a tmpfs copy of /dev plus
    `nodes` (name -> (major, minor)). Its pause process starts with its first command, inside
    the namespace, and dies with it. `home` is a path as the namespace's commands see it.
    """

    def __init__(self, pod, home: Path, nodes: dict[str, tuple[int, int]]):
        self.pod = pod
        self.name = "nvd2rl" + os.urandom(3).hex()
        self.home = home
        dev = pod.root / "dev"
        mknods = "".join(f"mknod -m 0666 /dev/{n} c {ma} {mi}\n" for n, (ma, mi) in nodes.items())
        pod.sh(
            "set -e\n"
            f"useradd -M -d {home} -s /bin/sh {self.name}\n"
            f"mkdir -p {home} && chown {self.name}: {home}\n"
            f"grep -q '^{self.name}:' /etc/subuid 2>/dev/null || "
            f"echo {self.name}:300000:65536 >> /etc/subuid\n"
            f"grep -q '^{self.name}:' /etc/subgid 2>/dev/null || "
            f"echo {self.name}:300000:65536 >> /etc/subgid\n"
            f"mkdir {dev}\n"
            f"mount -t tmpfs -o mode=0755 nvd2-dev {dev}\n"
            f"cp -a /dev/. {dev}/ 2>/dev/null || true\n"
            f"mount --bind {dev} /dev\n"
            "mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts\n"
            "mount -t tmpfs -o mode=1777 nvd2-shm /dev/shm\n"
            + mknods
        )
        self.uid = int(pod.sh(f"id -u {self.name}").stdout)
        self.gid = int(pod.sh(f"id -g {self.name}").stdout)
        pod.sh(f"mkdir -m 0700 -p /run/user/{self.uid} && chown {self.name}: /run/user/{self.uid}")
        conf = home / "containers.conf"
        local_conf = pod.host_path(conf)
        local_conf.write_text(ENGINE_CONF.format(root=home))
        os.chown(local_conf, self.uid, self.gid)
        self.env = (f"HOME={home} XDG_RUNTIME_DIR=/run/user/{self.uid} CONTAINERS_CONF={conf} "
                    "PATH=/usr/sbin:/usr/bin:/sbin:/bin")

    def podman(self, *args: str, check: bool = True, timeout: float = 180):
        """`podman ARGS` as the user, with nothing of root's environment."""
        import shlex

        return self.pod.sh(
            f"cd / && exec setpriv --reuid={self.uid} --regid={self.gid} --init-groups "
            f"env -i {self.env} podman {shlex.join(args)}", check=check, timeout=timeout)

    def processes(self) -> list[int]:
        """Every process whose environment says HOME is this user's (all it started: Podman's
        pause process, a rootless dockerd and its helpers), found from outside."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if f"HOME={self.home}".encode() in f.read().split(b"\0"):
                        found.append(int(pid))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        """SIGKILL every process of the user's (they live in namespaces of their own, which
        PrivatePodman.cleanup does not see) and wait until they are gone."""
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            for pid in self.processes():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
