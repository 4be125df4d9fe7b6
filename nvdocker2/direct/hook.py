"""The runtime's hook role in direct and CDI mode: `nvidia-container-runtime direct-hook
update-ldcache`.

runc runs it as a createContainer hook, inside the container's mount namespace before
pivot_root, with the OCI state on stdin and only the environment the spec lists, once every
mount of the spec is in place. It makes the soname links of the driver's libraries inside the
root file system, then refreshes the image's ld cache with the HOST's `ldconfig` (no binary of
the image is ever run). Its threat model is in docs/security.md; in short:

- links and ldconfig folders are resolved inside the image (never following a symlink out of
  it) and refused when they are on any mount but the root file system's own (a volume);
- ldconfig runs in a mount namespace of the hook's own where, below the root file system, only
  the image's files and the driver's read-only files are left (`confine.private_view`), with
  no aux cache to read (`-i`) or to write (its directory covered read-only), making no links
  (`-X`), with CAP_SYS_CHROOT as its only capability under no_new_privs, and for at most
  `LDCONFIG_TIMEOUT` seconds.

This runs on every GPU container start, so it imports little: no subprocess (ldconfig is
checked, forked and exec'd by `nvdocker2.host.run.fork_exec`), ctypes' C half only to confine
ldconfig (bound before the fork, called in the child between fork and exec, so the hook
process itself keeps what it had).
"""

from __future__ import annotations

import os
import sys

from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.rootfs import (
    links_in_root,
    make_dir_in_root,
    open_dir_checked,
    resolve_in_root,
    rootfs_of,
)

TYPE_CHECKING = False  # typing itself costs every container start a few milliseconds
if TYPE_CHECKING:
    from typing import IO, Callable

HOOK_SUBCOMMAND = "direct-hook"
HOOK_ACTION = "update-ldcache"
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
USAGE = (
    "usage: nvidia-container-runtime direct-hook update-ldcache --ldconfig PATH"
    " [--link DIR/NAME::TARGET]... [--folder DIR]... [--cuda-compat DRIVER_VERSION]"
)
# ldconfig takes well under a second on real images; an image can make it block for ever
# (a FIFO as ld.so.conf) and hang the container start with it.
LDCONFIG_TIMEOUT = 60.0
_SIGKILL = 9
_OUTPUT_LIMIT = 65536


def parse_args(argv: list[str]) -> tuple[str, list[tuple[str, str]], list[str], str | None]:
    """(ldconfig, links as (link, target), folders, the driver version CUDA forward
    compatibility is decided against) from the hook's argv after `direct-hook`."""
    if not argv or argv[0] != HOOK_ACTION:
        raise DirectError(f"unknown direct-hook action {argv[:1]!r}", USAGE)
    ldconfig = ""
    compat: str | None = None
    links: list[tuple[str, str]] = []
    folders: list[str] = []
    it = iter(argv[1:])
    for arg in it:
        value = next(it, None)
        if value is None:
            raise DirectError(f"direct-hook: {arg} needs a value", USAGE)
        if arg == "--ldconfig":
            ldconfig = value
        elif arg == "--link":
            link, sep, target = value.partition("::")
            if not sep or not link.startswith("/") or not _good_target(target):
                raise DirectError(f"direct-hook: bad --link {value!r}", USAGE)
            links.append((link, target))
        elif arg == "--folder":
            if not value.startswith("/"):
                raise DirectError(f"direct-hook: bad --folder {value!r}", USAGE)
            folders.append(value)
        elif arg == "--cuda-compat":
            if not all(p.isascii() and p.isdigit() for p in value.split(".")):
                raise DirectError(f"direct-hook: bad --cuda-compat {value!r} (a driver version"
                                  " such as 535.104.05)", USAGE)
            compat = value
        else:
            raise DirectError(f"direct-hook: unknown option {arg!r}", USAGE)
    if not os.path.isabs(ldconfig):
        raise DirectError("direct-hook: --ldconfig must be an absolute path on the host", USAGE)
    return ldconfig, links, folders, compat


def _good_target(target: str) -> bool:
    """A name in the link's own folder (a soname link), or an absolute path without `.` or
    `..` (WSL2's /usr/bin/nvidia-smi into the driver store); the hook never follows it."""
    if "/" not in target:
        return bool(target)
    parts = target.split("/")
    return parts[0] == "" and all(p not in ("", ".", "..") for p in parts[1:])


def read_state(stdin: IO[str]) -> tuple[str, dict]:
    """(the container's rootfs, its config.json) from the OCI state on stdin."""
    from nvdocker2.runtime.jsonio import loads  # json without importing re

    try:
        state = loads(stdin.read())
        bundle = state.get("bundle") or state.get("bundlePath")
        with open(os.path.join(bundle, "config.json"), "rb") as f:
            spec = loads(f.read())
        return rootfs_of(spec, bundle), spec
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as err:
        raise DirectError(f"direct-hook: cannot read the container state or config.json: {err}"
                          ) from None


