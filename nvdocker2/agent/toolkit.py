"""`nvdocker2 agent --install-toolkit DIR`: the runtime and the hook for a node without
packages (an immutable OS), copied from the agent's image into DIR on the node.

What DIR holds (node paths; dirs and programs 0755, files 0644):

    DIR/nvidia-container-runtime            sh launcher (nvdocker2.runtime.launcher.render)
    DIR/nvidia-container-runtime-hook       Python launcher
    DIR/lib/nvdocker2/...                   the package, as in the image (tomli too for < 3.11)
    DIR/.config/nvidia-container-runtime/config.toml   the toolkit's own config (direct mode)
    DIR/.nvdocker2-toolkit.json             what nvdocker2 made: the directories above DIR
    DIR/.nvdocker2-cdi.json                 the node's CDI spec the agent wrote (node_cdi)

NVIDIA's operator copies Go binaries; ours need an interpreter, and the node's own python3
(3.9 or later, root's, in root's directories) runs them: without one the agent refuses before
changing anything. The launchers name the node's paths, so they run on the node, from any
cwd, with any PATH, and read DIR's config.toml whatever the engine's environment says.

DIR is staged whole as DIR.new and renamed into place, so the engine is never pointed at a
half-copied toolkit; a changed toolkit replaces the old one by two renames (DIR.old). Every
directory on DIR's way under the host root, symlinks followed inside the host root, must
belong to root and be writable by no one else, as a program must be to be run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import Any

from nvdocker2.host import files
from nvdocker2.host import run as door

DEFAULT_DIR = "/usr/local/nvidia/toolkit"  # NVIDIA's GPU Operator's
HOST_PYTHON = "/usr/bin/python3"
MIN_PYTHON = (3, 9)
MANIFEST = ".nvdocker2-toolkit.json"
CDI_RECORD = ".nvdocker2-cdi.json"  # what nvdocker2.agent.node_cdi wrote: kept across replaces
CONFIG = ".config/nvidia-container-runtime/config.toml"  # NVIDIA's operator's place too
RUNTIME = "nvidia-container-runtime"
HOOK = "nvidia-container-runtime-hook"
DIR_MODE, PROGRAM_MODE, FILE_MODE = 0o755, 0o755, 0o644
MAX_LINKS = 40

CONFIG_TEXT = """\
# {config}: written by `nvdocker2 agent --install-toolkit`, removed with {dir}.
# The node has no libnvidia-container: direct mode edits each container's spec itself.
[nvidia-container-runtime]
mode = "direct"

[nvidia-container-runtime-hook]
path = "{dir}/{hook}"
"""


class Refused(Exception):
    """The toolkit cannot go into DIR (or come out of it); str() says why, `hint` what to
    do. Nothing was changed."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Toolkit:
    dir: str  # a node path
    host_root: str = "/"
    python: str = HOST_PYTHON  # a node path

    @property
    def runtime(self) -> str:
        """The runtime launcher as a node path: the engine's runtime entry."""
        return f"{self.dir}/{RUNTIME}"

    def here(self, node: str) -> str:
        """A node path as this process sees it."""
        return os.path.join(self.host_root, node.lstrip("/")) if self.host_root != "/" else node


def _untrusted(st: os.stat_result, euid: int) -> bool:
    return st.st_uid not in (0, euid)


def _not_open(parent: os.stat_result, stack: list[str]) -> None:
    """Refuse a directory on the way that its group or others may write (unless sticky)."""
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX:
        above = "/" + "/".join(stack)
        raise Refused(f"{above} on the node is writable by its group or others (mode "
                      f"{stat.S_IMODE(parent.st_mode):04o})",
                      f"chmod go-w {above} on the node, or choose another directory")


