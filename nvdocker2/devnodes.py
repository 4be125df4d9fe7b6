"""Device nodes that stay: `nvdocker2 system create-device-nodes` and
`create-dev-char-symlinks` (NVIDIA's `nvidia-ctk system` commands of those names).

`create_device_nodes` makes the NVIDIA control nodes the kernel modules do not make
themselves (nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools, the MIG `config` and
`monitor` caps nodes), with the majors the drivers registered in /proc/devices, so a CDI spec
generated at boot lists them even before a first CUDA call would have had nvidia-modprobe make
them. `create_dev_char_symlinks` links `/dev/char/MAJOR:MINOR -> ../NODE` for every NVIDIA
node (as udev does for the nodes it knows): with the systemd cgroup driver, `systemctl
daemon-reload` rebuilds a container's device rules from those links, and a node without one
is taken from running containers ("Failed to initialize NVML: Unknown Error").

Both plan everything first and change nothing when an entry is in the way (a file where a
node or link belongs), make only what is missing (a second run makes nothing), and open the
dev directory once, trusted as a program's folder would be, then work by descriptor: no
symlink planted under it is followed. Every node and link is made through nvdocker2.host.files.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from nvdocker2.errors import EnvironmentProblem
from nvdocker2.host import files

# Like NVIDIA's `existing` lister: /dev/nvidia* and /dev/nvidia-caps/nvidia-*, without the
# nodes it blocks (GDS, NVSwitch, nvlink are not GPU nodes a container's rules are built from).
BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
CAPS_DIR = "nvidia-caps"

# name, the /proc/devices driver whose major it takes, minor, mode (nvidia-modprobe's)
CONTROL_NODES = (
    ("nvidiactl", "nvidia-frontend", 255, 0o666),
    ("nvidia-modeset", "nvidia-frontend", 254, 0o666),
    ("nvidia-uvm", "nvidia-uvm", 0, 0o666),
    ("nvidia-uvm-tools", "nvidia-uvm", 1, 0o666),
)
MIG_CAPS = ("config", "monitor")  # /dev/nvidia-caps/nvidia-capN, N from mig-minors, mode 0400


@dataclass(frozen=True)
class Entry:
    """One node or link: its path (under the dev root), what it is, and whether it was made
    now (else it was there already)."""

    path: str
    what: str
    made: bool

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "what": self.what, "made": self.made}


@dataclass(frozen=True)
class Outcome:
    dev: str
    entries: tuple[Entry, ...] = ()
    note: str = ""  # why there was nothing to do

    @property
    def made(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.made)

    def to_json(self) -> dict[str, object]:
        return {"dev": self.dev, "made": [e.to_json() for e in self.made],
                "unchanged": [e.to_json() for e in self.entries if not e.made],
                "note": self.note or None}


def proc_majors(proc_root: str) -> dict[str, int]:
    """Driver name -> major of the character devices in PROC_ROOT/proc/devices ({} without)."""
    try:
        with open(os.path.join(proc_root, "proc/devices"), encoding="ascii",
                  errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    majors: dict[str, int] = {}
    section = ""
    for line in text.splitlines():
        if line.endswith(":"):
            section = line
            continue
        parts = line.split()
        if section.startswith("Character") and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return majors


def _mig_minors(proc_root: str) -> dict[str, int]:
    from nvdocker2.direct.discover import read_mig_minors

    return {k: v for k, v in read_mig_minors(os.path.abspath(proc_root)).items()
            if k in MIG_CAPS}


def _open_dev(dev_root: str) -> tuple[str, int]:
    """(DEV_ROOT/dev, a descriptor of it), trusted like a program's folder; exit 3 if not."""
    dev = os.path.join(os.path.abspath(dev_root), "dev")
    try:
        return dev, files.open_trusted_dir(dev)
    except files.Untrusted as err:
        raise EnvironmentProblem(f"{dev}: not trusted: {err}; nothing was made",
                                 "only root may be able to write the dev directory and the "
                                 "directories above it") from None
    except OSError as err:
        raise EnvironmentProblem(f"{dev}: {err.strerror}; nothing was made",
                                 "give --dev-root the directory that holds dev/ "
                                 "(default /)") from None


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _in_the_way(path: str, why: str) -> EnvironmentProblem:
    return EnvironmentProblem(f"{path}: {why}; nothing was made",
                              f"move {path} aside (what the NVIDIA driver makes belongs there),"
                              " then run this again")