def _same_mount_as_root(rootfs: str) -> Callable[[str, str, int], None]:
    """A check for `open_dir_checked`: the directory is on the root file system's own mount."""
    from nvdocker2.direct.confine import mount_id

    fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        root_mount = mount_id(fd)
    finally:
        os.close(fd)

    def check(path: str, resolved: str, fd: int) -> None:
        if mount_id(fd) == root_mount:
            return
        where = f"resolves to {resolved}, which is" if resolved != path else "is"
        raise DirectError(
            f"{path} in the container {where} on another mount than the container image"
            " (a volume?); refusing to make links or run ldconfig there",
            "keep the image's library directories in the image, and mount volumes elsewhere",
        )

    return check


def driver_files(spec: dict, folders: list[str]) -> set[tuple[int, int]]:
    """(st_dev, st_ino) of the sources of the read-only bind mounts the spec puts straight
    into one of `folders`: the driver's libraries, which ldconfig may see."""
    keep = set()
    wanted = set(folders)
    mounts = spec.get("mounts")
    for m in mounts if isinstance(mounts, list) else ():
        if not isinstance(m, dict) or "ro" not in (m.get("options") or ()):
            continue
        dest, source = m.get("destination"), m.get("source")
        if not (isinstance(dest, str) and isinstance(source, str)):
            continue
        if os.path.dirname(os.path.normpath(dest)) in wanted:
            try:
                st = os.stat(source)
            except OSError:
                continue
            keep.add((st.st_dev, st.st_ino))
    return keep


def _folders_in_image(rootfs: str, folders: list[str],
                      check: Callable[[str, str, int], None]) -> list[str]:
    """The folders that exist, each checked to be on the root file system's own mount."""
    found = []
    for folder in folders:
        try:
            _resolved, fd = open_dir_checked(rootfs, folder, check)
        except FileNotFoundError:
            continue
        os.close(fd)
        found.append(folder)
    return found


def _make_folder(rootfs: str, folder: str, check: Callable[[str, str, int], None]) -> None:
    """Make the folder of a link where the image has none (0755, each missing component, as
    NVIDIA's create-symlinks hook does; runc makes a read-only root read-only only after the
    hooks), never through an image symlink, and check it is on the root file system's own
    mount."""
    resolved = resolve_in_root(rootfs, folder, follow_final=True, refuse_escape=True)
    there = resolved  # symlink-free: its deepest folder the image has is checked first
    while there != "/" and not os.path.lexists(rootfs + there):
        there = os.path.dirname(there)
    os.close(open_dir_checked(rootfs, there, check)[1])  # nothing is made on a volume
    fd = make_dir_in_root(rootfs, resolved)
    try:
        check(folder, resolved, fd)  # nor on a mount put there since
    finally:
        os.close(fd)


