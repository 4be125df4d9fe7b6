"""The runtime's hook role in direct mode: `nvidia-container-runtime direct-hook update-ldcache`.

runc runs it as a createContainer hook, inside the container's namespaces before pivot_root,
with the OCI state on stdin and only the environment the spec lists. It makes the soname
links of the mounted driver libraries inside the root file system (never following a symlink
of the image out of it), then refreshes the image's ld cache with the HOST's
`ldconfig -r ROOTFS DIR...`: ldconfig chroots into the image itself, and no binary of the
image is ever run.

A chroot does not confine /proc magic links: at this point the container's /proc is mounted
in the rootfs and its pid 1 (runc init) still has the host's root, so an image symlink to
`/proc/1/root/...` (for ldconfig's aux cache, or a directory in its ld.so.conf) would let
ldconfig write on the host. ldconfig therefore runs in a mount namespace of its own in which
every procfs under the rootfs is detached (`_hide_proc`, between fork and exec).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import IO

from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.rootfs import link_in_root
from nvdocker2.direct.spec import HOOK_ACTION, HOOK_ENV, rootfs_of
from nvdocker2.oneline import one_line

USAGE = (
    "usage: nvidia-container-runtime direct-hook update-ldcache --ldconfig PATH"
    " [--link DIR/NAME::TARGET]... [--folder DIR]..."
)


def parse_args(argv: list[str]) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(ldconfig, links as (link, target), folders) from the hook's argv after `direct-hook`."""
    if not argv or argv[0] != HOOK_ACTION:
        raise DirectError(f"unknown direct-hook action {argv[:1]!r}", USAGE)
    ldconfig = ""
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
            if not sep or not link.startswith("/") or not target or "/" in target:
                raise DirectError(f"direct-hook: bad --link {value!r}", USAGE)
            links.append((link, target))
        elif arg == "--folder":
            folders.append(value)
        else:
            raise DirectError(f"direct-hook: unknown option {arg!r}", USAGE)
    if not os.path.isabs(ldconfig):
        raise DirectError("direct-hook: --ldconfig must be an absolute path on the host", USAGE)
    return ldconfig, links, folders


def read_rootfs(stdin: IO[str]) -> str:
    """The container's rootfs from the OCI state on stdin (bundle → config.json → root.path)."""
    try:
        state = json.load(stdin)
        bundle = state.get("bundle") or state.get("bundlePath")
        with open(os.path.join(bundle, "config.json"), encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise DirectError(f"direct-hook: cannot read the container state or config.json: {err}")
    return rootfs_of(spec, bundle)


CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
ISOLATION_FAILED = 126
# ldconfig takes well under a second on real images; an image can make it block for ever
# (a FIFO as ld.so.conf) and hang the container start with it.
LDCONFIG_TIMEOUT = 60.0
_ISOLATION_PREFIX = "direct-hook: cannot hide /proc from ldconfig: "


def _unescape_mountinfo(field: str) -> str:
    r"""Mount points in mountinfo have space, tab, newline and backslash as \NNN octal."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def proc_mounts_under(root: str, mountinfo: str) -> list[str]:
    """Mount points of procfs at or below `root` in a /proc/self/mountinfo text, deepest first."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        fstype = fields[fields.index("-", 6) + 1]
        point = _unescape_mountinfo(fields[4])
        if fstype == "proc" and (point == root or point.startswith(root.rstrip("/") + "/")):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _hide_proc(rootfs: str) -> None:
    """In the child, before exec'ing ldconfig: a private mount namespace in which no procfs is
    mounted under `rootfs`. On failure, one line on stderr and exit ISOLATION_FAILED."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)

        def check(result: int, what: str) -> None:
            if result != 0:
                raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

        root = os.path.realpath(rootfs)
        try:
            check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        except OSError:
            if os.geteuid() != 0:
                # Without privileges ldconfig cannot chroot either and resolves paths under
                # ROOT itself, where magic links do not lead out.
                return
            raise
        check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
        for _ in range(64):  # stacked mounts: detach until none is left
            with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
                points = proc_mounts_under(root, f.read())
            if not points:
                return
            for point in points:
                check(libc.umount2(os.fsencode(point), MNT_DETACH), f"detaching {point}")
        raise OSError(0, f"procfs keeps reappearing under {root}")
    except Exception as err:  # noqa: BLE001 - reported by the parent as one line
        os.write(2, f"{_ISOLATION_PREFIX}{err}\n".encode("utf-8", "replace"))
        os._exit(ISOLATION_FAILED)


def run(argv: list[str], stdin: IO[str]) -> None:
    """Do the hook's work or raise `DirectError`."""
    ldconfig, links, folders = parse_args(argv)
    rootfs = read_rootfs(stdin)
    for link, target in links:
        link_in_root(rootfs, link, target)
    env = dict(e.split("=", 1) for e in HOOK_ENV)
    command = f"{ldconfig} -r {rootfs}"
    try:
        proc = subprocess.run(
            [ldconfig, "-r", rootfs, *folders],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=LDCONFIG_TIMEOUT,
            check=False,
            preexec_fn=lambda: _hide_proc(rootfs),  # noqa: PLW1509 - single-threaded hook
        )
    except subprocess.TimeoutExpired:
        raise DirectError(
            f"{command} did not finish within {LDCONFIG_TIMEOUT:g} seconds; stopped it",
            "the image's /etc/ld.so.conf (or a file it includes) may be a FIFO or a device",
        ) from None
    if proc.returncode != 0:
        # ldconfig names the image's files, whose names are bytes
        output = proc.stdout.decode("utf-8", "backslashreplace")
        last = (output.strip().splitlines() or ["no output"])[-1]
        raise DirectError(f"{command} failed (exit {proc.returncode}): {last[:500]}")


def main(argv: list[str], stdin: IO[str] | None = None) -> int:
    """Entry of the hook role; returns the exit code (0, or 1 with one `error:` line)."""
    try:
        run(argv, stdin if stdin is not None else sys.stdin)
    except DirectError as err:
        print(f"error: {one_line(err.message)}", file=sys.stderr)
        if err.hint:
            print(f"hint: {one_line(err.hint)}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: direct-hook: {one_line(err)}", file=sys.stderr)
        return 1
    except Exception as err:  # one line, never a traceback in runc's error (unless debugging)
        if os.environ.get("NVDOCKER2_DEBUG") == "1":
            raise
        print("error: direct-hook: internal error: "
              + one_line(f"{type(err).__name__}: {str(err)[:300]}"),
              file=sys.stderr)
        return 1
    return 0
