"""LXC end to end: an unprivileged busybox container started by root with Debian's lxc
(`lxc-execute`), whose mount hook is liblxc-common's own `/usr/share/lxc/hooks/nvidia` and
whose `nvidia-container-cli` is OURS (nvdocker2.nvc through its packaged sh launcher), found
first on lxc-start's PATH as the hook finds it. The hook is given the fake driver tree
(tests/fixtures/fake_driver.py) with its own `--root` option; `NVIDIA_VISIBLE_DEVICES=1`.

Inside, the container sees /dev/nvidia1 and not /dev/nvidia0, the driver files read-only, and
their libraries in its own ld cache (tests/e2e/gpu_inside.py).

LXC's state is private: `-P` names a lxcpath in the test's directory, no network
(`lxc.net.0.type = empty`), the container's cgroups under names of this test, removed after
it. The hook only serves unprivileged containers: root's container maps its ids with
`lxc.idmap`, and LXC has newuidmap (uidmap) check them against /etc/subuid and /etc/subgid.
Where root has no ranges there, the test gives it one beside the others in files of its own,
bind-mounted over those two in a private mount namespace for lxc-execute alone: the host's
files are never written.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fixtures.fake_driver import build_fake_driver
from gpu_inside import REPORT, assert_sees_exactly, parse
from prereq import require

from nvdocker2.runtime.launcher import write_cli_launcher

HOOK = "/usr/share/lxc/hooks/nvidia"
LXC_EXECUTE = "/usr/bin/lxc-execute"
BUSYBOX = "/bin/busybox"
RANGE = 65536
CGROUP_ROOT = Path("/sys/fs/cgroup")
REPO = Path(__file__).resolve().parents[2]


def missing_prerequisites() -> list[str]:
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    for path, package in ((LXC_EXECUTE, "lxc"), (HOOK, "lxc (liblxc-common's hooks/nvidia)"),
                          (BUSYBOX, "busybox-static"), ("/usr/bin/newuidmap", "uidmap"),
                          ("/usr/bin/unshare", "util-linux")):
        if not os.access(path, os.X_OK):
            missing.append(f"{package} ({path})")
    return missing


@pytest.fixture(scope="module")
def lxc_prerequisites():
    require("an unprivileged LXC container", missing_prerequisites())


def ranges(path: str) -> list[tuple[str, int, int]]:
    """(name, first, count) of each line of /etc/subuid or /etc/subgid."""
    found = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found.append((parts[0], int(parts[1]), int(parts[2])))
    return found


def root_range(path: str, private: Path) -> tuple[int, Path | None]:
    """The first id of a range of RANGE ids for root: root's own from `path`, else one past
    every listed range, with the file to bind over `path` (the host's lines plus root's)."""
    listed = ranges(path)
    for name, first, count in listed:
        if name in ("root", "0") and count >= RANGE:
            return first, None
    first = max([100000] + [f + c for _, f, c in listed])
    first = -(-first // RANGE) * RANGE
    text = Path(path).read_text(encoding="utf-8") if os.path.exists(path) else ""
    if text and not text.endswith("\n"):
        text += "\n"
    private.write_text(f"{text}root:{first}:{RANGE}\n", encoding="utf-8")
    return first, private


def busybox_rootfs(rootfs: Path, uid: int, gid: int) -> None:
    """busybox-static and a link per applet, owned by the container's root."""
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "usr"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for name in applets:
        if name != "busybox" and "/" not in name:
            (rootfs / "bin" / name).symlink_to("busybox")
    for path in [rootfs, *rootfs.rglob("*")]:
        os.lchown(path, uid, gid)


def package_copy(site: Path) -> list[str]:
    """nvdocker2 (and tomli on Python < 3.11) copied where the container's root, an
    unmapped uid on the host, can read it: the checkout may be in a directory it cannot."""
    import nvdocker2

    dirs = [Path(nvdocker2.__file__).parent]
    if sys.version_info < (3, 11):  # pragma: no cover
        import tomli

        dirs.append(Path(tomli.__file__).parent)
    for d in dirs:
        shutil.copytree(d, site / d.name, ignore=shutil.ignore_patterns("__pycache__"))
    return [str(site)]


def cgroups_named(prefix: str) -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    found = []
    for hierarchy in CGROUP_ROOT.iterdir():
        if hierarchy.is_dir():
            found += [p for p in hierarchy.iterdir() if p.name.startswith(prefix)]
    return found


def remove_cgroups(prefix: str) -> None:
    """rmdir, deepest first, every cgroup of this test (they hold no process by now)."""
    for top in cgroups_named(prefix):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            os.rmdir(dirpath)


