"""The one door through which nvdocker2 runs a program (dockerd, containerd, ctr, crictl, crio,
systemctl, journalctl, service, ldconfig, a runtime's interpreter, nvidia-container-cli).

What every program run here can rely on, whoever calls:

- It is found by absolute path, or on PATH among the entries that no user other than root (or
  the invoking user, for rootless engines) could have placed it in: the file and every
  directory on the way to it, symlinks followed, owned by a trusted user and not writable by
  others (`unsafe_to_run`). A planted program earlier on PATH is passed over, never run.
- It gets a scrubbed environment: PATH (only its safe entries), plus what the caller passes
  by name; no LD_*, PYTHON*, BASH_ENV or any other variable of the caller's.
- It starts in `/`, never in the caller's working directory, with stdin closed (or the given
  input), in a session of its own, killed as a group when it overstays its timeout.
- A Python interpreter always gets `-I` (isolated: no PYTHON* variables, no user site, no
  script or working directory on sys.path).

Stdlib only and cheap to import (os, stat and sys, which every Python start has loaded;
`subprocess` is imported on the first `run`): the container start path uses it too. The
runtime's final exec of runc/crun and the hook's of nvidia-container-cli go through
`exec_program` (the same lookup and check), direct mode's ldconfig through `fork_exec` (checked
before the fork, confined in the child, then exec'd).

One exec of a program is not made here, and cannot be: the prestart hook the runtime writes
at `create` (nvdocker2.runtime.prestart) is a few lines of `/bin/sh` that runc runs and that
execs nvidia-container-cli by the absolute path decided at `create`. That path passed
`unsafe_to_run` at `create` (nvdocker2.hook.cli_argv.find_cli); the script runs no Python.
"""

from __future__ import annotations

import os
import stat
import sys
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:  # imported on every container start: no typing at run time
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Callable, NoReturn, Union

# The PATH searched when the caller has none, and the one programs fall back to.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_MAX_LINKS = 40
# Passed on to a program only for a non-root caller (the user's systemd and D-Bus).
_USER_SESSION = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")
# The stand-ins of the test suite take their knobs from these (only with its switch on).
_TEST_PREFIX = "NVD2_"
# The test suite's switch (nvdocker2.host.testing says what it is and what it turns on).
HOOKS_SWITCH = "nvdocker2-test-hooks"
_hooks: bool | None = None