def resolve(host_root: str, node: str) -> tuple[str, str]:
    """(the deepest existing directory on the way to `node`, the rest) as this process sees
    them: symlinks are followed inside the host root (an absolute target means the node's
    /). Refused when a component is not root's (or this user's), or one that holds the next
    is writable by its group or others (a sticky one only for an entry of root's)."""
    root = os.path.realpath(host_root)
    euid = os.geteuid()
    pending = [p for p in node.split("/") if p not in ("", ".")]
    stack: list[str] = []  # the resolved components below the root
    links = 0
    parent = os.lstat(root)
    while pending:
        part = pending.pop(0)
        if part == "..":
            if stack:
                stack.pop()
            parent = os.lstat(os.path.join(root, *stack)) if stack else os.lstat(root)
            continue
        here = os.path.join(root, *stack, part)
        shown = "/" + "/".join([*stack, part])
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            _not_open(parent, stack)  # what is made next goes into it
            return os.path.join(root, *stack), "/".join([part, *pending])
        if _untrusted(st, euid):
            raise Refused(f"{shown} on the node belongs to uid {st.st_uid}",
                          "every directory on the toolkit's way must be root's")
        _not_open(parent, stack)
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise Refused(f"{node}: too many symbolic links", "choose another directory")
            target = os.readlink(here)
            if target.startswith("/"):
                stack = []
                parent = os.lstat(root)
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"{shown} on the node is not a directory",
                          "choose another --install-toolkit")
        stack.append(part)
        parent = st
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Refused(f"{node} on the node is writable by its group or others (mode "
                      f"{stat.S_IMODE(parent.st_mode):04o})", f"chmod go-w {node} on the node")
    return os.path.join(root, *stack), ""


def python_version(t: Toolkit) -> tuple[int, int]:
    """The node's python3 as (major, minor), from the file it names (python3.X) and its
    standard library beside it; Refused when there is none, it is too old or not root's."""
    hint = ("--install-toolkit runs the runtime with the node's python3 (3.9 or later, "
            "root's); on a node without one install nvdocker2's package into its image")
    found, rest = resolve(t.host_root, os.path.dirname(t.python))
    name = os.path.basename(t.python)
    if rest:
        raise Refused(f"the node has no {t.python}", hint)
    real = os.path.join(found, name)
    for _ in range(MAX_LINKS):
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            raise Refused(f"the node has no {t.python}", hint) from None
        if _untrusted(st, os.geteuid()):
            raise Refused(f"{t.python} on the node belongs to uid {st.st_uid}", hint)
        if not stat.S_ISLNK(st.st_mode):
            break
        target = os.readlink(real)
        node_target = target if target.startswith("/") else os.path.join(
            "/" + os.path.relpath(os.path.dirname(real), os.path.realpath(t.host_root)), target)
        found, rest = resolve(t.host_root, os.path.dirname(os.path.normpath(node_target)))
        if rest:
            raise Refused(f"{t.python} on the node points at {target}, which is not there", hint)
        real = os.path.join(found, os.path.basename(node_target))
    if not stat.S_ISREG(st.st_mode) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
            or not st.st_mode & stat.S_IXUSR:
        raise Refused(f"{t.python} on the node is not a program only root can write", hint)
    m = re.fullmatch(r"python(\d+)\.(\d+)", os.path.basename(real))
    if not m:
        raise Refused(f"cannot tell the version of {t.python} on the node (it is "
                      f"{os.path.basename(real)}, not pythonX.Y)", hint)
    version = (int(m.group(1)), int(m.group(2)))
    stdlib = os.path.join(os.path.dirname(os.path.dirname(real)), "lib",
                          f"python{version[0]}.{version[1]}", "os.py")
    if not os.path.isfile(stdlib):
        raise Refused(f"{t.python} on the node has no standard library beside it", hint)
    if version < MIN_PYTHON:
        raise Refused(f"{t.python} on the node is Python {version[0]}.{version[1]}; the "
                      "runtime needs 3.9 or later", hint)
    return version


def _package_files(pkg_dir: str, under: str) -> dict[str, tuple[bytes, int]]:
    out = {}
    base = os.path.dirname(pkg_dir)
    for d, subdirs, names in os.walk(pkg_dir):
        subdirs[:] = sorted(s for s in subdirs if s != "__pycache__")
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            src = os.path.join(d, name)
            with open(src, "rb") as f:
                out[f"{under}/{os.path.relpath(src, base)}"] = (f.read(), FILE_MODE)
    return out