def _by_directory(links: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The links as (directory, [(name, target)...]), a run of links in the same directory
    together (each directory is then resolved and checked once), in their order."""
    runs: list[tuple[str, list[tuple[str, str]]]] = []
    for link, target in links:
        parent, name = os.path.split(link)
        if not runs or runs[-1][0] != parent:
            runs.append((parent, []))
        runs[-1][1].append((name, target))
    return runs


def _refuse_a_mounted_cache(rootfs: str, check: Callable[[str, str, int], None]) -> None:
    """ldconfig writes /etc/ld.so.cache~ and renames it to /etc/ld.so.cache. Where either is a
    mount point in the container, the container would see that mount move onto (or vanish
    from) its ld cache: refused, like a foreign /etc."""
    from nvdocker2.direct.confine import mount_id

    try:
        etc, fd = open_dir_checked(rootfs, "/etc", check)
    except FileNotFoundError:
        return  # ldconfig cannot write a cache; it says so
    try:
        here = mount_id(fd)
        for name in ("ld.so.cache", "ld.so.cache~"):
            try:
                f = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                continue
            try:
                if mount_id(f) != here:
                    raise DirectError(
                        f"{etc.rstrip('/')}/{name} in the container is a mount point (a volume"
                        " that the image's symlinks put there?); refusing to write the ld"
                        " cache over it",
                        "remove that symlink from the image, or mount the volume elsewhere",
                    )
            finally:
                os.close(f)
    finally:
        os.close(fd)


def run_ldconfig(argv: list[str], env: dict[str, str], timeout: float, shown: str,
                 prepare: Callable[[], None] | None = None) -> tuple[int, bytes]:
    """(exit status, output) of argv, killed after `timeout` seconds (then DirectError naming
    the command as `shown`). `prepare` runs in the child before the exec (confinement, which
    must not touch this process); its failure is reported as one line."""
    import select
    import time

    from nvdocker2.host.run import CHILD_FAILED, CHILD_STATUS, NotRun, fork_exec

    try:
        pid, r = fork_exec(argv, env, prepare)
    except NotRun as err:
        raise DirectError(
            f"direct-hook: cannot run {shown}: {err.reason}",
            None if err.missing else
            "ldconfig must belong to root, in directories only root can write",
        ) from None
    deadline = time.monotonic() + timeout
    output = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, _SIGKILL)
                os.waitpid(pid, 0)
                raise DirectError(
                    f"{shown} did not finish within {timeout:g} seconds; stopped it",
                    "the image's /etc/ld.so.conf (or a file it includes) may be a FIFO or"
                    " a device",
                )
            chunk = os.read(r, 65536)
            if not chunk:
                break
            output = (output + chunk)[-_OUTPUT_LIMIT:]
    finally:
        os.close(r)
    _wait_readable_exit(pid, deadline)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, _SIGKILL)
            os.waitpid(pid, 0)
            raise DirectError(f"{shown} did not exit within {timeout:g} seconds; stopped it")
        time.sleep(0.002)
    code = os.waitstatus_to_exitcode(status)
    if code == CHILD_STATUS and output.startswith(CHILD_FAILED.encode()):
        message = output.decode("utf-8", "replace").splitlines()[0]
        raise DirectError(f"direct-hook: cannot run {shown}: {message[len(CHILD_FAILED):]}")
    return code, output


def _wait_readable_exit(pid: int, deadline: float) -> None:
    """Wait (until `deadline` at most) for the child to exit, on a pidfd where the kernel has
    them (Linux 5.3), so that the polling loop after it finds it gone at once instead of
    sleeping a round on every container start. Without a pidfd, the loop alone waits."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # a Python built without it, or a kernel before 5.3
        return
    try:
        select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        os.close(fd)


def run(argv: list[str], stdin: IO[str]) -> None:
    """Do the hook's work or raise `DirectError`."""
    ldconfig, links, folders, compat = parse_args(argv)
    rootfs, spec = read_state(stdin)
    if compat is not None and os.path.lexists(os.path.join(rootfs, "usr/local/cuda")):
        # CDI mode: the spec is the same for every image, so the image's own newer libcuda
        # is looked for here, as direct mode looks at `create` (nvdocker2.direct.compat)
        from nvdocker2.direct.compat import compat_folder

        first = compat_folder(rootfs, compat)
        if first:
            folders = [first, *(f for f in folders if f != first)]
    update_ldcache(rootfs, ldconfig, links, folders, lambda found: driver_files(spec, found))


def update_ldcache(rootfs: str, ldconfig: str, links: list[tuple[str, str]],
                   folders: list[str],
                   driver_files_in: Callable[[list[str]], set[tuple[int, int]]]) -> None:
    """Make the soname `links` and refresh the ld cache of `rootfs` for `folders` with the
    host's `ldconfig`, confined as the module says; `driver_files_in(folders found)` names the
    driver's read-only files ldconfig may see there. Raises `DirectError`."""
    check = _same_mount_as_root(rootfs)
    folders = _folders_in_image(rootfs, folders, check)
    for parent, entries in _by_directory(links):
        if _folders_in_image(rootfs, [parent], check) == []:
            _make_folder(rootfs, parent, check)
        links_in_root(rootfs, parent, entries, check)
    _refuse_a_mounted_cache(rootfs, check)
    prepare = None
    if os.geteuid() == 0:
        # (Without root ldconfig cannot chroot either, and reads and writes with this user's
        # rights alone.)
        from nvdocker2.direct.confine import bind_libc, drop_privileges, private_view

        keep = driver_files_in(folders)
        bind_libc()

        def prepare() -> None:
            private_view(rootfs, keep)
            drop_privileges()

    env = dict(e.split("=", 1) for e in HOOK_ENV)
    shown = f"{ldconfig} -r {rootfs}"
    status, output = run_ldconfig([ldconfig, "-i", "-X", "-r", rootfs, *folders], env,
                                  LDCONFIG_TIMEOUT, shown, prepare)
    if status != 0:
        # ldconfig names the image's files, whose names are bytes
        text = output.decode("utf-8", "backslashreplace")
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise DirectError(f"{shown} failed (exit {status}): {last[:500]}")


def main(argv: list[str], stdin: IO[str] | None = None) -> int:
    """Entry of the hook role; returns the exit code (0, or 1 with one `error:` line)."""
    try:
        run(argv, stdin if stdin is not None else sys.stdin)
    except DirectError as err:
        lines = [f"error: {err.message}"] + ([f"hint: {err.hint}"] if err.hint else [])
    except OSError as err:
        lines = [f"error: direct-hook: {err}"]
    except Exception as err:  # one line, never a traceback in runc's error (unless debugging)
        if os.environ.get("NVDOCKER2_DEBUG") == "1":
            raise
        lines = [f"error: direct-hook: internal error: {type(err).__name__}: {str(err)[:300]}"]
    else:
        return 0
    from nvdocker2.oneline import one_line  # only on errors: one module less per start

    for line in lines:
        print(one_line(line), file=sys.stderr)
    return 1