class NotRun(OSError):
    """The program was not run: not found (`missing`), or not safe to run (message says why;
    `reason` is the why alone)."""

    def __init__(self, message: str, missing: bool = False, reason: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing
        self.reason = message if reason is None else reason


class Timeout(OSError):
    """The program ran past its timeout and was killed with its process group."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        super().__init__(f"{argv[0]} did not finish within {timeout:g}s")
        self.argv = tuple(argv)
        self.timeout = timeout


class Ran:
    """A finished program: its argv (as run), exit status and output (str with text=True)."""

    __slots__ = ("argv", "returncode", "stdout", "stderr")

    def __init__(self, argv: tuple[str, ...], returncode: int, stdout: Any, stderr: Any) -> None:
        self.argv, self.returncode, self.stdout, self.stderr = argv, returncode, stdout, stderr

    def __repr__(self) -> str:
        return f"Ran(argv={self.argv!r}, returncode={self.returncode})"


def is_python(exe: str) -> bool:
    """True for a Python interpreter's name: python, python3, python3.11, ..."""
    name = os.path.basename(exe)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


# --- who may have put a program where it is -------------------------------------------------


class Ids:
    """Whose files and processes count as root's, or ours, in this process's user namespace
    (`trusted_ids`). What a caller may rely on:

    - `uids`: uid 0, the caller's euid, and the kernel's overflow uid only where it stands for
      unmapped host ids alone: the host's root is not mapped here and no user of this
      namespace is mapped to the overflow uid either (a rootless engine's `0 1000 1`). In the
      initial namespace (`0 0 4294967295`) the overflow uid is mapped: it is just nobody.
    - `gids`: gid 0, and the overflow gid on the same terms (gid_map).
    - `shared`: the overflow uid where the host's root shows as it here while a user of this
      namespace is mapped to it too (a standard 65536-id map: an LXD or Incus container,
      Sysbox, rootless Podman's `1 100000 65536`). Not trusted as such: a file showing it is
      root's only where the kernel says its owner is unmapped (`_unmapped_owner`), which it
      can say only to a caller holding CAP_FOWNER here; None otherwise.
    - `root_mapped`: whether the host's (the parent namespace's) root is mapped here.
    """

    __slots__ = ("uids", "gids", "shared", "root_mapped")

    def __init__(self, uids: frozenset[int], gids: frozenset[int], shared: int | None,
                 root_mapped: bool) -> None:
        self.uids, self.gids, self.shared, self.root_mapped = uids, gids, shared, root_mapped

    def __repr__(self) -> str:
        return (f"Ids(uids={sorted(self.uids)}, gids={sorted(self.gids)}, "
                f"shared={self.shared}, root_mapped={self.root_mapped})")


_CAP_FOWNER = 3
# What /proc says about this namespace, read once: (extra uids, extra gids, shared uid, root
# mapped); False: not read yet.
_unmapped: tuple[frozenset[int], frozenset[int], int | None, bool] | bool = False


def _id_map(path: str) -> list[tuple[int, int, int]]:
    """The (inside, outside, count) lines of a uid_map or gid_map. Bytes, not text: a text file
    would import an encoding at every container start."""
    with open(path, "rb") as f:
        maps = [tuple(int(n) for n in line.split()) for line in f if line.strip()]
    if any(len(m) != 3 for m in maps):
        raise ValueError(f"{path}: not a map")
    return maps  # type: ignore[return-value]


def _maps_inside(maps: list[tuple[int, int, int]], i: int) -> bool:
    return any(first <= i < first + count for first, _, count in maps)


def _maps_outside(maps: list[tuple[int, int, int]], i: int) -> bool:
    return any(first <= i < first + count for _, first, count in maps)


def _read_namespace(proc: str) -> tuple[frozenset[int], frozenset[int], int | None, bool]:
    """(extra uids, extra gids, shared uid, root mapped) of `proc`/self; where any of it cannot
    be read, nothing more than root and the caller is trusted."""
    try:
        uid_map = _id_map(f"{proc}/self/uid_map")
    except (OSError, ValueError):
        return frozenset(), frozenset(), None, True
    if _maps_outside(uid_map, 0):
        return frozenset(), frozenset(), None, True
    try:
        gid_map = _id_map(f"{proc}/self/gid_map")
        overflow = []
        for name in ("overflowuid", "overflowgid"):
            with open(f"{proc}/sys/kernel/{name}", "rb") as f:
                overflow.append(int(f.read()))
    except (OSError, ValueError):
        return frozenset(), frozenset(), None, False
    uid, gid = overflow
    gids = frozenset() if _maps_outside(gid_map, 0) or _maps_inside(gid_map, gid) else {gid}
    if not _maps_inside(uid_map, uid):
        return frozenset({uid}), frozenset(gids), None, False
    return frozenset(), frozenset(gids), uid if _may_ask_owner(proc) else None, False


def _may_ask_owner(proc: str) -> bool:
    """Whether this process holds CAP_FOWNER in its namespace: then the kernel refuses it
    O_NOATIME on a file exactly when the file's owner is unmapped (`_unmapped_owner`)."""
    try:
        with open(f"{proc}/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_FOWNER & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def trusted_ids(euid: int | None = None, proc: str = "/proc") -> Ids:
    """Which uids and gids count as root's, or ours (`euid`, default this process's), in the
    user namespace `proc` describes (its self/uid_map, gid_map, sys/kernel/overflow*): see
    `Ids`. Read once for /proc; another `proc` (a test's fake one) is read each time."""
    global _unmapped
    euid = os.geteuid() if euid is None else euid
    if proc != "/proc":
        ns = _read_namespace(proc)
    else:
        if _unmapped is False:
            _unmapped = _read_namespace(proc)
        ns = _unmapped  # type: ignore[assignment]
    uids, gids, shared, root_mapped = ns
    return Ids(uids | {0, euid}, gids | {0}, None if shared == euid else shared, root_mapped)


def unmapped_owner() -> tuple[int, int] | None:
    """(uid, gid) the files of unmapped owners show as, where they count as root's
    (`trusted_ids`: the overflow ids, in a namespace that maps neither the host's root nor
    them); None elsewhere."""
    ids = trusted_ids(0)
    uid, gid = sorted(ids.uids - {0}), sorted(ids.gids - {0})
    return (uid[0], gid[0]) if uid and gid else None


def rootless() -> bool:
    """Whether this process runs rootless: as a user other than root, or as the root of a user
    namespace that does not map the host's root (a rootless engine's runtime and hooks)."""
    return os.geteuid() != 0 or not trusted_ids().root_mapped


def trusted_uids(euid: int | None = None) -> frozenset[int]:
    """`trusted_ids(euid).uids`: root, the caller, and the overflow uid only where it stands
    for unmapped owners alone."""
    return trusted_ids(euid).uids


def _others_may_write(st: os.stat_result, ids: Ids) -> bool:
    """Writable by someone untrusted: by everyone, or by a group other than root's."""
    if not st.st_mode & stat.S_IWGRP:
        return bool(st.st_mode & stat.S_IWOTH)
    return bool(st.st_mode & stat.S_IWOTH) or st.st_gid not in ids.gids


def _unmapped_owner(entry: str, st: os.stat_result, ids: Ids) -> bool:
    """Whether `entry` (lstat `st`), showing the `shared` overflow uid, belongs to an unmapped
    owner (the host's root, say) rather than to the user mapped to that uid. The kernel lets a
    holder of CAP_FOWNER open a file O_NOATIME unless its owner is unmapped (EPERM); the open
    reads nothing and changes nothing. Only files and directories are asked."""
    if ids.shared is None or st.st_uid != ids.shared:
        return False
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)
    try:
        os.close(os.open(entry, flags))
    except PermissionError as exc:
        if exc.errno != 1:  # EACCES: not readable, nothing learnt
            return False
        try:
            again = os.lstat(entry)
        except OSError:
            return False
        return (again.st_dev, again.st_ino, again.st_uid) == (st.st_dev, st.st_ino, st.st_uid)
    except OSError:
        return False
    return False  # opened: its owner is mapped


def _owned(entry: str, st: os.stat_result, trusted: frozenset[int], ids: Ids,
           link_ok: bool = True) -> bool:
    """Whether `entry` belongs to a trusted owner: one of `trusted`, or, showing the `shared`
    overflow uid, an unmapped one (the kernel's word). A symlink's owner cannot change where it
    leads, so one showing that uid counts too (`link_ok`) in a directory no one else can
    write: only that directory's trusted owner could have put it there."""
    if st.st_uid in trusted:
        return True
    if ids.shared is None or st.st_uid != ids.shared:
        return False
    if stat.S_ISLNK(st.st_mode):
        return link_ok
    return _unmapped_owner(entry, st, ids)


def unsafe_to_run(
    path: Union[str, "os.PathLike[str]"], euid: int | None = None, want_dir: bool = False,
    owners: Iterable[int] | None = None,
) -> str | None:
    """Why the file at `path` must not be trusted (run, or read as code), or None when safe.

    Walks the path from `/`, following symlinks: every directory must be owned by a trusted
    user and not writable by others (or be sticky, with the entry inside owned by a trusted
    user), and the file itself (a directory with `want_dir`) owned by a trusted user and not
    writable by others. `owners` narrows who the file itself may belong to (a user's own
    settings: never the overflow owner of a user namespace, who may be any user of the host).
    """
    ids = trusted_ids(euid)
    trusted = ids.uids
    mine = trusted if owners is None else frozenset(owners)
    pending = os.fspath(path)
    if not pending.startswith("/"):
        return f"{pending} is not an absolute path"
    links = 0
    while True:
        parts = [p for p in pending.split("/") if p not in ("", ".")]
        current = "/"
        try:
            parent = os.lstat("/")
        except OSError as exc:
            return f"cannot read /: {exc.strerror}"
        if not _owned("/", parent, trusted, ids) or _others_may_write(parent, ids):
            return "/ is writable by other users"
        if not parts and want_dir:
            return None
        restart = None
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            if name == "..":  # every link up to here is resolved: `..` is the real parent
                current = os.path.dirname(current)
                parent = os.lstat(current)
                if last:  # the directory climbed into is the one to check
                    if not want_dir:
                        return f"{path} is not a file"
                    return f"{current} is writable by other users" if _others_may_write(
                        parent, ids) else None
                continue
            entry = os.path.join(current, name)
            try:
                st = os.lstat(entry)
            except OSError as exc:
                return f"cannot read {entry}: {exc.strerror}"
            if _others_may_write(parent, ids):
                sticky = bool(parent.st_mode & stat.S_ISVTX)
                if not sticky or not _owned(entry, st, trusted, ids, link_ok=False):
                    return f"{current} is writable by other users"
            if not (_owned(entry, st, trusted, ids) if owners is None or not last
                    else st.st_uid in mine):
                return f"{entry} belongs to uid {st.st_uid}"
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    return f"{path}: too many symbolic links"
                target = os.readlink(entry)
                base = target if target.startswith("/") else os.path.join(current, target)
                restart = os.path.join(base, *parts[i + 1 :])
                break
            if last:
                if want_dir:
                    if not stat.S_ISDIR(st.st_mode):
                        return f"{entry} is not a directory"
                    if _others_may_write(st, ids):
                        return f"{entry} is writable by other users"
                    return None
                if not stat.S_ISREG(st.st_mode):
                    return f"{entry} is not a regular file"
                if _others_may_write(st, ids):
                    return f"{entry} is writable by other users"
                return None
            if not stat.S_ISDIR(st.st_mode):
                return f"{entry} is not a directory"
            current, parent = entry, st
        if restart is None:
            return f"{path} is not a file"
        pending = restart


def first_safe(candidates: Iterable[str], euid: int | None = None) -> str | None:
    """The first executable of `candidates` that exists and is safe to run."""
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and unsafe_to_run(candidate, euid) is None:
            return candidate
    return None


def safe_which(name: str, path: str | None = None, euid: int | None = None) -> str | None:
    """`shutil.which(name)`, but only a program safe to run: the first one on PATH (the
    caller's, or `path`) that no user other than root (or the invoking user) could have
    placed; a planted one earlier on PATH is passed over, never run. An absolute `name` is
    checked as it is."""
    if "/" in name:
        return first_safe([name], euid) if name.startswith("/") else None
    dirs = (os.environ.get("PATH", SYSTEM_PATH) if path is None else path).split(os.pathsep)
    return first_safe((os.path.join(d, name) for d in dirs if d.startswith("/")), euid)


def shutil_which(name: str, path: str | None = None) -> str | None:
    """The first `name` on PATH whatever its safety: only to say why it was not run."""
    dirs = (os.environ.get("PATH", SYSTEM_PATH) if path is None else path).split(os.pathsep)
    for d in dirs:
        cand = os.path.join(d, name)
        if d.startswith("/") and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def find(name: str, also: Sequence[str] = ()) -> str | None:
    """`safe_which(name)` on the caller's PATH, else the first safe one of `also` (the
    usual absolute places of a program when PATH is short)."""
    return safe_which(name) or first_safe(also)


def safe_path(path: str | None = None, euid: int | None = None) -> str:
    """The entries of `path` (default: the caller's PATH) that no other user can write."""
    dirs = (os.environ.get("PATH", SYSTEM_PATH) if path is None else path).split(os.pathsep)
    seen: list[str] = []
    for d in dirs:
        if d.startswith("/") and d not in seen and os.path.isdir(d) and (
            unsafe_to_run(d, euid, want_dir=True) is None
        ):
            seen.append(d)
    return os.pathsep.join(seen)


def resolve(program: str, path: str | None = None) -> str:
    """The absolute path `program` would run from, or NotRun saying why it will not."""
    if "/" in program:
        if not program.startswith("/"):
            raise NotRun(f"{program}: not an absolute path")
        if not os.path.lexists(program):
            raise NotRun(f"{program} not found", missing=True)
        why = unsafe_to_run(program)
        if why is not None:
            raise NotRun(f"not run: {why}", reason=why)
        return program
    found = safe_which(program, path)
    if found is None:
        unsafe = shutil_which(program, path)
        if unsafe is None:
            raise NotRun(f"{program} not found on PATH", missing=True)
        raise NotRun(f"{program} not run: {unsafe_to_run(unsafe) or 'not executable'}")
    return found


def hooks_on() -> bool:
    """True only in the test suite's virtual environment: `HOOKS_SWITCH` at the top of the
    venv the interpreter runs in, trusted as a program would be (never in a packaged install,
    which runs outside any venv). Read once."""
    global _hooks
    if _hooks is None:
        path = os.path.join(sys.prefix, HOOKS_SWITCH)
        _hooks = sys.prefix != getattr(sys, "base_prefix", sys.prefix) \
            and os.path.isfile(path) and unsafe_to_run(path) is None
    return _hooks


# --- running it -----------------------------------------------------------------------------


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The scrubbed environment a program gets: PATH's safe entries, the user's session for
    a non-root caller, the test stand-ins' knobs under the test switch, then `extra`."""
    env = {"PATH": safe_path() or SYSTEM_PATH}
    if os.geteuid() != 0:
        env.update((k, os.environ[k]) for k in _USER_SESSION if k in os.environ)
    if hooks_on():
        env.update((k, v) for k, v in os.environ.items() if k.startswith(_TEST_PREFIX))
    if extra:
        env.update(extra)
    return env


def argv_for(argv: Sequence[Any], path: str | None = None) -> list[str]:
    """`argv` with its program resolved (see `resolve`) and `-I` after a Python interpreter."""
    words = [os.fspath(a) for a in argv]
    exe = resolve(words[0], path)
    rest = words[1:]
    if is_python(exe) and rest[:1] != ["-I"]:
        rest = ["-I", *rest]
    return [exe, *rest]


def run(
    argv: Sequence[Any],
    *,
    timeout: float,
    input: bytes | str | None = None,
    text: bool = False,
    merge_stderr: bool = False,
    env: Mapping[str, str] | None = None,
    check_path: str | None = None,
) -> Ran:
    """Run `argv` through the door (module docstring) and wait for it, capturing its output.

    Raises NotRun (not found or not safe: nothing ran), Timeout (killed with its group) or
    OSError from exec; a non-zero exit status is the caller's to judge. `env` adds variables
    by name; `check_path` is the PATH to look the program up on (default: the caller's).
    """
    import signal
    import subprocess

    full = argv_for(argv, check_path)
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.Popen(
        full,
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        env=environment(env),
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )
    out: bytes | str
    err: bytes | str | None
    try:
        out, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise Timeout(full, timeout) from None
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        raise
    if text:
        out = out.decode("utf-8", "replace")
        err = err.decode("utf-8", "replace") if err is not None else ""
    elif err is None:
        err = b""
    return Ran(tuple(full), proc.returncode, out, err)


def as_run(
    argv: Sequence[Any], *, timeout: float, capture_output: bool = True, text: bool = False,
    input: bytes | str | None = None,
) -> Ran:
    """`run` under `subprocess.run`'s keywords, for code that takes a runner as a parameter
    (tests pass fakes there). Output is always captured."""
    del capture_output
    return run(argv, timeout=timeout, text=text, input=input)


def exec_program(
    program: str, argv: Sequence[Any], env: Mapping[str, str] | None = None
) -> NoReturn:
    """Replace this process with `program` after the same lookup and check as `run` (a bare
    name on PATH's safe entries; a path checked as it is), keeping the environment `env`
    (default: ours): the final exec of the runtime, the hook and nvidia-docker, whose
    environment is the container's or the user's own. NotRun when it is missing or unsafe
    (`missing` tells which)."""
    path = (os.environ if env is None else env).get("PATH", SYSTEM_PATH)
    if "/" in program and not program.startswith("/"):
        program = os.path.abspath(program)
    exe = resolve(program, path if "/" not in program else None)
    sys.stdout.flush()
    words = [os.fspath(a) for a in argv]
    if env is None:
        os.execv(exe, words)  # this process's own environment, as it is
    os.execve(exe, words, dict(env))
    raise AssertionError("unreachable")  # pragma: no cover


# What a `fork_exec` child that could not exec writes on its pipe, and the status it exits with.
CHILD_FAILED = "nvdocker2 child: "
CHILD_STATUS = 126


def fork_exec(
    argv: Sequence[str], env: Mapping[str, str], prepare: Callable[[], None] | None = None
) -> tuple[int, int]:
    """Start `argv` (its program an absolute path, checked as `resolve` does before the fork:
    NotRun, and nothing forked, when missing or unsafe) in a forked child with stdin on
    /dev/null, stdout and stderr on a pipe and exactly the environment `env`; returns (pid,
    the pipe's read end). `prepare` runs in the child just before the exec (confinement that
    must not touch this process). When it or the exec fails, the child writes CHILD_FAILED
    and the reason on the pipe and exits with CHILD_STATUS. Waiting is the caller's."""
    if not argv[0].startswith("/"):
        raise NotRun(f"{argv[0]}: not an absolute path")
    exe = resolve(argv[0])
    words = [exe, *argv[1:]]
    environ = dict(env)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: stdin /dev/null, stdout and stderr into the pipe, then exec
        try:
            os.close(r)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(w, 1)
            os.dup2(w, 2)
            if prepare is not None:
                prepare()
            os.execve(exe, words, environ)
        except BaseException as err:  # noqa: BLE001 - reported by the parent
            # On the pipe itself: it is there even when /dev/null or a dup2 failed.
            os.write(w, f"{CHILD_FAILED}{err}\n".encode("utf-8", "replace"))
        os._exit(CHILD_STATUS)
    os.close(w)
    return pid, r
