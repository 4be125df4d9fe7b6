"""Debian trees with their own Docker, for the platform matrix (and any test that needs another
Docker, containerd or Python than this machine's).

A *tree* is a `debootstrap --variant=minbase` root of one Debian suite with docker.io,
docker-cli, containerd, runc, busybox-static and nvdocker2's Debian dependencies (Debian 13
and sid: Podman and uidmap too, PODMAN_PACKAGES), built once and cached as an uncompressed
tarball under /var/cache/nvdocker2-tests (NVDOCKER2_TEST_CACHE), then unpacked into a fresh
temporary directory per use. Nothing of this machine is changed: the tree's daemons run
chrooted inside a private mount namespace, and only processes started here are ever
signalled, by pid.

Stable API (other test modules build on it; extend, do not change):

    SUITES                      {"bookworm": Suite, "trixie": Suite, "sid": Suite}
    TreeUnavailable             exception; str() is one line naming the platform and the reason
    unavailable(message)        in a test: pytest.fail under CI=true, else pytest.skip
    ensure_tarball(suite)       Path of the cached tarball, debootstrapped first when missing
                                (a per-suite lock makes parallel callers wait, not race)
    Tree.create(suite)          a fresh unpacked tree (raises TreeUnavailable)
      .suite, .root             the Suite, the tree's root directory on this machine
      .path("/etc/x")           this machine's path of a path inside the tree
      .run_dir                  this machine's directory that is the tree's /run
      .enter()                  start the tree's mount namespace (idempotent; done by the
                                daemon starters and by sh())
      .namespace_argv(argv)     argv run in that namespace without the chroot (to make a
                                namespace of one's own from it)
      .sh(cmd, env=, timeout=, input=)
                                /bin/sh -c cmd inside the tree (chroot, in the namespace, so
                                it sees the tree's /run: daemons' sockets and pidfiles, and
                                /proc); returns CompletedProcess (text, no check)
      .ok(cmd, ...)             the same, asserting exit 0; returns stdout
      .install_deb(path, env=)  `apt-get install ./x.deb` inside the tree (no network needed)
      .start_dockerd(extra_args=(), env=None, timeout=120) -> TreeDockerd
      .start_containerd(config=None, extra_args=(), timeout=60) -> TreeContainerd
      .stop_daemons()           stop every daemon started in the tree (by pid); the tree stays
      .close()                  stop everything started here (by pid), delete the tree
    TreeDockerd                 the tree's dockerd, with its defaults: config
                                /etc/docker/daemon.json, pidfile /run/docker.pid, socket
                                /run/docker.sock (all inside the tree), plus
                                --storage-driver=vfs --iptables=false --bridge=none
      .pid, .socket (this machine's path of the socket), .host ("unix://" + socket),
      .daemon_json (this machine's path of the tree's /etc/docker/daemon.json),
      .log_file (this machine's path of the tree's /var/log/dockerd.log: stdout and stderr),
      .version (ServerVersion), .major
      .docker(*args, check=True, timeout=120, input=None)   the tree's docker CLI
      .info()                   `docker info` as a dict
      .wait_info(predicate, timeout=30)
      .running(), .stop(), .restart(), .log_tail()
      .image                    "nvd2-busybox:latest", imported from the tree's busybox-static
    TreeContainerd              the tree's containerd alone
      .pid, .socket (this machine's path), .address (the path inside the tree),
      .log_file (this machine's path of the tree's /var/log/containerd.log),
      .ctr(*args, ...)          the tree's ctr on that socket; .running(), .stop(), .log_tail()

Under pytest use the fixtures of tests/platforms/conftest.py (`tree`, `tree_dockerd`), which
turn TreeUnavailable into a failure under CI=true and a skip otherwise.

How a daemon runs (what Docker 28 needs on this kernel): a holder process made by
`unshare -m` (private propagation) binds the tree onto itself, rbinds /proc, /sys and /dev into
it and binds an empty directory of ours on its /run, then sleeps; daemons and commands enter
that namespace with `nsenter -m` and `chroot` into the tree. The mounts exist only in that
namespace and vanish with its last process. Stopping: SIGTERM to each daemon pid (SIGKILL after
a timeout), then SIGKILL to any process still in our namespace (container shims), found by
comparing /proc/PID/ns/mnt with the holder's, then the holder.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

_TESTS = Path(__file__).resolve().parents[1]
for _helpers in ("packaging", "e2e"):
    if str(_TESTS / _helpers) not in sys.path:
        sys.path.insert(0, str(_TESTS / _helpers))

from pkgtest import INCLUDE  # noqa: E402
from privatedockerd import _alive, _signal  # noqa: E402

CACHE = Path(os.environ.get("NVDOCKER2_TEST_CACHE", "/var/cache/nvdocker2-tests"))
MIRROR = os.environ.get("NVDOCKER2_TEST_MIRROR", "http://deb.debian.org/debian")
# Part of the cache key: change it when bootstrap() changes what goes into the tarball.
RECIPE = "1"
# Docker's packages, then nvdocker2's Debian dependencies (the packaging tests' list). docker-cli:
# from Debian 13 docker.io only recommends the CLI (bookworm's docker.io has it).
PACKAGES = ("docker.io", "containerd", "runc", "busybox-static", *INCLUDE)
# Podman 5 and the newuidmap/newgidmap its rootless mode needs (the Debian 13 and sid trees:
# tests/platforms/test_podman_platform.py).
PODMAN_PACKAGES = ("podman", "uidmap")
IMAGE = "nvd2-busybox:latest"
TREE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}
APT = "apt-get -y -q -o Dpkg::Use-Pty=0 --no-install-recommends"


@dataclass(frozen=True)
class Suite:
    """One Debian release as the matrix knows it (versions are what the suite ships)."""

    name: str
    release: str  # "Debian 12"
    docker: str
    containerd: str
    runc: str
    python: str
    # packages beyond PACKAGES
    extra_packages: tuple[str, ...] = ()
    # apt options the suite needs (sid's Release file can be expired against the clock)
    apt_options: tuple[str, ...] = ()
    # the Podman major.minor of a suite whose tree has PODMAN_PACKAGES ("" where it has not)
    podman: str = ""

    @property
    def packages(self) -> tuple[str, ...]:
        return PACKAGES + self.extra_packages

    @property
    def platform(self) -> str:
        return f"{self.release} ({self.name})"


SUITES = {
    "bookworm": Suite("bookworm", "Debian 12", "20.10", "1.6", "1.1", "3.11"),
    "trixie": Suite("trixie", "Debian 13", "26.1", "1.7", "1.1", "3.13",
                    extra_packages=("docker-cli", *PODMAN_PACKAGES), podman="5.4"),
    "sid": Suite(
        "sid", "Debian sid", "28.5", "2.1", "1.3", "3.14",
        extra_packages=("docker-cli", *PODMAN_PACKAGES),
        apt_options=('Acquire::Check-Valid-Until "false";',), podman="5.8",
    ),
}


class TreeUnavailable(Exception):
    """A tree could not be built, unpacked or started; the message is one line."""

    def __init__(self, suite: Suite, reason: str) -> None:
        last = " ".join(reason.strip().split())[-400:] or "no output"
        super().__init__(f"{suite.platform}: {last}")


def unavailable(message: str) -> None:
    """In a test: fail under CI=true, skip for a developer, with this one line."""
    import pytest

    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def open_tree(suite: "Suite | str") -> "Tree":
    """`Tree.create` for a test: needs root; a tree that cannot be had is `unavailable`."""
    if os.geteuid() != 0:
        unavailable("the platform matrix needs root (debootstrap, chroot, dockerd)")
    try:
        return Tree.create(suite)
    except TreeUnavailable as exc:
        unavailable(str(exc))
        raise  # not reached: unavailable fails or skips


def start_dockerd(tree: "Tree") -> "TreeDockerd":
    """`tree.start_dockerd()` for a test: a dockerd that cannot start is `unavailable`."""
    try:
        return tree.start_dockerd()
    except TreeUnavailable as exc:
        unavailable(str(exc))
        raise  # not reached: unavailable fails or skips


def _run(cmd: Sequence[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def _tail(proc: subprocess.CompletedProcess, lines: int = 3) -> str:
    said = (proc.stdout + proc.stderr).strip().splitlines()
    return " | ".join(said[-lines:])


def cache_key(suite: Suite) -> str:
    parts = [RECIPE, suite.name, MIRROR, *suite.packages, *suite.apt_options]
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:12]


def tarball_path(suite: Suite) -> Path:
    return CACHE / f"{suite.name}-docker-{cache_key(suite)}.tar"


def ensure_tarball(suite: Suite | str) -> Path:
    """The suite's cached tarball; debootstrapped first when missing (raises TreeUnavailable).
    A lock per suite serialises builders; stale tarballs of the same suite are removed."""
    suite = SUITES[suite] if isinstance(suite, str) else suite
    tarball = tarball_path(suite)
    if tarball.is_file():
        return tarball
    if os.geteuid() != 0:
        raise TreeUnavailable(suite, "building a tree needs root (debootstrap, chroot)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{suite.name}-docker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.is_file():
            bootstrap(suite, tarball)
        for stale in CACHE.glob(f"{suite.name}-docker-*.tar"):
            if stale != tarball:
                stale.unlink()
    return tarball


def bootstrap(suite: Suite, tarball: Path) -> None:
    """debootstrap a minbase tree, apt-get install PACKAGES in it, store it as a tarball."""
    if shutil.which("debootstrap") is None:
        proc = _run(["apt-get", "-o", "DPkg::Lock::Timeout=900", "install", "-y", "-q",
                     "--no-install-recommends", "debootstrap"])
        if shutil.which("debootstrap") is None:
            raise TreeUnavailable(suite, f"debootstrap missing and not installable: {_tail(proc)}")
    work = Path(tempfile.mkdtemp(prefix=f"nvd2-bootstrap-{suite.name}-", dir=CACHE))
    try:
        root = work / "root"
        proc = _run(["debootstrap", "--variant=minbase", suite.name, str(root), MIRROR],
                    timeout=1800)
        if proc.returncode != 0:
            raise TreeUnavailable(
                suite, f"debootstrap {suite.name} from {MIRROR} failed: {_tail(proc)}")
        if suite.apt_options:
            conf = root / "etc/apt/apt.conf.d/99nvdocker2-tests"
            conf.write_text("\n".join(suite.apt_options) + "\n")
        # No service may start inside the tree while packages install.
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        script = f"apt-get update -q && {APT} install {' '.join(suite.packages)}"
        proc = _run(["chroot", str(root), "/bin/sh", "-c", script], env=TREE_ENV, timeout=1800)
        if proc.returncode != 0:
            raise TreeUnavailable(
                suite, f"apt-get install of Docker in the {suite.name} tree failed: {_tail(proc)}")
        policy.unlink()
        _strip(root)
        partial = work / "tree.tar"
        proc = _run(["tar", "-C", str(root), "-cf", str(partial), "."], timeout=900)
        if proc.returncode != 0:
            raise TreeUnavailable(suite, f"tar of the {suite.name} tree failed: {_tail(proc)}")
        os.replace(partial, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _strip(root: Path) -> None:
    """Downloaded .debs, package lists, documentation: not needed, a good part of the tree."""
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc",
                 "usr/share/locale", "usr/share/man", "usr/share/info"):
        for entry in (root / junk).glob("*"):
            if entry.name in ("partial", "lock"):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


# -- processes ----------------------------------------------------------------------------------


def _stop_pid(pid: int, popen: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM, wait, SIGKILL: one process we started."""
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        if popen is not None:
            popen.poll()
        time.sleep(0.05)
    if _alive(pid):
        _signal(pid, signal.SIGKILL)
    if popen is not None:
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


