"""CSV mode (Jetson/Tegra): the mount-spec CSV files become a direct-mode Plan.

NVIDIA's format (internal/platform-support/tegra/csv): every `*.csv` file (not `.csv`
itself, not a directory) in `[nvidia-container-runtime.modes.csv] mount-spec-path`; only
`devices.csv`, `drivers.csv` and `l4t.csv` unless the container sets
NVIDIA_REQUIRE_JETPACK=csv-mounts=all. Each line is `TYPE, PATH` with TYPE one of

- `dev`: a character device (a glob like /dev/dri/card* allowed) -> `linux.devices`;
- `lib`: a library or other file, mounted read-only at its own, resolved path;
- `sym`: a symlink; each link of its chain is made in the container (by direct mode's hook,
  with its target as an absolute path) and the file it ends at is mounted read-only;
- `dir`: a directory, bind-mounted read-only.

A line of another shape, or a path that is not there, is skipped, as NVIDIA skips it. Paths
are looked up under the driver root (`[nvidia-container-cli] root`) and never outside it; in
the image, every destination is resolved as direct mode resolves it (nvdocker2.direct.rootfs),
so an image symlink cannot carry a mount or a link elsewhere. NVIDIA_VISIBLE_DEVICES asks for
the board's one GPU: `all` or `0` (NVIDIA's pure CSV mode refuses any other id). Stdlib only:
the runtime imports it at `create`, and only in csv mode.
"""

from __future__ import annotations

import glob
import os
import stat
from typing import Any

from nvdocker2.direct.discover import DeviceNode, DriverFile, char_node, host_path
from nvdocker2.direct.errors import DirectError
from nvdocker2.direct.rootfs import UnsafePath, resolve_in_root, rootfs_of
from nvdocker2.direct.spec import Plan, edit_spec, host_ldconfig

BASE_FILES = ("devices.csv", "drivers.csv", "l4t.csv")
TYPES = ("dev", "lib", "sym", "dir")
JETPACK_ENV = "NVIDIA_REQUIRE_JETPACK"
ALL_FILES = "csv-mounts=all"
TEGRA_RELEASE = "/etc/nv_tegra_release"  # NVIDIA's csv mode mounts it too
MAX_CHAIN = 40
FOLDER_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "ro")  # NVIDIA's, for a dir


def csv_files(mount_spec_path: str, all_files: bool = False) -> list[str]:
    """The CSV files NVIDIA's csv mode reads from `mount_spec_path`, in name order."""
    try:
        names = sorted(os.listdir(mount_spec_path))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise DirectError(f"cannot read {mount_spec_path}: {err.strerror}",
                          "fix [nvidia-container-runtime.modes.csv] mount-spec-path") from None
    found = []
    for name in names:
        path = os.path.join(mount_spec_path, name)
        if name == ".csv" or not name.lower().endswith(".csv") or os.path.isdir(path):
            continue
        if all_files or name in BASE_FILES:
            found.append(path)
    return found


def parse_line(line: str) -> tuple[str, str] | None:
    """(type, path) of a mount-spec line, or None for a line NVIDIA skips."""
    kind, comma, path = line.strip().partition(",")
    kind, path = kind.strip(), path.strip()
    if not comma or kind not in TYPES or not path:
        return None
    return kind, path