def wanted_nodes(proc_root: str = "/") -> list[tuple[str, int, int, int]]:
    """(path under dev, major, minor, mode) of each node the loaded drivers call for."""
    majors = proc_majors(proc_root)
    major_of = {"nvidia-frontend": majors.get("nvidia-frontend", majors.get("nvidia")),
                "nvidia-uvm": majors.get("nvidia-uvm")}
    wanted = []
    for name, driver, minor, mode in CONTROL_NODES:
        if major_of[driver] is not None:
            wanted.append((name, major_of[driver], minor, mode))
    caps_major = majors.get("nvidia-caps")
    if caps_major is not None:
        for _cap, minor in sorted(_mig_minors(proc_root).items()):
            wanted.append((f"{CAPS_DIR}/nvidia-cap{minor}", caps_major, minor, 0o400))
    return wanted


def create_device_nodes(dev_root: str = "/", proc_root: str = "/") -> Outcome:
    """Make the control nodes and MIG config/monitor caps nodes the loaded drivers registered
    (PROC_ROOT/proc/devices) under DEV_ROOT/dev, those that are missing."""
    wanted = wanted_nodes(proc_root)
    dev, fd = _open_dev(dev_root)
    try:
        if not wanted:
            return Outcome(dev, note=f"{os.path.join(proc_root, 'proc/devices')} lists no "
                           "NVIDIA driver: nothing to make (is the nvidia module loaded?)")
        caps_fd = _caps_dir(dev, fd, any("/" in w[0] for w in wanted), make=False)
        plan = []
        for path, major, minor, mode in wanted:
            where = caps_fd if "/" in path else fd
            name = os.path.basename(path)
            st = None if where is None else _lstat(name, where)
            shown = f"{dev}/{path}"
            if st is None:
                plan.append((path, major, minor, mode, False))
            elif not stat.S_ISCHR(st.st_mode):
                raise _in_the_way(shown, "not a character device")
            elif (os.major(st.st_rdev), os.minor(st.st_rdev)) != (major, minor):
                raise _in_the_way(shown, f"device {os.major(st.st_rdev)}:"
                                  f"{os.minor(st.st_rdev)}, not {major}:{minor} as "
                                  "/proc/devices gives")
            else:
                plan.append((path, major, minor, mode, True))
        if caps_fd is None and any("/" in p[0] and not p[4] for p in plan):
            caps_fd = _caps_dir(dev, fd, True, make=True)
        entries = []
        for path, major, minor, mode, there in plan:
            if not there:
                where = caps_fd if "/" in path else fd
                try:
                    files.char_node_at(os.path.basename(path), mode, major, minor, where)
                except OSError as err:
                    raise EnvironmentProblem(f"{dev}/{path}: {err.strerror}",
                                             "run this as root") from None
            entries.append(Entry(f"{dev}/{path}", f"{major}:{minor}", not there))
        if caps_fd is not None:
            os.close(caps_fd)
        return Outcome(dev, tuple(entries))
    finally:
        os.close(fd)