def plan(t: Toolkit, version: tuple[int, int]) -> dict[str, tuple[bytes, int]]:
    """{path relative to DIR: (bytes, mode)} of every file DIR holds but the manifest."""
    import nvdocker2
    from nvdocker2.runtime import launcher

    want = {}
    lib = f"{t.dir}/lib"
    for name, text in launcher.render(t.python, [lib], f"{t.dir}/{CONFIG}").items():
        want[name] = (text.encode(), PROGRAM_MODE)
    want[CONFIG] = (CONFIG_TEXT.format(config=f"{t.dir}/{CONFIG}", dir=t.dir, hook=HOOK)
                    .encode(), FILE_MODE)
    want.update(_package_files(os.path.dirname(os.path.abspath(nvdocker2.__file__)), "lib"))
    if version < (3, 11):
        try:
            import tomli
        except ImportError:
            raise Refused(f"{t.python} on the node is Python {version[0]}.{version[1]}, which "
                          "needs tomli, and the agent's image has none",
                          "build the agent's image with python3-tomli") from None
        want.update(_package_files(os.path.dirname(os.path.abspath(tomli.__file__)), "lib"))
    return want


def read_json(real: str, name: str, node: str) -> Any:
    """The JSON file `name` in the directory `real` (`node` as the node names it), or None
    when it is not there or not JSON; the directory itself is never a symlink."""
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        data = files.read_entry(fd, name, f"{node}/{name}")
    finally:
        os.close(fd)
    try:
        return json.loads(data[0]) if data else None
    except ValueError:
        return None


def _read_manifest(real: str, node: str) -> dict:
    doc = read_json(real, MANIFEST, node)
    if not isinstance(doc, dict) or not isinstance(doc.get("made"), list):
        raise Refused(f"{node} exists and is not a toolkit nvdocker2 installed",
                      f"move {node} away on the node, or choose another --install-toolkit")
    return doc


def _holds(real: str, want: dict[str, tuple[bytes, int]]) -> bool:
    """Whether the directory holds exactly `want` (and the manifest; __pycache__ aside)."""
    seen = set()
    for d, subdirs, names in os.walk(real):
        subdirs[:] = [s for s in subdirs if s != "__pycache__"]
        for name in names:
            rel = os.path.relpath(os.path.join(d, name), real)
            if rel in (MANIFEST, CDI_RECORD):
                continue
            if rel not in want:
                return False
            st = os.lstat(os.path.join(real, rel))
            data, mode = want[rel]
            if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode:
                return False
            with open(os.path.join(real, rel), "rb") as f:
                if f.read() != data:
                    return False
            seen.add(rel)
    return seen == set(want)


def _stage(stage: str, want: dict[str, tuple[bytes, int]], manifest: dict) -> None:
    """Write the manifest and the files into `stage`, which the caller made and checked."""
    files.write_new(os.path.join(stage, MANIFEST),
                    (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), FILE_MODE)
    for rel, (data, mode) in sorted(want.items()):
        path = os.path.join(stage, rel)
        files.make_dirs(os.path.dirname(path), DIR_MODE)
        files.write_new(path, data, mode)
    for d, _, _ in os.walk(stage):
        files.fsync_dir(d)


