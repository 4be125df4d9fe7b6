"""The running dockerd as a process: its pid, its command line, the flags it was started with.

dockerd refuses a daemon.json key that it also got as a command-line flag, at start and on
reload, whether or not the values agree. Reading /proc/PID/cmdline lets the installer refuse
such a file before writing it. Everything here takes a `proc` root so tests can point it at a
directory; nothing here guesses: when the pid or its cmdline cannot be read, callers get None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2.engines.docker.service.api import DockerHost
from nvdocker2.engines.peer import INIT_PID, Peer, is_named, socket_peer, untrusted_owner
from nvdocker2.errors import EnvironmentProblem

# dockerd 20.10 .. 29 shorthand flags (pflag), by their long name.
SHORTHANDS = {
    "D": "debug",
    "l": "log-level",
    "H": "host",
    "G": "group",
    "p": "pidfile",
    "b": "bridge",
    "s": "storage-driver",
    "g": "graph",
    "v": "version",
    "h": "help",
}

# Flags whose daemon.json key differs from the flag name (opts.NamedOption in moby).
NAMED_OPTIONS = {
    "host": "hosts",
    "label": "labels",
    "registry-mirror": "registry-mirrors",
    "insecure-registry": "insecure-registries",
    "storage-opt": "storage-opts",
    "exec-opt": "exec-opts",
    "dns-opt": "dns-opts",
    "log-opt": "log-opts",
    "default-ulimit": "default-ulimits",
    "authorization-plugin": "authorization-plugins",
    "node-generic-resource": "node-generic-resources",
    "cluster-store-opt": "cluster-store-opts",
    "add-runtime": "runtimes",
    "default-address-pool": "default-address-pools",
    "cdi-spec-dir": "cdi-spec-dirs",
}

# Flags that take no value (`--debug`, `--iptables=false`): a following word is not theirs.
BOOL_FLAGS = frozenset(
    {
        "debug",
        "experimental",
        "icc",
        "init",
        "ip-forward",
        "ip-forward-no-drop",
        "ip-masq",
        "iptables",
        "ip6tables",
        "ipv6",
        "live-restore",
        "no-new-privileges",
        "raw-logs",
        "rootless",
        "selinux-enabled",
        "tls",
        "tlsverify",
        "userland-proxy",
        "cri-containerd",
        "validate",
        "version",
        "help",
        "allow-direct-routing",
        "bridge-accept-fwmark",
    }
)

# Keys dockerd merges from flag and file instead of refusing (moby's skipDuplicates).
MERGED_KEYS = frozenset({"runtimes"})

# Nested objects whose inner keys are not checked as top-level keys (moby's flatOptions and
# the structured keys); every other nested object is flattened, as `proxies` is.
FLAT_OBJECTS = frozenset(
    {
        "runtimes",
        "log-opts",
        "default-ulimits",
        "features",
        "builder",
        "cluster-store-opts",
        "default-network-opts",
    }
)


@dataclass(frozen=True)
class DockerdProcess:
    """A running dockerd as far as /proc shows it."""

    pid: int
    argv: tuple[str, ...]
    exe: str | None  # what /proc/PID/exe names: shown, never run (docs/reference.md §8)

    def flag_keys(self) -> dict[str, str]:
        """daemon.json key -> the flag that set it, for every flag on the command line."""
        return flags_to_keys(self.argv[1:])

    def config_file(self) -> str | None:
        """The value of --config-file, when dockerd was given one."""
        return flag_value(self.argv[1:], "config-file")


def read_pidfile(path: Path) -> int | None:
    """The pid in a pidfile, or None when it is missing, unreadable or not a number."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def is_dockerd(pid: int, proc: Path = Path("/proc"), euid: int | None = None) -> bool:
    """True when /proc/PID is a dockerd (by comm, else by the executable's name) that root
    (or, for rootless Docker, the invoking user) owns.

    A stale pidfile can name any process after a reboot, and any user can name a program
    `dockerd`: signalling it blindly could hang up an unrelated program, and trusting it would
    let a user choose what root runs (docs/reference.md §8).
    """
    if untrusted_owner(pid, proc, euid) is not None:
        return False
    return is_named(pid, "dockerd", proc)


def read_process(
    pid: int, proc: Path = Path("/proc"), euid: int | None = None
) -> DockerdProcess | None:
    """The dockerd behind `pid`, or None when it is not a trusted dockerd or cannot be read."""
    if not is_dockerd(pid, proc, euid):
        return None
    base = Path(proc) / str(pid)
    try:
        raw = (base / "cmdline").read_bytes()
    except OSError:
        return None
    argv = tuple(a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a)
    if not argv:
        return None
    try:
        exe: str | None = os.readlink(base / "exe").replace(" (deleted)", "")
    except OSError:
        exe = None
    return DockerdProcess(pid=pid, argv=argv, exe=exe)


