"""The agent's image run as its DaemonSet runs it, without a kubelet: a private dockerd starts
the image privileged, with --pid=host, a host root mounted at /host and a /run of its own,
against a private containerd whose directory is that host root (its config.toml at the node
path /etc/containerd/config.toml).

What stands in for the node: the private containerd (this machine's containerd 1.6, Debian
12's, and Debian 13's 1.7), and for the node's systemd the `systemctl` stand-in
(tests/fixtures/systemctl-containerd)
run by this test outside the container; the image's systemctl (chroot /host systemctl) reaches
it through the host root's systemctl (tests/fixtures/host-systemctl) and two FIFOs. No kubelet
and no Kubernetes API run here.

The image is built by `make agent-image IMPORT=0` (the .deb on the cached Debian 12 tree) when
dist/ has none newer than the sources, and imported into the private dockerd.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fixtures.fake_driver import build_fake_driver  # noqa: E402
from privatecontainerd import PrivateContainerd, tree_binaries  # noqa: E402

from nvdocker2 import __version__  # noqa: E402
from nvdocker2.engines.containerd import service  # noqa: E402
from nvdocker2.runtime.cdi import read_yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
IMAGE_TAR = REPO / "dist" / f"nvdocker2-agent_{__version__}.tar"
IMAGE = "nvdocker2-agent:e2e"
# The same image with the test suite's switch on (nvdocker2/host/testing.py: a venv holding the
# switch file), for the one test that injects a fault; the shipped image never has it.
SWITCHED = "nvdocker2-agent:e2e-switched"
# This machine's containerd 1.6 (Debian 12's) and Debian 13's 1.7 from its cached tree;
# $NVD2_CONTAINERD_BINS (colon-separated executables or suite names) replaces the list.
BINS = [b for b in os.environ.get("NVD2_CONTAINERD_BINS", "").split(":") if b] or [
    "containerd", "trixie"]
CRUN = """
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
          BinaryName = "{runc}"
"""


# capabilities(7) by bit number, as Docker names them.
CAPS = ("CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP "
        "LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER "
        "SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE "
        "SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP "
        "MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF "
        "CHECKPOINT_RESTORE").split()


def privileged() -> list[str]:
    """--privileged, as the DaemonSet asks; where this machine's own bounding set lacks a
    capability (a sandbox), runc cannot grant it and refuses --privileged: then every
    capability this machine has, with seccomp and AppArmor off (all the agent could use)."""
    bounding = int(next(line.split()[1] for line in open("/proc/self/status")
                        if line.startswith("CapBnd:")), 16)
    missing = [name for bit, name in enumerate(CAPS) if not bounding >> bit & 1]
    if not missing:
        return ["--privileged"]
    return ["--cap-add", "ALL", *[a for m in missing for a in ("--cap-drop", m)],
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"]


def _stale(tar: Path) -> bool:
    if not tar.exists():
        return True
    built = tar.stat().st_mtime
    for top in ("nvdocker2", "debian", "deploy/image", "pyproject.toml"):
        for p in [REPO / top] if (REPO / top).is_file() else (REPO / top).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.stat().st_mtime > built:
                return True
    return False


@pytest.fixture(scope="module")
def agent_image(private_dockerd):
    """The image in the session's private dockerd (whose prerequisites, root, containerd, runc
    and busybox-static, are the private containerd's too)."""
    if _stale(IMAGE_TAR):
        p = subprocess.run(["make", "agent-image", "IMPORT=0"], cwd=REPO, capture_output=True,
                           text=True, timeout=1800)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    private_dockerd.docker("import", "-c", 'ENTRYPOINT ["/usr/bin/nvdocker2", "agent"]',
                           str(IMAGE_TAR), IMAGE, timeout=600)
    private_dockerd.docker(
        "run", "--name", "nvd2-switch", "--network", "none", "--entrypoint", "/bin/sh", IMAGE,
        "-c", "python3 -m venv --without-pip --system-site-packages /opt/nvd2-tests && "
        "install -m 0644 /dev/null /opt/nvd2-tests/nvdocker2-test-hooks", timeout=300)
    private_dockerd.docker(
        "commit", "-c", 'ENTRYPOINT ["/opt/nvd2-tests/bin/python3", "-m", "nvdocker2", "agent"]',
        "nvd2-switch", SWITCHED, timeout=300)
    private_dockerd.docker("rm", "nvd2-switch")
    return private_dockerd


