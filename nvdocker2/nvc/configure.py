"""`nvidia-container-cli configure`: give a created, not yet started container its GPUs.

What it does, in this order (docs/nvidia-container-cli.md):

1. reads the driver under `--root` with direct mode's discovery and picks, as direct mode
   does, the GPU nodes `--device` names, the control nodes and the files the capabilities
   bring (`nvdocker2.direct.spec.make_plan`), and checks `--require`;
2. unless `--no-cgroups`, allows those nodes in the container's device cgroup (cgroup v1;
   on cgroup v2 it refuses, as a device cgroup there is a BPF program this cli does not load);
3. enters the mount namespace of `--pid` (without it, as LXC's mount hook runs it, it stays in
   its own, which is the container's) and bind-mounts each node and file at its place under
   ROOTFS: every place is resolved inside ROOTFS without following the image's symlinks out
   (`nvdocker2.direct.rootfs`), missing directories and files are made there, a symlink or a
   directory in the way is refused, and each mount is made through descriptors, then made
   read-only, nosuid and nodev (device nodes: nosuid, noexec);
4. makes the libraries' soname links and refreshes the image's ld cache with the host's
   ldconfig, confined exactly as the direct/CDI hook confines it (`direct.hook.update_ldcache`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from nvdocker2.direct.discover import DeviceNode, Discovery
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.rootfs import UnsafePath, make_dir_in_root, resolve_in_root

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
CLONE_NEWNS = 0x00020000
IMEX_DIR = "/dev/nvidia-caps-imex-channels"


class NvcError(Exception):
    """What NVIDIA's cli reports as `KIND error: MESSAGE`; `hint` says what to do."""

    def __init__(self, kind: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Bind:
    """One bind mount: the host file `source` at `dest` (in the container); `node` for a
    device node (stays writable)."""

    source: str
    dest: str
    node: bool


@dataclass(frozen=True)
class Work:
    """All that configure does to one container, decided before touching it."""

    binds: tuple[Bind, ...]
    nodes: tuple[DeviceNode, ...]
    links: tuple[tuple[str, str], ...]
    folders: tuple[str, ...]


def plan(discovery: Discovery, devices: str | None, capabilities: set[str],
         imex: tuple[int, ...] = (), devbind: bool = True) -> Work:
    """What to mount for the request; NvcError ("device error") for what is not there."""
    from nvdocker2.direct.spec import make_plan

    ids = devices.split(",") if devices else []
    try:
        chosen = make_plan(discovery, ids, capabilities)
    except DirectError as err:
        raise NvcError("device", err.message.replace("NVIDIA_VISIBLE_DEVICES: ", ""),
                       err.hint) from None
    nodes = list(chosen.nodes)
    for channel in imex:
        nodes.append(_imex_node(discovery.driver_root, channel))
    binds = [Bind(n.host_path, n.path, True) for n in nodes] if devbind else []
    binds += [Bind(f.host_path, f.path, False) for f in chosen.files]
    links = []
    folders: list[str] = []
    for f in chosen.files:
        if f.kind != "lib":
            continue
        folder = os.path.dirname(f.path)
        if folder not in folders:
            folders.append(folder)
        links += [(f"{folder}/{link}", os.path.basename(f.path)) for link in f.links]
    return Work(tuple(binds), tuple(nodes), tuple(links), tuple(folders))


def _imex_node(driver_root: str, channel: int) -> DeviceNode:
    from nvdocker2.direct.discover import host_path

    path = f"{IMEX_DIR}/channel{channel}"
    where = host_path(driver_root, path)
    try:
        st = os.stat(where)
    except OSError as err:
        raise NvcError("device", f"IMEX channel {channel}: cannot stat {where}: {err.strerror}",
                       "create the IMEX channel device nodes (nvidia-modprobe -i N)") from None
    if not stat.S_ISCHR(st.st_mode):
        raise NvcError("device", f"IMEX channel {channel}: {where} is not a character device")
    return DeviceNode(path, where, os.major(st.st_rdev), os.minor(st.st_rdev),
                      stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def allow_devices(pid: int | str, nodes: tuple[DeviceNode, ...], proc: str = "/proc") -> list[str]:
    """Allow `nodes` in the cgroup v1 device controller of `pid` (`"self"`: this process's);
    the lines written."""
    from nvdocker2.direct.confine import unescape_mountinfo
    from nvdocker2.host.files import append_text

    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
        with open(f"{proc}/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            mountinfo = f.read().splitlines()
    except OSError as err:
        raise NvcError("cgroup", f"cannot read the cgroups of process {pid}: {err.strerror}"
                       ) from None
    group = next((ln.split(":", 2)[2] for ln in lines
                  if ln.count(":") >= 2 and "devices" in ln.split(":", 2)[1].split(",")), None)
    mount = None
    for line in mountinfo:
        fields = line.split(" ")
        if " - cgroup " in line and "devices" in fields[-1].split(","):
            mount = (unescape_mountinfo(fields[3]), unescape_mountinfo(fields[4]))
            break
    if group is None or mount is None:
        raise NvcError(
            "cgroup", "no cgroup v1 device controller for the container (cgroup v2 needs a BPF"
            " device program, which this nvidia-container-cli does not load)",
            "pass --no-cgroups (no-cgroups = true in config.toml's [nvidia-container-cli]"
            " table) and let the container runtime grant the GPU devices")
    root, point = mount
    rel = group[len(root):] if root != "/" and group.startswith(root) else group
    target = os.path.join(point, rel.lstrip("/"), "devices.allow")
    written = []
    for n in nodes:
        line = f"c {n.major}:{n.minor} rwm\n"
        try:
            append_text(target, line, 0o644)
        except OSError as err:
            raise NvcError("cgroup", f"cannot write {target}: {err.strerror}") from None
        written.append(line.strip())
    return written


def enter_mount_namespace(pid: int, proc: str = "/proc") -> None:
    """Join the mount namespace of `pid` unless this process is in it already."""
    from nvdocker2.direct.confine import libc_calls

    ns = f"{proc}/{pid}/ns/mnt"
    try:
        if os.stat(ns).st_ino == os.stat(f"{proc}/self/ns/mnt").st_ino:
            return
        fd = os.open(ns, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise NvcError("container", f"cannot open {ns}: {err.strerror}",
                       "is the container's process still running?") from None
    try:
        libc_calls().setns(fd, CLONE_NEWNS, f"entering the mount namespace of process {pid}")
    except OSError as err:
        raise NvcError("container", str(err.strerror or err)) from None
    finally:
        os.close(fd)


def bind_all(rootfs: str, binds: tuple[Bind, ...], log: list[str]) -> set[tuple[int, int]]:
    """Make each bind mount under `rootfs`; (st_dev, st_ino) of the library sources."""
    if not os.path.isdir(rootfs) or os.path.islink(rootfs):
        raise NvcError("container", f"{rootfs} is not a directory", None)
    sources = set()
    for b in binds:
        try:
            bind_one(rootfs, b)
        except UnsafePath as err:
            raise NvcError("mount", err.message, err.hint) from None
        except OSError as err:
            raise NvcError("mount", f"{b.source} at {b.dest}: {err.strerror or err}") from None
        log.append(f"mounted {b.source} at {rootfs.rstrip('/')}{b.dest}")
        if not b.node:
            st = os.stat(b.source)
            sources.add((st.st_dev, st.st_ino))
    return sources


def bind_one(rootfs: str, b: Bind) -> None:
    """Bind `b.source` onto `b.dest` under `rootfs`, never through the image's symlinks."""
    from nvdocker2.direct.confine import libc_calls
    from nvdocker2.host.files import create_exclusive

    resolved = resolve_in_root(rootfs, b.dest, follow_final=False, refuse_escape=True)
    parent, name = os.path.split(resolved)
    dir_fd = make_dir_in_root(rootfs, parent)
    src = target = -1
    try:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            os.close(create_exclusive(name, 0o644 if not b.node else 0o600, dir_fd=dir_fd))
        else:
            if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory"
                raise UnsafePath(f"{resolved} in the container is {what}; refusing to mount"
                                 " onto it", "remove it from the image")
        flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
        src = os.open(b.source, os.O_PATH | os.O_CLOEXEC)
        target = os.open(name, flags, dir_fd=dir_fd)
        libc = libc_calls()
        libc.mount(f"/proc/self/fd/{src}".encode(), f"/proc/self/fd/{target}", None, MS_BIND,
                   None, f"binding {b.source}")
        os.close(target)
        target = os.open(name, flags, dir_fd=dir_fd)  # now the new mount's root
        extra = MS_NOEXEC if b.node else MS_RDONLY | MS_NODEV
        libc.mount(None, f"/proc/self/fd/{target}", None,
                   MS_BIND | MS_REMOUNT | MS_NOSUID | extra, None, f"remounting {resolved}")
    finally:
        for fd in (src, target, dir_fd):
            if fd >= 0:
                os.close(fd)