def _remove_stale(path: str, node: str) -> None:
    """Remove DIR.new or DIR.old left by an interrupted run: ours only (manifest first)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        raise Refused(f"{node} exists and is not a directory nvdocker2 made",
                      f"remove {node} on the node")
    if os.listdir(path):
        _read_manifest(path, node)
    shutil.rmtree(path)


@dataclass(frozen=True)
class Placed:
    changed: bool
    new: bool  # DIR was not there before
    summary: str


def check(t: Toolkit) -> tuple[int, int]:
    """Refuse, before anything is changed, a DIR or a python3 that cannot be trusted."""
    if not t.dir.startswith("/") or os.path.normpath(t.dir) != t.dir or t.dir == "/":
        raise Refused(f"--install-toolkit {t.dir} is not an absolute, normal directory path",
                      f"e.g. --install-toolkit {DEFAULT_DIR}")
    why = door.unsafe_to_run(os.path.abspath(t.host_root), want_dir=True)
    if why is not None:
        raise Refused(f"--host-root {t.host_root}: {why}", "mount the node's / there")
    found, rest = resolve(t.host_root, t.dir)
    if not rest:
        _read_manifest(found, t.dir)
    return python_version(t)


def install(t: Toolkit) -> Placed:
    """Put the toolkit into DIR (unchanged when it holds it already)."""
    version = check(t)
    want = plan(t, version)
    found, rest = resolve(t.host_root, t.dir)
    real = os.path.join(found, rest) if rest else found
    old = None
    if not rest:
        old = _read_manifest(real, t.dir)
        if _holds(real, want):
            return Placed(False, False, f"toolkit in {t.dir} unchanged")
    _remove_stale(real + ".new", t.dir + ".new")
    _remove_stale(real + ".old", t.dir + ".old")
    root = os.path.realpath(t.host_root)
    made = old["made"] if old else [
        "/" + os.path.relpath(m, root) for m in files.make_dirs(os.path.dirname(real), DIR_MODE)]
    from nvdocker2 import __version__

    # Below a sticky directory anyone may have taken DIR.new since it was removed: staged
    # only where the new directory and every one above it are root's (then no one can swap it).
    files.make_dirs(real + ".new", DIR_MODE)
    try:
        resolve(t.host_root, t.dir + ".new")
    except Refused:
        if old is None:
            remove_made(t.host_root, made)
        raise
    _stage(real + ".new", want, {"nvdocker2": __version__, "made": made,
                                 "files": sorted(want)})
    if old is not None and os.path.isfile(os.path.join(real, CDI_RECORD)):
        files.copy_new(os.path.join(real, CDI_RECORD), os.path.join(real + ".new", CDI_RECORD))
    if old is not None:
        os.rename(real, real + ".old")
    os.rename(real + ".new", real)
    files.fsync_dir(os.path.dirname(real))
    if old is not None:
        shutil.rmtree(real + ".old")
    return Placed(True, old is None, f"toolkit {'replaced' if old else 'copied'} into "
                                     f"{t.dir} ({len(want)} files)")


def verify(t: Toolkit, timeout: float = 30.0) -> None:
    """Run `DIR/nvidia-container-runtime --version` as the node would (chroot into the host
    root); Refused unless it exits 0 with this version."""
    from nvdocker2 import __version__

    argv = [t.runtime, "--version"]
    if t.host_root != "/":
        argv = ["chroot", t.host_root, *argv]
    try:
        p = door.run(argv, text=True, timeout=timeout)
    except OSError as e:
        raise Refused(f"cannot run {t.runtime} on the node: {e}",
                      "see that the node's python3 runs") from None
    if p.returncode != 0 or f"version {__version__} " not in p.stdout:
        last = ((p.stderr or p.stdout).strip().splitlines() or ["no output"])[-1]
        raise Refused(f"{t.runtime} --version on the node failed (exit {p.returncode}): {last}",
                      "see that the node's python3 runs the toolkit's launchers")


def remove_made(host_root: str, made: list) -> None:
    """Remove the directories nvdocker2 made (node paths, outermost first), deepest first,
    while they are empty."""
    root = os.path.realpath(host_root)
    for node in reversed(made):
        try:
            os.rmdir(os.path.join(root, str(node).lstrip("/")))
        except OSError:
            break  # not empty (someone else's since), or gone: leave it and those above


def remove(t: Toolkit) -> bool:
    """Remove DIR and the directories made for it (when empty); True when it was there."""
    found, rest = resolve(t.host_root, t.dir)
    real = os.path.join(found, rest) if rest else found
    for stale in (".new", ".old"):
        _remove_stale(real + stale, t.dir + stale)
    if rest:
        return False
    made = _read_manifest(real, t.dir)["made"]
    shutil.rmtree(real)
    remove_made(t.host_root, made)
    d = os.path.dirname(real)
    while not os.path.isdir(d):
        d = os.path.dirname(d)
    files.fsync_dir(d)
    return True