# -- the tree -----------------------------------------------------------------------------------


class Tree:
    """One unpacked tree in its own temporary directory (see the module docstring)."""

    def __init__(self, suite: Suite, base: Path) -> None:
        self.suite = suite
        self.base = base
        self.root = base / "root"
        self.run_dir = base / "run"
        self._holder: subprocess.Popen | None = None
        self._namespace: str | None = None
        self.daemons: list[_Daemon] = []

    @classmethod
    def create(cls, suite: Suite | str, base_dir: str | os.PathLike = "/tmp") -> "Tree":
        suite = SUITES[suite] if isinstance(suite, str) else suite
        tarball = ensure_tarball(suite)
        base = Path(tempfile.mkdtemp(prefix=f"nvd2-{suite.name}-", dir=base_dir))
        tree = cls(suite, base)
        tree.root.mkdir()
        tree.run_dir.mkdir()
        proc = _run(["tar", "-C", str(tree.root), "-xf", str(tarball)], timeout=900)
        if proc.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            raise TreeUnavailable(suite, f"unpacking {tarball} failed: {_tail(proc)}")
        return tree

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    # -- namespace ------------------------------------------------------------------------------

    def enter(self) -> None:
        """Start the holder of the tree's mount namespace (once)."""
        if self._holder is not None and self._holder.poll() is None:
            return
        r = str(self.root)
        script = (
            "set -e\n"
            f'mount --bind "{r}" "{r}"\n'
            f'mount --rbind /proc "{r}/proc"\n'
            f'mount --rbind /sys "{r}/sys"\n'
            f'mount --rbind /dev "{r}/dev"\n'
            f'mount --bind "{self.run_dir}" "{r}/run"\n'
            "echo ready\n"
            "exec sleep infinity\n"
        )
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, text=True,
        )
        line = self._holder.stdout.readline()
        if line.strip() != "ready":
            self._holder.wait(timeout=10)
            err = self._holder.stderr.read()
            self._holder = None
            raise TreeUnavailable(self.suite, f"cannot set up the tree's mounts: {err}")
        self._namespace = _mount_ns(self._holder.pid)

    def namespace_argv(self, argv: Sequence[str]) -> list[str]:
        """argv run in the tree's mount namespace, not chrooted (this machine's programs)."""
        self.enter()
        assert self._holder is not None
        return ["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--", *argv]

    def _inside(self, argv: Sequence[str]) -> list[str]:
        return self.namespace_argv(["chroot", str(self.root), *argv])

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs) -> subprocess.Popen:
        """Start argv inside the tree; its pid is the program's own (nsenter and chroot exec)."""
        return subprocess.Popen(self._inside(argv), env={**TREE_ENV, **(env or {})}, **kwargs)

    def sh(self, command: str, env: Mapping[str, str] | None = None, timeout: float = 300,
           input: str | None = None) -> subprocess.CompletedProcess:
        return _run(self._inside(["/bin/sh", "-c", command]), timeout=timeout, input=input,
                    env={**TREE_ENV, **(env or {})})

    def ok(self, command: str, env: Mapping[str, str] | None = None, timeout: float = 300,
           input: str | None = None) -> str:
        proc = self.sh(command, env, timeout, input)
        assert proc.returncode == 0, (
            f"{self.suite.platform}: {command!r} exited {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def put(self, file: Path, inside: str = "/tmp") -> str:
        """Copy a file of this machine into the tree; returns its path inside."""
        shutil.copy(file, self.path(inside))
        return f"{inside.rstrip('/')}/{file.name}"

    def install_deb(self, deb: Path, env: Mapping[str, str] | None = None) -> str:
        """`apt-get install ./x.deb` inside the tree; returns apt's output."""
        inside = self.put(deb)
        return self.ok(f"{APT} install {inside} 2>&1", env=env, timeout=600)

    # -- daemons --------------------------------------------------------------------------------

    def start_dockerd(self, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                      timeout: float = 120) -> "TreeDockerd":
        daemon = TreeDockerd(self, extra_args, env)
        self.daemons.append(daemon)
        daemon.start(timeout)
        return daemon

    def start_containerd(self, config: str | None = None, extra_args: Sequence[str] = (),
                         timeout: float = 60) -> "TreeContainerd":
        daemon = TreeContainerd(self, config, extra_args)
        self.daemons.append(daemon)
        daemon.start(timeout)
        return daemon

    def namespace_pids(self) -> list[int]:
        """Processes in this tree's mount namespace (all started by us or our daemons)."""
        if self._namespace is None:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _mount_ns(int(entry)) == self._namespace:
                pids.append(int(entry))
        return pids

    def stop_daemons(self) -> None:
        """Stop every daemon started in this tree (the tree and its namespace stay)."""
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.daemons = []

    def close(self) -> None:
        self.stop_daemons()
        holder = self._holder
        if holder is not None:
            for pid in self.namespace_pids():
                if pid != holder.pid:
                    _signal(pid, signal.SIGKILL)
            _stop_pid(holder.pid, holder, 10)
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()
        self._holder = None
        shutil.rmtree(self.base, ignore_errors=True)


class _Daemon:
    name = "daemon"

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        # Inside the tree, where a user's dockerd started by hand would log to.
        self.log_file = tree.path(f"/var/log/{self.name}.log")
        self._proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def _launch(self, env: Mapping[str, str] | None = None) -> None:
        with open(self.log_file, "ab") as log:
            self._proc = self.tree.popen(self.argv(), env=env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        assert self._proc is not None, f"{self.name} not started"
        return self._proc.pid

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no {self.name} log)"

    def _wait(self, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise TreeUnavailable(
                    self.tree.suite,
                    f"{self.name} exited {self._proc.returncode} at start: {self._reason()}")
            if ready():
                return
            time.sleep(0.2)
        raise TreeUnavailable(self.tree.suite,
                              f"{self.name} not ready after {timeout:g}s: {self._reason()}")

    def _reason(self) -> str:
        """The log line that says why (a usage text can follow it), else the last line."""
        lines = [ln for ln in self.log_tail(2000).splitlines() if ln.strip()]
        for word in ("unknown flag", "level=fatal", "failed to start", "level=error", "error:"):
            for line in reversed(lines):
                if word in line.lower():
                    return line.strip()
        return lines[-1].strip() if lines else f"(no {self.name} log)"

    def stop(self, timeout: float = 30) -> None:
        if self._proc is not None:
            _stop_pid(self._proc.pid, self._proc, timeout)
            self._proc = None


class TreeDockerd(_Daemon):
    """The tree's dockerd (see the module docstring)."""

    name = "dockerd"

    def __init__(self, tree: Tree, extra_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(tree)
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.socket = tree.run_dir / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.daemon_json = tree.path("/etc/docker/daemon.json")
        self.image = IMAGE
        self.version = ""

    def argv(self) -> list[str]:
        return ["/usr/sbin/dockerd", "--storage-driver=vfs", "--iptables=false",
                "--bridge=none", *self.extra_args]

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def start(self, timeout: float = 120) -> None:
        self._launch(self.env)
        self._wait(self._answers, timeout)
        self.version = self.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        if self.docker("image", "inspect", self.image, check=False).returncode != 0:
            self._import_busybox()

    def restart(self, timeout: float = 120) -> None:
        self.stop()
        self.start(timeout)

    def stop(self, timeout: float = 30) -> None:
        containerd = self._containerd_pid()
        super().stop(timeout)
        # dockerd stops the containerd it started; after a SIGKILL that one is left.
        if containerd is not None and _alive(containerd):
            _stop_pid(containerd, None, 10)

    def _containerd_pid(self) -> int | None:
        pidfile = self.tree.run_dir / "docker/containerd/containerd.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _mount_ns(pid) == self.tree._namespace else None

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        return self.docker("version", check=False, timeout=10).returncode == 0

    def _import_busybox(self) -> None:
        tar = self.tree.path("/tmp/nvd2-busybox-rootfs.tar")
        if not tar.exists():
            busybox_rootfs(self.tree, tar)
        self.docker("import", "/tmp/nvd2-busybox-rootfs.tar", self.image, timeout=120)

    def docker(self, *args: str, check: bool = True, timeout: float = 120,
               input: str | None = None) -> subprocess.CompletedProcess:
        """The tree's docker CLI, run inside the tree, on this daemon."""
        cmd = " ".join(shlex.quote(a) for a in ("docker", *args))
        proc = self.tree.sh(cmd, timeout=timeout, input=input,
                            env={"DOCKER_HOST": "unix:///run/docker.sock"})
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{self.tree.suite.platform}: docker {' '.join(args)} exited "
                f"{proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def info(self) -> dict:
        return json.loads(self.docker("info", "--format", "{{json .}}", timeout=30).stdout)

    def wait_info(self, predicate: Callable[[dict], bool], timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        info = self.info()
        while not predicate(info):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.tree.suite.platform}: dockerd did not reach the expected state in "
                    f"{timeout:g}s: Runtimes={sorted(info.get('Runtimes', {}))} "
                    f"DefaultRuntime={info.get('DefaultRuntime')}\n{self.log_tail()}")
            time.sleep(0.2)
            info = self.info()
        return info


class TreeContainerd(_Daemon):
    """The tree's containerd alone, on /run/containerd/containerd.sock inside the tree."""

    name = "containerd"

    def __init__(self, tree: Tree, config: str | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        super().__init__(tree)
        self.config = config
        self.extra_args = list(extra_args)
        self.address = "/run/containerd/containerd.sock"
        self.socket = tree.run_dir / "containerd/containerd.sock"

    def argv(self) -> list[str]:
        config = ["--config", self.config] if self.config else []
        return ["/usr/bin/containerd", *config, "--address", self.address, *self.extra_args]

    def start(self, timeout: float = 60) -> None:
        self._launch()
        self._wait(lambda: self.socket.exists()
                   and self.ctr("version", check=False, timeout=10).returncode == 0, timeout)

    def ctr(self, *args: str, check: bool = True, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess:
        cmd = " ".join(shlex.quote(a) for a in ("ctr", "--address", self.address, *args))
        proc = self.tree.sh(cmd, timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{self.tree.suite.platform}: ctr {' '.join(args)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc


def busybox_rootfs(tree: Tree, tar_path: Path) -> None:
    """A tar of a tiny rootfs made of the tree's busybox-static, every applet linked in /bin."""
    busybox = tree.path("/bin/busybox")
    applets = _run([str(busybox), "--list"]).stdout.split()
    with tarfile.open(tar_path, "w") as tar:
        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)

        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "lib", "usr", "usr/lib"):
            add_dir(d)
        tar.add(str(busybox), arcname="bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                           ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
