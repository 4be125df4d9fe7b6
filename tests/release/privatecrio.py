"""A private CRI-O for the release check `make crio-e2e` (tests/release/crio_e2e.py).

Everything it reads or writes lives in one temp dir: crio.conf (`--config`) and crio.conf.d
(`--config-dir`), vfs storage (root, runroot), its socket, the runtime's state (runc's root,
conmon's exits and attach sockets, pinned namespaces), the pod logs, its containers policy,
registries.conf and storage.conf (CONTAINERS_* variables), and the CNI directories (empty:
only pods in the node's network namespace run, which need no CNI). It is started and stopped
by the `systemctl` stand-in (tests/release/systemctl-crio), which keeps its pidfile; cleanup
stops only that pid. crio runs in a mount namespace with a /run of its own; the machine's
/etc/crio, /var/lib/containers and /run are never read or written.

CRI-O pulls only from registries, and containers/image keeps root's blob cache in
/var/lib/containers: so the busybox image is loaded into the vfs storage by Podman inside a
mount namespace of its own (tests/e2e/privatepodman.py) before CRI-O starts, and CRI-O finds
it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(E2E))

from privatecontainerd import BUSYBOX, IMAGE, oci_archive  # noqa: E402
from privatepodman import PrivatePodman  # noqa: E402
from privatepodman import missing_prerequisites as podman_missing  # noqa: E402

STANDIN = Path(__file__).resolve().parent / "systemctl-crio"
PAUSE = "localhost/nvd2-pause:latest"
# The machine's own CRI-O and containers paths: the private CRI-O must leave them as they were.
HOST_PATHS = ("/etc/crio", "/var/lib/crio", "/var/lib/containers", "/run/crio", "/run/crun",
              "/run/containers", "/var/log/crio", "/var/run/nri", "/etc/cni/net.d")

CONFIG = """\
# A private CRI-O for nvdocker2's release check.
[crio]
root = "{d}/storage"
runroot = "{d}/run"
storage_driver = "vfs"
log_dir = "{d}/log/pods"
version_file = "{d}/run/crio-version"
version_file_persist = "{d}/lib/version"
clean_shutdown_file = "{d}/lib/clean.shutdown"
internal_repair = false

[crio.api]
listen = "{d}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
log_level = "info"
decryption_keys_path = "{d}/keys"
irqbalance_config_file = "{d}/irqbalance"
irqbalance_config_restore_file = "disable"
container_exits_dir = "{d}/exits"
container_attach_socket_dir = "{d}/attach"
namespaces_dir = "{d}/ns"
pinns_path = "{pinns}"
hooks_dir = ["{d}/hooks"]
cdi_spec_dirs = ["{d}/cdi"]

