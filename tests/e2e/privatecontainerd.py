"""A private containerd for end-to-end tests: its own config, root, state and socket in a temp
dir, started in the background and stopped by pid, driven by the `systemctl` stand-in
(tests/fixtures/systemctl-containerd) the way systemd drives the real one.

A busybox image is made as an OCI archive from busybox-static and loaded with
`ctr image import`; containers are started with `ctr run -d`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BUSYBOX = "/bin/busybox"
IMAGE = "docker.io/library/nvd2-busybox:latest"
NS = "nvd2"
PAUSE = "registry.k8s.io/pause:3.6"  # CONFIG's sandbox_image
# The releases the e2e tests run: this machine's containerd, and those of the trixie and sid
# trees; $NVD2_CONTAINERD_BINS (colon-separated containerd executables) replaces the list.
BINS = [b for b in os.environ.get("NVD2_CONTAINERD_BINS", "").split(":") if b] or [
    "containerd", "trixie", "sid"]

CONFIG = """version = 2
# A private containerd for nvdocker2's tests.
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/c.sock"

[ttrpc]
  address = "{d}/c.sock.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.6"  # pinned
    restrict_oom_score_adj = true  # pods here: no CAP_SYS_RESOURCE to lower oom_score_adj
    disable_tcp_service = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{d}/cni/bin"
      conf_dir = "{d}/cni/conf"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
"""


def missing_prerequisites(exe: str = "containerd") -> list[str]:
    out = []
    if os.geteuid() != 0:
        out.append("root")
    for tool in (exe, "ctr", "runc"):
        if not shutil.which(tool):
            out.append(tool)
    if not os.path.exists(BUSYBOX):
        out.append(f"{BUSYBOX} (Debian package busybox-static)")
    return out


def oci_archive(dest: Path, name: str = IMAGE, cmd: tuple[str, ...] = ("/bin/sh",)) -> Path:
    """An OCI image archive of busybox-static with sh and sleep linked, named `name`."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        info = tarfile.TarInfo("bin")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        t.addfile(info)
        t.add(BUSYBOX, "bin/busybox")
        for applet in ("sh", "sleep", "cat", "true", "ls", "stat"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(link)
    raw = layer.getvalue()
    gz = gzip.compress(raw, mtime=0)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return d

    ld = blob(gz)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Cmd": list(cmd)},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}
                        ).encode()
    cd = blob(config)
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": f"sha256:{cd}", "size": len(config)},
                           "layers": [{"mediaType":
                                       "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": f"sha256:{ld}", "size": len(gz)}]}).encode()
    md = blob(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{md}",
        "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": name}}]})
    with tarfile.open(dest, "w") as t:
        def add(name: str, data: bytes) -> None:
            i = tarfile.TarInfo(name)
            i.size = len(data)
            t.addfile(i, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", index.encode())
        for d, data in blobs.items():
            add(f"blobs/sha256/{d}", data)
    return dest


def tree_binaries(suite: str) -> str:
    """containerd, its shim and ctr of a Debian suite's cached tree, unpacked once beside it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platforms"))
    import trees

    # Any cached tree of the suite has the suite's containerd, whatever else it holds.
    cached = sorted(trees.CACHE.glob(f"{suite}-docker-*.tar"))
    try:
        tarball = cached[-1] if cached else trees.ensure_tarball(suite)
    except trees.TreeUnavailable as e:
        trees.unavailable(f"containerd of {suite}: {e}")
    dest = trees.CACHE / f"{tarball.stem}-containerd-bin"
    if not (dest / "containerd").exists():
        tmp = Path(str(dest) + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as t:
            for name in ("containerd", "containerd-shim-runc-v2", "ctr"):
                f = t.extractfile(f"./usr/bin/{name}")
                (tmp / name).write_bytes(f.read())
                (tmp / name).chmod(0o755)
        os.replace(tmp, dest)
    return str(dest / "containerd")


class PrivateContainerd:
    """One containerd in its own directory; `env()` is what nvdocker2 runs with."""

    def __init__(self, exe: str = "containerd", config: str | None = None,
                 config_name: str = "config.toml", unit_env: dict | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nvd2cd-", dir="/tmp"))
        self.exe = shutil.which(exe) or exe
        self.config = self.dir / config_name  # a path below dir (the agent's node root)
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text((config or CONFIG).format(d=self.dir))
        self.address = str(self.dir / "c.sock")
        self.log = self.dir / "containerd.log"
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        for name in ("systemctl", "journalctl"):
            (self.bin / name).symlink_to(FIXTURES / "systemctl-containerd")
        exe_dir = os.path.dirname(self.exe)
        self.path = os.pathsep.join([str(self.bin), exe_dir, os.environ.get("PATH", "")])
        (self.dir / "containerd.json").write_text(json.dumps({
            "argv": [self.exe, "--config", str(self.config)], "log": str(self.log),
            "address": self.address, "env": unit_env or {}}))

    def env(self, **extra: str) -> dict:
        env = dict(os.environ, PATH=self.path, NVD2_CONTAINERD_ROOT=str(self.dir))
        env.update(extra)
        return env

    def systemctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["systemctl", *args], env=self.env(), capture_output=True,
                              text=True, timeout=120)

    def start(self) -> None:
        p = self.systemctl("restart", "containerd")
        if p.returncode != 0:
            raise RuntimeError("private containerd did not start: " + self.log_tail())

    def pid(self) -> int | None:
        try:
            pid = int((self.dir / "containerd.pid").read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(["ctr", "--address", self.address, "-n", NS, *args],
                           capture_output=True, text=True, timeout=120, env=self.env())
        if check and p.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {p.stderr.strip()}")
        return p

    def import_busybox(self) -> None:
        self.ctr("image", "import", str(oci_archive(self.dir / "busybox.tar")))

    def import_for_cri(self) -> None:
        """busybox as IMAGE and as the CRI's sandbox (pause) image, in the CRI's namespace."""
        for name, cmd, tar in ((IMAGE, ("/bin/sh",), "busybox.tar"),
                               (PAUSE, ("/bin/sleep", "100000"), "pause.tar")):
            p = subprocess.run(["ctr", "--address", self.address, "-n", "k8s.io", "image",
                                "import", str(oci_archive(self.dir / tar, name, cmd))],
                               capture_output=True, text=True, timeout=120, env=self.env())
            if p.returncode != 0:
                raise RuntimeError(f"ctr image import {name}: {p.stderr.strip()}")

    def task_pid(self, cid: str) -> int | None:
        for line in self.ctr("task", "ls").stdout.splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == cid and parts[-1] == "RUNNING":
                return int(parts[1])
        return None

    def remove_container(self, cid: str) -> None:
        """Kill a running container's task and delete the container."""
        self.ctr("task", "kill", "-s", "SIGKILL", cid)
        # --force waits for the task to exit before it deletes it (containerd's WithProcessKill).
        self.ctr("task", "delete", "-f", cid, check=False)
        self.ctr("container", "delete", cid)

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def cleanup(self) -> None:
        if self.pid():
            for line in self.ctr("task", "ls", check=False).stdout.splitlines()[1:]:
                cid = line.split()[0]
                self.ctr("task", "kill", "-s", "SIGKILL", cid, check=False)
            for line in self.ctr("container", "ls", "-q", check=False).stdout.splitlines():
                self.ctr("task", "delete", "-f", line.strip(), check=False)
                self.ctr("container", "delete", line.strip(), check=False)
            pid = self.pid()
            if pid:
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    if not self.pid():
                        break
                    time.sleep(0.1)
        subprocess.run(["umount", "-R", "-l", str(self.dir / "root")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(self.dir / "state")], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
