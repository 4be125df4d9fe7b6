"""Path resolution confined to a root directory, like openat2(RESOLVE_IN_ROOT).

Direct mode computes every place it touches inside a container image before runc mounts
anything there. An image controls its own symlinks, so a naive `os.path.join(rootfs, dest)`
followed by the host would let an image point a mount or a link at the host (the class of
CVE-2024-0132 and CVE-2024-0134). Here every component is looked up with `lstat` under the
root: an absolute symlink restarts at the root (never at the host's `/`), a relative one that
climbs above the root is refused, and the caller decides whether the last component may be a
symlink. The result is a path without symlinks, so the runtime that mounts it and the check
agree on the place.
"""

from __future__ import annotations

import errno
import os
import stat

from nvdocker2.direct.errors import DirectError
from nvdocker2.host.files import make_dir_at, symlink_at

TYPE_CHECKING = False  # typing itself costs the hook's start a few milliseconds
if TYPE_CHECKING:
    from typing import Callable

MAX_SYMLINKS = 40


class UnsafePath(DirectError):
    """A path inside a container image resolves in a way direct mode refuses to use."""


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def resolve_in_root(root: str, path: str, *, follow_final: bool, refuse_escape: bool) -> str:
    """Resolve absolute `path` inside `root`; return it as an absolute in-root path.

    Components that do not exist yet are kept as written (runc creates them); no component is
    taken unchecked, so the result never passes through a symlink. With
    `follow_final` false a symlink as the last component raises `UnsafePath`; with
    `refuse_escape` a `..` that a symlink makes climb above `root` raises `UnsafePath` (the
    host would have left the root there); otherwise it is clamped at the root, as the kernel
    does with RESOLVE_IN_ROOT.
    """
    parts = _components(path)[::-1]  # a stack: the next component last
    resolved: list[str] = []
    links = 0
    last_link: tuple[str, str] | None = None
    while parts:
        name = parts.pop()
        if name == "..":
            if resolved:
                resolved.pop()
            elif refuse_escape and last_link is not None:
                raise UnsafePath(
                    f"{last_link[0]} in the container image is a symlink to {last_link[1]!r},"
                    " which leads outside the container's root; refusing it",
                    "fix or remove that symlink in the image",
                )
            continue
        # Every component is looked up, also after a missing one: a later `..` can pop the
        # missing part and lead back into the image's tree, whose links must be followed.
        rel = "/".join(resolved + [name])
        host = os.path.join(root, rel)
        try:
            st = os.lstat(host)
        except (FileNotFoundError, NotADirectoryError):
            resolved.append(name)
            continue
        if stat.S_ISLNK(st.st_mode):
            shown = "/" + rel
            if not parts and not follow_final:
                raise UnsafePath(
                    f"{shown} in the container image is a symlink; refusing to mount onto it",
                    "remove the symlink from the image, or do not request this capability",
                )
            links += 1
            if links > MAX_SYMLINKS:
                raise UnsafePath(f"too many levels of symlinks resolving {path} in the image")
            target = os.readlink(host)
            last_link = (shown, target)
            if target.startswith("/"):
                resolved = []
            parts.extend(reversed(_components(target)))
            continue
        if parts and not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(
                f"/{rel} in the container image is not a directory; cannot place {path} under it"
            )
        resolved.append(name)
    return "/" + "/".join(resolved)


def open_dir_in_root(root: str, resolved: str) -> int:
    """Open the directory at a symlink-free in-root path, refusing any symlink on the way.

    Each step is an `openat` with O_NOFOLLOW relative to the previous directory, so an image
    that swapped a component for a symlink after `resolve_in_root` makes this fail instead of
    leading elsewhere. The caller closes the returned descriptor.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for comp in _components(resolved):
            nxt = os.open(comp, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_dir_in_root(root: str, resolved: str, mode: int = 0o755) -> int:
    """Open the directory at a symlink-free in-root path as `open_dir_in_root` does, creating
    each missing component (with `mode`) on the way; the caller closes the descriptor."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for comp in _components(resolved):
            try:
                nxt = os.open(comp, flags, dir_fd=fd)
            except FileNotFoundError:
                make_dir_at(comp, mode, fd)
                nxt = os.open(comp, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{resolved} in the container image changed under us; refusing"
                             ) from err
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def rootfs_of(spec: dict, bundle: str) -> str:
    """The container's root directory on the host (`root.path`, relative to the bundle)."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise DirectError(f"{bundle}/config.json has no root.path")
    return os.path.normpath(os.path.join(bundle, path))


def open_dir_checked(root: str, path: str, on_mount: Callable[[str, str, int], None] | None = None
                     ) -> tuple[str, int]:
    """(the symlink-free in-root path, an open descriptor) of the directory `path` names in the
    image; `on_mount(path, resolved, fd)` may refuse it by raising. The caller closes the
    descriptor; a missing directory raises FileNotFoundError naming the resolved path."""
    resolved = resolve_in_root(root, path, follow_final=True, refuse_escape=True)
    try:
        fd = open_dir_in_root(root, resolved)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "does not exist", resolved) from None
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{resolved} in the container image changed under us; refusing"
                             ) from err
        raise
    if on_mount is not None:
        try:
            on_mount(path, resolved, fd)
        except BaseException:
            os.close(fd)
            raise
    return resolved, fd


def link_in_root(root: str, link: str, target: str,
                 on_mount: Callable[[str, str, int], None] | None = None) -> str:
    """Make `link` (absolute, in-root) a symlink to `target`, without following image symlinks.

    An existing symlink is replaced; an existing file or directory is left alone (the image
    ships its own). `on_mount` checks the parent directory as `open_dir_checked` does.
    Returns what was done: "created", "replaced", "kept" or "exists".
    """
    parent, name = os.path.split(link)
    return links_in_root(root, parent, [(name, target)], on_mount)[0]


def links_in_root(root: str, parent: str, entries: list[tuple[str, str]],
                  on_mount: Callable[[str, str, int], None] | None = None) -> list[str]:
    """`link_in_root` for each (name, target) of `entries`, all in the directory `parent`
    (absolute, in-root), which is resolved, opened and checked once; what was done to each."""
    try:
        parent, fd = open_dir_checked(root, parent, on_mount)
    except FileNotFoundError as err:
        link = os.path.join(parent, entries[0][0])
        raise DirectError(
            f"cannot create {link}: {err.filename} does not exist in the container"
        ) from None
    try:
        return [_link_at(fd, name, target) for name, target in entries]
    finally:
        os.close(fd)


def _link_at(fd: int, name: str, target: str) -> str:
    try:
        st = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        symlink_at(target, name, fd)
        return "created"
    if not stat.S_ISLNK(st.st_mode):
        return "exists"
    if os.readlink(name, dir_fd=fd) == target:
        return "kept"
    os.unlink(name, dir_fd=fd)
    symlink_at(target, name, fd)
    return "replaced"