[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_type = "oci"
runtime_root = "{d}/runc"
monitor_path = "{conmon}"
monitor_cgroup = "pod"

[crio.image]
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
pause_image = "{pause}"
short_name_mode = "disabled"
namespaced_auth_dir = "{d}/auth"

[crio.network]
network_dir = "{d}/cni/net.d"
plugin_dirs = ["{d}/cni/bin"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
nri_listen = "{d}/nri.sock"
"""
POLICY = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
STORAGE = '[storage]\ndriver = "vfs"\ngraphroot = "{d}/storage"\nrunroot = "{d}/run"\n'


def missing_prerequisites(crio: str, pinns: str) -> list[str]:
    """What this machine lacks to run the private CRI-O (empty when it can)."""
    out = []
    if not crio:
        out.append("CRIO=PATH (a crio built from CRI-O's source)")
    elif not os.access(crio, os.X_OK):
        out.append(f"{crio} (not an executable file)")
    if not os.access(pinns, os.X_OK):
        out.append(f"{pinns} (pinns, built beside crio; PINNS=PATH names another)")
    for tool in ("/usr/bin/conmon", "/usr/sbin/runc"):
        if not os.access(tool, os.X_OK):
            out.append(f"{tool} (Debian package {os.path.basename(tool)})")
    out += [m for m in podman_missing() if m not in out]
    if not os.path.exists(BUSYBOX):
        out.append(f"{BUSYBOX} (Debian package busybox-static)")
    return out


def host_paths() -> dict[str, bool]:
    return {p: os.path.lexists(p) for p in HOST_PATHS}


class PrivateCrio:
    """One CRI-O in its own directory; `env()` is what nvdocker2 runs with."""

    def __init__(self, crio: str, pinns: str, unit_env: dict | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nvd2crio-", dir="/tmp"))
        self.exe = os.path.abspath(crio)
        self.config = self.dir / "crio.conf"
        self.dropins = self.dir / "crio.conf.d"
        self.dropins.mkdir()
        self.config.write_text(CONFIG.format(d=self.dir, pinns=os.path.abspath(pinns),
                                             runc="/usr/sbin/runc", conmon="/usr/bin/conmon",
                                             pause=PAUSE))
        for d in ("lib", "keys", "hooks", "cdi", "cni/net.d", "cni/bin", "log/pods"):
            (self.dir / d).mkdir(parents=True)
        (self.dir / "policy.json").write_text(POLICY)
        (self.dir / "storage.conf").write_text(STORAGE.format(d=self.dir))
        (self.dir / "registries.conf").write_text("")
        self.address = str(self.dir / "crio.sock")
        self.log = self.dir / "crio.log"
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        for name in ("systemctl", "journalctl"):
            (self.bin / name).symlink_to(STANDIN)
        self.path = os.pathsep.join([str(self.bin), os.path.dirname(self.exe),
                                     os.environ.get("PATH", "")])
        self.unit_env = {"CONTAINERS_REGISTRIES_CONF": str(self.dir / "registries.conf"),
                         "CONTAINERS_STORAGE_CONF": str(self.dir / "storage.conf"),
                         **(unit_env or {})}
        # CRI-O keeps runc's state of a runtime table without runtime_root (the drop-in's) in
        # /run/crun: crio runs in a mount namespace of its own with a /run of its own (unshare
        # and sh exec, so the pid the stand-in keeps is crio's).
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs -o mode=0755 nvd2-crio-run /run && exec "$@"', "sh",
                self.exe, "--config", str(self.config), "--config-dir", str(self.dropins)]
        (self.dir / "crio.json").write_text(json.dumps({
            "argv": argv,
            "log": str(self.log), "address": self.address, "env": self.unit_env}))

    def env(self, **extra: str) -> dict:
        env = dict(os.environ, PATH=self.path, NVD2_CRIO_ROOT=str(self.dir), **self.unit_env)
        env.update(extra)
        return env

    def systemctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["systemctl", *args], env=self.env(), capture_output=True,
                              text=True, timeout=180)

    def crio(self, *args: str) -> subprocess.CompletedProcess:
        """`crio --config ... --config-dir ... ARGS` (crio status reads --socket)."""
        return subprocess.run([self.exe, "--config", str(self.config), "--config-dir",
                               str(self.dropins), *args], env=self.env(), capture_output=True,
                              text=True, timeout=60)

    def running_config(self) -> str:
        """`crio status config`: the configuration the running CRI-O serves."""
        p = self.crio("status", "--socket", self.address, "config")
        if p.returncode != 0:
            raise RuntimeError(f"crio status config: {p.stderr.strip()}")
        return p.stdout

    def load_images(self) -> None:
        """busybox as IMAGE and as the pause image, into the vfs storage (CRI-O stopped)."""
        pod = PrivatePodman(self.dir / "podman")
        pod.start()
        try:
            for name, cmd in ((IMAGE, ("/bin/sh",)), (PAUSE, ("/bin/sleep", "100000"))):
                tar = oci_archive(self.dir / "podman" / "image.tar", name, cmd)
                pod.podman("--root", str(self.dir / "storage"), "--runroot",
                           str(self.dir / "run"), "--storage-driver", "vfs", "load", "-i",
                           str(tar))
        finally:
            pod.cleanup()

    def start(self) -> None:
        p = self.systemctl("restart", "crio")
        if p.returncode != 0:
            raise RuntimeError("private crio did not start: " + p.stderr + self.log_tail())

    def pid(self) -> int | None:
        try:
            pid = int((self.dir / "crio.pid").read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def cleanup(self) -> None:
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            for _ in range(300):
                if not self.pid():
                    break
                time.sleep(0.1)
        for sub in ("run", "storage", "ns"):
            subprocess.run(["umount", "-R", "-l", str(self.dir / sub)], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir)], capture_output=True)