def _caps_dir(dev: str, fd: int, wanted: bool, *, make: bool) -> int | None:
    """A descriptor of dev/nvidia-caps (made 0755 when `make`), None where there is none."""
    if not wanted:
        return None
    try:
        if make and _lstat(CAPS_DIR, fd) is None:
            files.make_dir_at(CAPS_DIR, 0o755, fd)
        return files.open_dir_at(CAPS_DIR, fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _in_the_way(f"{dev}/{CAPS_DIR}", f"not a directory ({err.strerror})") from None


def nvidia_nodes(dev: str, fd: int) -> list[tuple[str, int, int]]:
    """(name under dev, major, minor) of each NVIDIA node: dev/nvidia* and
    dev/nvidia-caps/nvidia-*, character devices only, never through a symlink."""
    found = []
    for name in sorted(os.listdir(fd)):
        if name.startswith("nvidia") and not name.startswith(BLOCKED_PREFIXES):
            st = _lstat(name, fd)
            if st is not None and stat.S_ISCHR(st.st_mode):
                found.append((name, os.major(st.st_rdev), os.minor(st.st_rdev)))
    caps_fd = _caps_dir(dev, fd, True, make=False) if _is_dir(CAPS_DIR, fd) else None
    if caps_fd is not None:
        try:
            for name in sorted(os.listdir(caps_fd)):
                st = _lstat(name, caps_fd) if name.startswith("nvidia-") else None
                if st is not None and stat.S_ISCHR(st.st_mode):
                    found.append((f"{CAPS_DIR}/{name}", os.major(st.st_rdev),
                                  os.minor(st.st_rdev)))
        finally:
            os.close(caps_fd)
    return found


def _is_dir(name: str, fd: int) -> bool:
    st = _lstat(name, fd)
    return st is not None and stat.S_ISDIR(st.st_mode)


def create_dev_char_symlinks(dev_root: str = "/") -> Outcome:
    """Link DEV_ROOT/dev/char/MAJOR:MINOR -> ../NODE for each NVIDIA node that lacks one. A
    link that already leads to its node (udev's, or an absolute one) is left as it is; a
    symlink leading elsewhere is replaced; anything else there stops the run before any
    change."""
    dev, fd = _open_dev(dev_root)
    try:
        nodes = nvidia_nodes(dev, fd)
        if not nodes:
            return Outcome(dev, note=f"no NVIDIA device nodes in {dev}: nothing to link")
        char_fd = None
        if _lstat("char", fd) is not None:
            try:
                char_fd = files.open_dir_at("char", fd)
            except OSError as err:
                raise _in_the_way(f"{dev}/char", f"not a directory ({err.strerror}); a "
                                  "symlink there is never followed") from None
        try:
            plan = []
            for name, major, minor in nodes:
                link, target = f"{major}:{minor}", f"../{name}"
                st = None if char_fd is None else _lstat(link, char_fd)
                if st is not None and not stat.S_ISLNK(st.st_mode):
                    raise _in_the_way(f"{dev}/char/{link}", "not a symlink")
                plan.append((link, target, st is not None and _leads_to(
                    char_fd, link, fd, name)))
            if char_fd is None:
                files.make_dir_at("char", 0o755, fd)
                char_fd = files.open_dir_at("char", fd)
            entries = []
            for link, target, there in plan:
                if not there:
                    files.replace_symlink_at(target, link, char_fd)
                entries.append(Entry(f"{dev}/char/{link}", target, not there))
            return Outcome(dev, tuple(entries))
        except PermissionError as err:
            raise EnvironmentProblem(f"{dev}/char: {err.strerror}", "run this as root") from None
        finally:
            if char_fd is not None:
                os.close(char_fd)
    finally:
        os.close(fd)


def _leads_to(char_fd: int, link: str, dev_fd: int, name: str) -> bool:
    """Whether the symlink `link` is `../NAME` or otherwise resolves to that same node."""
    if os.readlink(link, dir_fd=char_fd) == f"../{name}":
        return True
    try:
        there = os.stat(link, dir_fd=char_fd)
        node = os.stat(name, dir_fd=dev_fd, follow_symlinks=False)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (node.st_dev, node.st_ino)


def missing_char_links(dev_root: str = "/") -> tuple[list[str], int]:
    """For doctor: (`/dev/char/MAJ:MIN -> NODE` of each NVIDIA node without a link that
    leads to it, how many NVIDIA nodes there are); read only."""
    dev = os.path.join(os.path.abspath(dev_root), "dev")
    try:
        fd = os.open(dev, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return [], 0
    try:
        nodes = nvidia_nodes(dev, fd)
        try:
            char_fd = files.open_dir_at("char", fd)
        except OSError:
            char_fd = None
        missing = []
        for name, major, minor in nodes:
            link = f"{major}:{minor}"
            st = None if char_fd is None else _lstat(link, char_fd)
            if st is None or not stat.S_ISLNK(st.st_mode) or not _leads_to(
                    char_fd, link, fd, name):
                missing.append(f"/dev/char/{link} → /dev/{name}")
        if char_fd is not None:
            os.close(char_fd)
        return missing, len(nodes)
    finally:
        os.close(fd)


def create_before_spec() -> Outcome | None:
    """`cdi refresh`'s first step: the control nodes under the driver root of config.toml,
    whose /proc the spec is generated from too (None where config.toml does not load: the
    spec's own generation then says why)."""
    from nvdocker2 import toolkit_config

    try:
        root = toolkit_config.load().runtime.driver_root
    except toolkit_config.ConfigError:
        return None
    return create_device_nodes(root, root)