class HostSystemd:
    """Answers the host root's systemctl/journalctl (the FIFOs) with the private containerd's
    stand-in, from a thread of this test: a restarted containerd is ours, not the agent's."""

    def __init__(self, c: PrivateContainerd) -> None:
        self.c = c
        run = c.dir / "run"
        run.mkdir(exist_ok=True)
        self.req, self.rep = run / "nvd2-systemd.req", run / "nvd2-systemd.rep"
        os.mkfifo(self.req)
        os.mkfifo(self.rep)
        self.calls: list[list[str]] = []
        self._stop = False
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while True:
            with open(self.req) as f:
                line = f.read()
            if self._stop:
                return
            name, *args = line.rstrip("\n").split("\t")
            self.calls.append([name, *args])
            p = subprocess.run([str(self.c.bin / name), *args], env=self.c.env(),
                               capture_output=True, text=True, timeout=300)
            with open(self.rep, "w") as f:
                f.write(f"{p.returncode}\n{p.stdout}{p.stderr}")

    def close(self) -> None:
        self._stop = True
        with open(self.req, "w") as f:
            f.write("\n")
        self._t.join(10)


@pytest.fixture(params=BINS)
def node(agent_image, tmp_path, request):
    """A private containerd whose directory is the host root: config.toml names a crun
    runtime and makes it the default (a non-runc default set before the agent came), a
    busybox sh for the host root's systemctl, and the stand-in for systemd."""
    runc = shutil.which("runc")
    exe = tree_binaries(request.param) if request.param in ("trixie", "sid") else request.param
    c = PrivateContainerd(exe, config_name="etc/containerd/config.toml")
    text = c.config.read_text().replace('      snapshotter = "overlayfs"\n',
                        '      snapshotter = "overlayfs"\n      default_runtime_name = "crun"\n')
    c.config.write_text(text + CRUN.format(runc=runc))
    for d in ("bin", "usr/bin"):
        (c.dir / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", c.dir / "bin" / "busybox")
    for applet in ("sh", "cat"):
        (c.dir / "bin" / applet).symlink_to("busybox")
    for name in ("systemctl", "journalctl"):
        shutil.copy2(FIXTURES / "host-systemctl", c.dir / "usr" / "bin" / name)
    systemd = HostSystemd(c)
    run = tmp_path / "run"  # the DaemonSet's /run mount
    run.mkdir()
    started: list[str] = []
    try:
        c.start()
        yield Node(agent_image, c, systemd, run, started)
    finally:
        for name in started:
            agent_image.docker("rm", "-f", name, check=False)
        systemd.close()
        c.cleanup()


class Node:
    def __init__(self, dockerd, c: PrivateContainerd, systemd: HostSystemd, run: Path,
                 started: list[str]) -> None:
        self.dockerd, self.c, self.systemd, self.run_dir, self.started = (dockerd, c, systemd,
                                                                            run, started)

    def agent(self, name: str, *env: str, image: str = IMAGE, flags: tuple = ()) -> None:
        """`docker run` the agent as the DaemonSet's pod runs it (`flags` added to its own)."""
        envs = [a for e in env for a in ("-e", e)]
        self.dockerd.docker(
            "run", "-d", "--name", self.cname(name), *privileged(), "--pid=host",
            "--network", "none", "-v", f"{self.c.dir}:/host", "-v", f"{self.run_dir}:/run",
            *envs, image, "--engine", "containerd", "--host-root", "/host",
            "--config", "/etc/containerd/config.toml",
            "--containerd-address", "/host/c.sock", "--ready-file", "/tmp/nvdocker2-agent.ready",
            "--poll", "1", "--backoff", "2", *flags, timeout=300)
        self.started.append(self.cname(name))

    @staticmethod
    def cname(name: str) -> str:
        return f"nvd2-agent-{name}"

    def logs(self, name: str) -> list[str]:
        p = self.dockerd.docker("logs", self.cname(name), check=False)
        return (p.stdout + p.stderr).splitlines()

    def wait_log(self, name: str, word: str, timeout: float = 180, count: int = 1) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [line for line in self.logs(name) if word in line]
            if len(found) >= count:
                return found[count - 1]
            time.sleep(0.3)
        raise AssertionError(f"no {count}x {word!r} from {name}:\n" + "\n".join(self.logs(name)))

    def ready(self, name: str) -> bool:
        """The DaemonSet's readiness probe, run in the container."""
        p = self.dockerd.docker("exec", self.cname(name), "test", "-e",
                                "/tmp/nvdocker2-agent.ready", check=False)
        return p.returncode == 0

    def stop(self, name: str) -> int:
        self.dockerd.docker("stop", "-t", "120", self.cname(name), timeout=180)
        return int(self.dockerd.docker("inspect", "-f", "{{.State.ExitCode}}",
                                       self.cname(name)).stdout)

    def cri(self, since: float) -> tuple[dict, str]:
        text = subprocess.run(["journalctl", "-u", "containerd", "-o", "cat", "--since",
                               f"@{int(since)}"], capture_output=True, text=True,
                              env=self.c.env()).stdout
        found = service.runtimes_from_log(text)
        assert found is not None, self.c.log_tail()
        return found

    def temp_files(self) -> list[str]:
        return [n for n in os.listdir(self.c.config.parent) if "nvdocker2-tmp" in n]


def _rewrite(path: Path, data: bytes) -> None:
    tmp = path.with_name(".other-tool.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_ready_drift_reapplied_and_stop_restores_the_bytes_and_crun_default(node):
    c = node.c
    original = c.config.read_bytes()
    pid0 = c.pid()
    t0 = time.time()
    node.agent("a")
    node.wait_log("a", "ready:")
    assert node.ready("a")
    runtimes, default = node.cri(t0)
    assert runtimes.get("nvidia") == "/usr/bin/nvidia-container-runtime", node.logs("a")
    assert default == "crun"  # no --set-default: the default set before stays
    assert c.pid() != pid0  # restarted once, through the node's systemd
    assert ["systemctl", "restart", "containerd"] in node.systemd.calls
    installed = c.config.read_bytes()

    time.sleep(1.1)
    t1 = time.time()
    _rewrite(c.config, original)  # another tool puts its own file back
    node.wait_log("a", "drift in")
    end = time.monotonic() + 60
    while c.config.read_bytes() != installed:
        assert time.monotonic() < end, node.logs("a")
        time.sleep(0.2)
    time.sleep(3)
    assert len([x for x in node.logs("a") if "drift in" in x]) == 1, node.logs("a")
    assert "nvidia" in node.cri(t1)[0]

    time.sleep(1.1)
    t2 = time.time()
    assert node.stop("a") == 0
    took = time.time() - t2
    # uninstall, a containerd restart and its verification, well inside the DaemonSet's 120 s
    assert took < 60, took
    print(f"docker stop to a verified restore: {took:.1f} s")
    assert c.config.read_bytes() == original
    runtimes, default = node.cri(t2)
    assert "nvidia" not in runtimes and default == "crun"
    assert any("stopping on SIGTERM: uninstall:" in x for x in node.logs("a"))


def test_docker_kill_mid_apply_then_the_next_start_completes(node):
    c = node.c
    original = c.config.read_bytes()
    node.agent("a", "NVDOCKER2_TEST_PAUSE_BEFORE_RENAME=120", image=SWITCHED)
    end = time.monotonic() + 180
    while not node.temp_files():
        assert time.monotonic() < end, node.logs("a")
        time.sleep(0.2)
    node.dockerd.docker("kill", node.cname("a"))
    assert c.config.read_bytes() == original  # the file is whole: the old one
    assert c.pid()  # containerd untouched
    node.agent("b")
    node.wait_log("b", "ready:")
    assert node.temp_files() == []  # the killed write's temp file is gone
    assert b"nvidia" in c.config.read_bytes()
    assert node.stop("b") == 0
    assert c.config.read_bytes() == original


def test_a_second_agent_is_refused_the_node_and_waits(node):
    c = node.c
    original = c.config.read_bytes()
    node.agent("a")
    node.wait_log("a", "ready:")
    installed = c.config.read_bytes()
    node.agent("b")
    said = node.wait_log("b", "another nvdocker2 agent")
    assert "waiting" in said
    time.sleep(2)
    assert not node.ready("b")
    assert c.config.read_bytes() == installed
    assert node.stop("a") == 0
    node.wait_log("b", "is ours now")
    node.wait_log("b", "ready:")
    assert node.stop("b") == 0
    assert c.config.read_bytes() == original


TOOLKIT = "/usr/local/nvidia/toolkit"
# What the private containerd itself keeps in the host root (its state, socket, log), and the
# agent's own state directory (journal, backups, lock: kept by design, docs/kubernetes.md).
NOT_THE_NODES = {"root", "state", "c.sock", "containerd.log", "containerd.pid",
                 "containerd.json", "var/lib/nvdocker2"}


def node_without_packages(c: PrivateContainerd) -> None:
    """Make the host root a node with no package of ours: busybox's applets in /bin, this
    machine's python3 (its binary, the libraries it links and its standard library, compiled
    as a distribution ships it) at /usr/bin/python3, /var/lib, /var/run -> ../run, /dev/null,
    and the TEST FIXTURE fake driver (two GPUs)."""
    root = c.dir
    for applet in subprocess.run(["busybox", "--list"], capture_output=True, text=True,
                                 check=True).stdout.split():
        if not os.path.lexists(root / "bin" / applet):
            (root / "bin" / applet).symlink_to("busybox")
    real = os.path.realpath("/usr/bin/python3")
    name = os.path.basename(real)
    shutil.copy2(real, root / "usr" / "bin" / name)
    (root / "usr" / "bin" / "python3").symlink_to(name)
    libs = subprocess.run(["ldd", real], capture_output=True, text=True, check=True).stdout
    for word in libs.split():
        if word.startswith("/"):
            (root / word.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(word, root / word.lstrip("/"))
    shutil.copytree(f"/usr/lib/{name}", root / "usr" / "lib" / name, symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages",
                                                  "dist-packages", "test", "idlelib",
                                                  "tkinter", "ensurepip", "lib2to3"))
    (root / "var" / "lib").mkdir(parents=True, exist_ok=True)  # a node has it
    (root / "var" / "run").symlink_to("../run")
    build_fake_driver(root)
    os.mknod(root / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def tree(root: Path) -> dict[str, tuple]:
    """Every entry of the host root but NOT_THE_NODES: kind, mode, owner, bytes or target."""
    out: dict[str, tuple] = {}
    for d, subdirs, names in os.walk(root):
        rel_d = os.path.relpath(d, root)
        subdirs[:] = [n for n in subdirs
                      if os.path.normpath(os.path.join(rel_d, n)) not in NOT_THE_NODES]
        for name in subdirs + names:
            rel = os.path.normpath(os.path.join(rel_d, name))
            if rel in NOT_THE_NODES:
                continue
            path = os.path.join(d, name)
            st = os.lstat(path)
            if os.path.islink(path):
                what = os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    what = f.read()
            else:
                what = None
            out[rel] = (st.st_mode, st.st_uid, st.st_gid, what)
    return out


def test_install_toolkit_on_a_node_without_packages_and_take_all_of_it_away(node):
    """--install-toolkit: the runtime, the hook and their config.toml copied into the node,
    run by the node's own python3 (verified by chroot), the engine pointed at them as the CRI
    reports, the node's CDI spec written by the node with node paths; on stop all of it goes,
    and the host root is byte-exact."""
    c = node.c
    node_without_packages(c)
    before = tree(c.dir)
    t0 = time.time()
    node.agent("a", flags=("--install-toolkit", TOOLKIT))
    node.wait_log("a", "ready:")
    logs = "\n".join(node.logs("a"))
    assert f"toolkit copied into {TOOLKIT}" in logs, logs
    runtimes, default = node.cri(t0)
    assert runtimes.get("nvidia") == f"{TOOLKIT}/nvidia-container-runtime", logs
    assert default == "crun"
    # The node's python3 runs the toolkit's runtime from the node's root.
    p = subprocess.run(["chroot", str(c.dir), f"{TOOLKIT}/nvidia-container-runtime",
                        "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"version {__version__} " in p.stdout, p.stdout + p.stderr
    node.wait_log("a", "CDI spec /var/run/cdi/nvidia.yaml written")
    spec_path = c.dir / "run" / "cdi" / "nvidia.yaml"
    text = spec_path.read_text()
    assert str(c.dir) not in text and "/host" not in text  # node paths only
    spec = read_yaml(text)
    names = {d["name"] for d in spec["devices"]}
    assert {"0", "1", "all"} <= names, names
    one = next(d for d in spec["devices"] if d["name"] == "1")
    assert [n["path"] for n in one["containerEdits"]["deviceNodes"]] == ["/dev/nvidia1"]
    edits = spec["containerEdits"]
    assert any(m["hostPath"].startswith("/usr/lib/x86_64-linux-gnu/libcuda.so")
               for m in edits["mounts"]), text
    assert {h["path"] for h in edits["hooks"]} == {f"{TOOLKIT}/nvidia-container-runtime"}
    v = subprocess.run([sys.executable, "-m", "nvdocker2", "cdi", "validate", str(spec_path)],
                       capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr

    t1 = time.time()
    assert node.stop("a") == 0, node.logs("a")
    logs = "\n".join(node.logs("a"))
    assert "CDI spec /var/run/cdi/nvidia.yaml removed" in logs, logs
    assert f"toolkit removed from {TOOLKIT}" in logs, logs
    assert "nvidia" not in node.cri(t1)[0]
    after = tree(c.dir)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], changed


def test_install_toolkit_leaves_a_hand_made_node_spec_alone(node):
    """A /var/run/cdi/nvidia.yaml the agent did not write is never replaced nor removed."""
    c = node.c
    node_without_packages(c)
    (c.dir / "run" / "cdi").mkdir()
    mine = b"# the node's own spec\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
    (c.dir / "run" / "cdi" / "nvidia.yaml").write_bytes(mine)
    before = tree(c.dir)
    node.agent("a", flags=("--install-toolkit", TOOLKIT))
    node.wait_log("a", "ready:")
    node.wait_log("a", "was not written by the agent: left as it is")
    assert (c.dir / "run" / "cdi" / "nvidia.yaml").read_bytes() == mine
    assert node.stop("a") == 0, node.logs("a")
    after = tree(c.dir)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], changed