def read_specs(files: list[str]) -> list[tuple[str, str]]:
    """Every (type, path) of `files`, in order, duplicates dropped."""
    specs: list[tuple[str, str]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as err:
            raise DirectError(f"cannot read {path}: {err.strerror}") from None
        for line in lines:
            entry = parse_line(line)
            if entry is not None and entry[1].startswith("/") and entry not in specs:
                specs.append(entry)
    return specs


def _matches(root: str, path: str) -> list[str]:
    """`path` (absolute, may be a glob) as the in-root paths that exist under `root`."""
    if not glob.has_magic(path):
        return [path] if os.path.lexists(host_path(root, path)) else []
    base = glob.escape(os.path.abspath(root)) if root != "/" else ""
    found = sorted(glob.glob(base + path))
    return ["/" + os.path.relpath(p, os.path.abspath(root)) for p in found]


def _real(root: str, path: str) -> str:
    """`path` with every symlink resolved inside `root` (clamped there, never out of it)."""
    return resolve_in_root(root, path, follow_final=True, refuse_escape=False)


def _chain(root: str, path: str) -> tuple[list[tuple[str, str]], str]:
    """(the links of the symlink chain at `path` as (link, absolute target), the in-root
    path of the file it ends at)."""
    links: list[tuple[str, str]] = []
    current = path
    for _ in range(MAX_CHAIN):
        where = host_path(root, current)
        try:
            st = os.lstat(where)
        except OSError:
            return links, current
        if not stat.S_ISLNK(st.st_mode):
            return links, current
        target = os.readlink(where)
        # the link's folder with its own symlinks resolved, as the kernel reads the target
        folder = _real(root, os.path.dirname(current))
        absolute = os.path.normpath(os.path.join(folder, target))
        absolute = "/" + absolute.lstrip("/")
        links.append((current, absolute))
        current = absolute
    raise DirectError(f"too many levels of symlinks at {host_path(root, path)}")


def _under(path: str, folders: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in folders)


def _regular(root: str, path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(host_path(root, path)).st_mode)
    except OSError:
        return False


def csv_plan(specs: list[tuple[str, str]], driver_root: str) -> tuple[Plan, list[str]]:
    """(the Plan of the devices, files and links that `specs` name under `driver_root`, the
    directories to bind-mount). Files and links inside one of those directories are left to
    the directory's mount."""
    root = os.path.abspath(driver_root)
    folders: list[str] = []
    for kind, path in specs:
        if kind == "dir":
            for match in _matches(root, path):
                real = _real(root, match)
                if os.path.isdir(host_path(root, real)) and real not in folders:
                    folders.append(real)
    nodes: dict[str, DeviceNode] = {}
    files: dict[str, DriverFile] = {}
    links: dict[str, str] = {}

    def add_file(path: str) -> None:
        if path not in files and not _under(path, folders) and _regular(root, path):
            files[path] = DriverFile(path=path, host_path=host_path(root, path), links=(),
                                     kind="lib", capability="csv")

    for kind, path in specs:
        for match in _matches(root, path):
            if kind == "dev":
                node, _problem = char_node(root, match)
                if node is not None:
                    nodes.setdefault(node.path, node)
            elif kind == "lib":
                add_file(_real(root, match))
            elif kind == "sym":
                chain, end = _chain(root, match)
                if not chain or not _regular(root, end):
                    continue  # not a symlink, or a dangling one: NVIDIA skips it too
                for link, target in chain:
                    if not _under(link, folders):
                        links.setdefault(link, target)
                add_file(_real(root, end))
    if _regular(root, TEGRA_RELEASE):
        files.setdefault(TEGRA_RELEASE, DriverFile(
            path=TEGRA_RELEASE, host_path=host_path(root, TEGRA_RELEASE), links=(),
            kind="file", capability="csv"))
    plan = Plan(gpus=(), nodes=tuple(nodes.values()), files=tuple(files.values()),
                links=tuple(links.items()))
    return plan, folders


def mount_folders(spec: dict[str, Any], rootfs: str, folders: list[str], driver_root: str
                  ) -> None:
    """Add a read-only bind mount of each directory in `folders` to `spec` (in place), at
    its own path, resolved in the image as direct mode resolves its file mounts."""
    mounts = spec.setdefault("mounts", [])
    taken = {m.get("destination") for m in mounts if isinstance(m, dict)}
    for folder in folders:
        dest = resolve_in_root(rootfs, folder, follow_final=False, refuse_escape=True)
        if dest in taken:
            continue  # the user's own mount there wins
        there = os.path.join(rootfs, dest.lstrip("/"))
        if os.path.lexists(there) and not os.path.isdir(there):
            raise UnsafePath(
                f"{dest} in the container image is not a directory; cannot mount the CSV"
                " directory there", "remove it from the image")
        taken.add(dest)
        mounts.append({"destination": dest, "type": "bind",
                       "source": host_path(os.path.abspath(driver_root), folder),
                       "options": list(FOLDER_OPTIONS)})


def wanted(devices: Any) -> bool:
    """Whether the request's devices ask for the CSV set (`all`, `0`); raises for other ids."""
    if devices == "none":
        return False
    ids = [devices] if isinstance(devices, str) else list(devices)
    for ident in ids:
        if ident not in ("all", "0"):
            raise DirectError(
                f"NVIDIA_VISIBLE_DEVICES: csv mode serves the board's one GPU, {ident!r} is"
                " not it", "ask for NVIDIA_VISIBLE_DEVICES=all (or 0)")
    return bool(ids)


def csv_edit_for_create(spec: dict[str, Any], bundle: str, config: Any, runtime_path: str
                        ) -> dict[str, Any] | None:
    """The spec edited for csv mode, or None when the container asked for no GPU; raises
    `DirectError`, changing nothing. `spec` itself is not changed."""
    from nvdocker2.hook.request import RequestError, env_map, request_from_spec

    try:
        request = request_from_spec(spec, config)
    except RequestError as err:
        raise DirectError(err.message) from None
    if request is None or not wanted(request.devices):
        return None
    process = spec.get("process") or {}
    env = env_map(process.get("env") or ())
    driver_root = config.runtime.driver_root
    files = csv_files(config.runtime.csv_mount_spec_path,
                      env.get(JETPACK_ENV, "").strip() == ALL_FILES)
    plan, folders = csv_plan(read_specs(files), driver_root)
    rootfs = rootfs_of(spec, bundle)
    new = edit_spec(spec, plan, rootfs, runtime_path=runtime_path,
                    ldconfig=host_ldconfig(config.cli.ldconfig))
    mount_folders(new, rootfs, folders, driver_root)
    return new
