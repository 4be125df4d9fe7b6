"""The runtime's hook role in direct mode: `nvidia-container-runtime direct-hook update-ldcache`.

runc runs it as a createContainer hook, inside the container's namespaces before pivot_root,
with the OCI state on stdin and only the environment the spec lists. It makes the soname
links of the mounted driver libraries inside the root file system (never following a symlink
of the image out of it), then refreshes the image's ld cache with the HOST's
`ldconfig -r ROOTFS DIR...`: ldconfig chroots into the image itself, and no binary of the
image is ever run.
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


def run(argv: list[str], stdin: IO[str]) -> None:
    """Do the hook's work or raise `DirectError`."""
    ldconfig, links, folders = parse_args(argv)
    rootfs = read_rootfs(stdin)
    for link, target in links:
        link_in_root(rootfs, link, target)
    env = dict(e.split("=", 1) for e in HOOK_ENV)
    proc = subprocess.run(
        [ldconfig, "-r", rootfs, *folders],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise DirectError(f"{ldconfig} -r {rootfs} failed (exit {proc.returncode}): {last}")


def main(argv: list[str], stdin: IO[str] | None = None) -> int:
    """Entry of the hook role; returns the exit code (0, or 1 with one `error:` line)."""
    try:
        run(argv, stdin if stdin is not None else sys.stdin)
    except DirectError as err:
        print(f"error: {err.message}", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: direct-hook: {err}", file=sys.stderr)
        return 1
    return 0