class Lxc:
    def __init__(self, base: Path):
        self.base = base
        self.driver = build_fake_driver(base / "driver")
        uid, self.subuid = root_range("/etc/subuid", base / "subuid")
        gid, self.subgid = root_range("/etc/subgid", base / "subgid")
        self.rootfs = base / "rootfs"
        busybox_rootfs(self.rootfs, uid, gid)
        site = base / "site"
        site.mkdir()
        libexec = base / "libexec"
        libexec.mkdir()
        cli = write_cli_launcher(str(libexec), os.path.realpath(sys.executable),
                                 package_copy(site))
        # What the hook runs: `nvidia-container-cli` from PATH, ours first (root's directory).
        self.path_dir = base / "path"
        self.path_dir.mkdir()
        (self.path_dir / "nvidia-container-cli").symlink_to(cli)
        self.lxcpath = base / "lxcpath"
        (self.lxcpath / "gpu").mkdir(parents=True)
        self.cgroup = f"nvd2-lxc-test-{secrets.token_hex(4)}"
        (self.lxcpath / "gpu" / "config").write_text(
            "lxc.uts.name = gpu\n"
            f"lxc.rootfs.path = dir:{self.rootfs}\n"
            f"lxc.idmap = u 0 {uid} {RANGE}\n"
            f"lxc.idmap = g 0 {gid} {RANGE}\n"
            "lxc.net.0.type = empty\n"
            "lxc.mount.auto = proc:mixed sys:ro\n"
            "lxc.apparmor.profile = unconfined\n"
            f"lxc.cgroup.dir.container = {self.cgroup}/container\n"
            f"lxc.cgroup.dir.monitor = {self.cgroup}/monitor\n"
            f"lxc.cgroup.dir.monitor.pivot = {self.cgroup}-pivot\n"
            "lxc.environment = NVIDIA_VISIBLE_DEVICES=1\n"
            "lxc.environment = NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
            f"lxc.hook.mount = {HOOK} --root={self.driver.root} --debug={self.cli_log}\n")
        self.log = base / "lxc.log"

    @property
    def cli_log(self) -> Path:
        """The cli's --debug log (the hook's own option): in the rootfs, which the
        container's root may write."""
        return self.rootfs / "tmp" / "nvidia-container-cli.log"

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in (self.cli_log, self.log) if p.exists())

    def execute(self, script: str) -> subprocess.CompletedProcess:
        argv = [LXC_EXECUTE, "-P", str(self.lxcpath), "-n", "gpu", "-l", "INFO",
                "-o", str(self.log), "--", "/bin/sh", "-c", script]
        env = {"PATH": f"{self.path_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
        binds = [(f, target) for f, target in ((self.subuid, "/etc/subuid"),
                                               (self.subgid, "/etc/subgid")) if f]
        if binds:
            mounts = " && ".join(f"mount --bind {f} {t}" for f, t in binds)
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f'{mounts} && exec "$@"', "sh", *argv]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180,
                              cwd="/")


@pytest.fixture(scope="module")
def lxc(lxc_prerequisites):
    # Not pytest's tmp_path: its directories are root's 0700, which the container's root (an
    # unmapped uid on the host) cannot pass through to the driver files and the package.
    base = Path(tempfile.mkdtemp(prefix="nvd2-lxc-"))
    setup = None
    try:
        base.chmod(0o755)
        setup = Lxc(base)
        yield setup
    finally:
        if setup is not None:
            remove_cgroups(setup.cgroup)
        shutil.rmtree(base)


def test_lxc_hook_with_our_cli_gives_gpu_1_its_files_and_ld_cache(lxc):
    proc = lxc.execute(REPORT)
    assert proc.returncode == 0, f"{proc.stderr}\n{lxc.logs()}"
    seen = parse(proc.stdout)
    assert "/dev/nvidia0" not in seen.nodes
    assert_sees_exactly(seen, lxc.driver.root, [1])


def test_lxc_leaves_nothing_on_the_host(lxc):
    """After a run: no mount of the container in our namespace, its cgroups only under this
    test's names (removed with it), no process of it left."""
    proc = lxc.execute("true")
    assert proc.returncode == 0, f"{proc.stderr}\n{lxc.logs()}"
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        assert str(lxc.base) not in f.read()
    left = [p for p in cgroups_named("lxc.payload") + cgroups_named("lxc.monitor")
            if p.name.endswith(".gpu") or p.name == "gpu"]
    assert left == []
    remove_cgroups(lxc.cgroup)
    assert cgroups_named(lxc.cgroup) == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(lxc.lxcpath) not in ps.stdout