def start_time(pid: int, proc: Path = Path("/proc")) -> str | None:
    """When `pid` started (field 22 of /proc/PID/stat), or None when no live process has that
    pid (gone, or a zombie): a pid and its start time name one process, even across pid reuse."""
    try:
        stat = (Path(proc) / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def parse_flags(args: tuple[str, ...] | list[str]) -> list[tuple[str, str | None]]:
    """(long flag name, value) for each flag in dockerd's argv (without argv[0]), like pflag."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if eq:
                out.append((name, value))
            elif name in BOOL_FLAGS or i >= len(args):
                out.append((name, None))
            else:
                out.append((name, args[i]))
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            j = 0
            while j < len(letters):
                letter = letters[j]
                name = SHORTHANDS.get(letter, letter)
                rest = letters[j + 1 :]
                if name in BOOL_FLAGS:
                    out.append((name, None))
                    j += 1
                    continue
                if rest.startswith("="):
                    out.append((name, rest[1:]))
                elif rest:
                    out.append((name, rest))
                elif i < len(args):
                    out.append((name, args[i]))
                    i += 1
                else:
                    out.append((name, None))
                break
    return out


def flags_to_keys(args: tuple[str, ...] | list[str]) -> dict[str, str]:
    """daemon.json key -> `--flag` for each flag given, as dockerd's conflict check maps them."""
    keys: dict[str, str] = {}
    for name, _ in parse_flags(args):
        keys.setdefault(NAMED_OPTIONS.get(name, name), f"--{name}")
    return keys


def flag_value(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    value = None
    for name, val in parse_flags(args):
        if name == flag:
            value = val
    return value


def file_keys(candidate: dict[str, Any]) -> set[str]:
    """The keys dockerd's conflict check sees in a daemon.json document (nested ones flattened)."""
    keys: set[str] = set()
    for key, value in candidate.items():
        if isinstance(value, dict) and key not in FLAT_OBJECTS:
            keys.update(str(k) for k in value)
        else:
            keys.add(key)
    return keys


def flag_conflicts(candidate: dict[str, Any], process: DockerdProcess) -> list[tuple[str, str]]:
    """(key, flag) pairs that dockerd would refuse: set in the file and on its command line."""
    by_key = process.flag_keys()
    return sorted(
        (key, by_key[key])
        for key in file_keys(candidate)
        if key in by_key and key not in MERGED_KEYS
    )


def trusted_peer(
    host: DockerHost, proc: Path = Path("/proc"), euid: int | None = None
) -> Peer | None:
    """Who serves `host`'s unix socket (None: tcp, or nothing answers); EnvironmentProblem
    when it is a process we must not trust (another user's), so nothing it says is used."""
    sock = host.socket_path
    peer = socket_peer(sock) if sock is not None else None
    if peer is not None and peer.pid != INIT_PID:
        why = untrusted_owner(peer.pid, proc, euid, peer.uid)
        if why is not None:
            raise EnvironmentProblem(
                f"{sock} is served by a process nvdocker2 does not trust ({why}); "
                "nothing was changed",
                "point --docker-host at the socket of root's dockerd (unix:///var/run/"
                "docker.sock), or run nvdocker2 as the user whose rootless dockerd serves it",
            )
    return peer


@dataclass(frozen=True)
class Served:
    """The dockerd behind the Engine API, as far as it could be identified (reference §8)."""

    process: DockerdProcess | None
    how: str  # how it was found, or why not
    by_socket: bool = False  # found as the socket's peer (or systemd's MainPID behind it)


def identify(
    host: DockerHost,
    hint: int | None,
    hint_name: str,
    proc: Path = Path("/proc"),
    euid: int | None = None,
) -> Served:
    """The dockerd serving `host`: the peer of its unix socket (`SO_PEERCRED`); `hint` (the
    pidfile's pid or systemd's MainPID) must agree with it, and is taken alone only when the
    socket cannot tell (tcp, systemd socket activation, a root proxy in front of dockerd).

    Raises EnvironmentProblem when the socket is served by a process we must not trust, or
    when the hint names another dockerd than the one serving the socket.
    """
    sock = host.socket_path
    peer = trusted_peer(host, proc, euid)
    if peer is not None and peer.pid != INIT_PID:
        process = read_process(peer.pid, proc, euid)
        if process is not None:
            if hint is not None and hint != peer.pid:
                raise EnvironmentProblem(
                    f"{hint_name} names pid {hint}, but the dockerd serving {sock} is pid "
                    f"{peer.pid}; nothing was changed",
                    "point --docker-host and --pidfile (or the unit) at the same dockerd",
                )
            return Served(process, f"pid {peer.pid} serves {sock}", True)
    if hint is None:
        where = sock or host.url
        return Served(None, f"no dockerd process identified behind {where}")
    process = read_process(hint, proc, euid)
    if process is None:
        return Served(None, f"{hint_name} names pid {hint}, which is not a trusted dockerd")
    socket_activated = peer is not None and peer.pid == INIT_PID
    return Served(process, f"pid {hint} from {hint_name}", socket_activated)
