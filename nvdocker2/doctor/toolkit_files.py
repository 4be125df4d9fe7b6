"""What doctor reads of the NVIDIA toolkit's files: config.toml as the runtime and hook
read it, and the version of an installed program (a launcher script or an executable)."""

from __future__ import annotations

import ast
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from nvdocker2 import toolkit_config

if TYPE_CHECKING:
    from nvdocker2.doctor.context import Context


@dataclass(frozen=True)
class ToolkitFile:
    """config.toml as the runtime and hook read it: `config` holds the defaults when the file
    is missing or refused (`error`, one line naming the file and the key)."""

    path: PurePosixPath
    exists: bool
    config: toolkit_config.ToolkitConfig
    error: str | None = None
    from_env: bool = False
    # Rootless Docker: the per-user config.toml the runtime reads over `path` (None: not
    # rootless, or no HOME); `user_exists` whether there is one.
    user_path: PurePosixPath | None = None
    user_exists: bool = False


def read_toolkit_config(ctx: Context) -> ToolkitFile:
    """config.toml through the runtime's own reader, so doctor refuses what the runtime would;
    for a rootless Docker with the per-user file over it, as that runtime reads them."""
    env_path = ctx.env.get(toolkit_config.CONFIG_ENV)
    path = PurePosixPath(env_path or toolkit_config.DEFAULT_CONFIG_PATH)
    real = ctx.root.path(path)
    from_env = bool(env_path)
    defaults = toolkit_config.ToolkitConfig(path=str(path), from_env=from_env)
    user = toolkit_config.user_config_path(ctx.env) if ctx.rootless() else None
    user_path = PurePosixPath(user) if user else None
    try:
        raw: bytes | None = real.read_bytes()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        return ToolkitFile(path, True, defaults, f"{path}: cannot read: {exc.strerror}",
                           from_env, user_path)
    user_raw = None
    try:
        if user_path is not None:
            real_user = str(ctx.root.path(user_path))
            try:
                user_raw = toolkit_config.read_user_file(real_user)
            except toolkit_config.ConfigError as exc:  # named as the host names it
                raise toolkit_config.ConfigError(
                    str(exc).replace(real_user, str(user_path))) from None
        cfg = toolkit_config.layered(raw, str(path), from_env, user_raw, user)
    except toolkit_config.ConfigError as exc:
        return ToolkitFile(path, raw is not None, defaults, str(exc), from_env, user_path,
                           user_path is not None and ctx.root.path(user_path).exists())
    return ToolkitFile(path, raw is not None, cfg, None, from_env, user_path,
                       user_raw is not None)


# How nvdocker2's launchers put the package on sys.path: the package's launchers
# (nvdocker2.runtime.launcher) append a list, the rpm's insert one directory.
_SYS_PATH_LINE = re.compile(
    r"sys\.path\[len\(sys\.path\):\] = (\[[^\]]*\])"
    r"|sys\.path\.insert\(\s*0\s*,\s*(['\"][^'\"]+['\"])\s*\)"
)
# Prefix of a `program_version` answer for an nvdocker2 launcher that cannot start.
BROKEN = "broken: "
_VERSION_LINE = re.compile(r"""^__version__ = ["']([^"']+)["']""", re.MULTILINE)


def _launcher_sys_path(text: str) -> list[str]:
    """The directories a launcher puts on sys.path (the first well-formed list found)."""
    for m in _SYS_PATH_LINE.finditer(text):
        try:
            dirs = ast.literal_eval(m.group(1) or f"[{m.group(2)}]")
        except (ValueError, SyntaxError):
            continue
        if (
            isinstance(dirs, list)
            and dirs
            and all(isinstance(d, str) and d.startswith("/") for d in dirs)
        ):
            return dirs
    return []


def _sh_assignments(text: str) -> dict[str, str]:
    """`NAME=value` lines of a sh launcher, unquoted (the sh runtime launcher keeps the Python
    code it runs in a quoted `code=` variable)."""
    values = {}
    for line in text.splitlines():
        m = re.match(r"([A-Za-z_]\w*)=(\S.*)$", line)
        if m:
            try:
                words = shlex.split(m.group(2))
            except ValueError:
                continue
            if len(words) == 1:
                values[m.group(1)] = words[0]
    return values


def program_version(ctx: Context, path: Path | None) -> tuple[str | None, str]:
    """The nvdocker2 version a runtime/hook executable belongs to, and how it was learnt.

    nvdocker2's executables are pip console scripts (`#!PYTHON` … `from nvdocker2…`) or the
    package's launchers (a sh or Python script naming the interpreter and the sys.path entry
    that holds nvdocker2). A launcher's package directory is read directly; a console script's
    interpreter is asked. Anything else is not nvdocker2's and is asked `--version`.
    """
    if path is None:
        return None, "not found"
    try:
        with open(path, "rb") as f:
            head = f.read(16384).decode("utf-8", "replace")
    except OSError as exc:
        return None, f"cannot read it: {exc.strerror}"
    if head.startswith("#!") and "nvdocker2" in head:
        text = "\n".join(_sh_assignments(head).values()) + "\n" + head
        dirs = _launcher_sys_path(text)
        if dirs:
            for d in dirs:
                found = _VERSION_LINE.search(ctx.root.read_text(f"{d}/nvdocker2/__init__.py") or "")
                if found:
                    return found.group(1), f"nvdocker2 {found.group(1)} in {d}"
            return None, f"{BROKEN}none of {', '.join(dirs)} holds the nvdocker2 package"
        words = shlex.split(head[2:].split("\n", 1)[0])
        if words and os.path.basename(words[0]) == "env":
            words = words[1:]
        interp = words[:1]
        if interp and os.path.basename(interp[0]) in ("sh", "dash", "bash"):
            # pip's launchers find the package when they run: ask them.
            res = ctx.run([str(path), "--version"])
            m = re.match(r"\S+ version (\S+) \(nvdocker2\)", res.first_line() or "")
            if res.ok and m:
                return m.group(1), f"nvdocker2 {m.group(1)} (its --version)"
            return None, f"{BROKEN}`{path.name} --version` failed: {res.first_line()}"
        res = ctx.run(interp + ["-c", "import nvdocker2; print(nvdocker2.__version__)"])
        if res.ok and res.stdout.strip():
            return res.stdout.strip(), f"nvdocker2 {res.stdout.strip()} (read from the script)"
        return None, f"{BROKEN}its Python cannot import nvdocker2: {res.first_line()}"
    res = ctx.run([str(path), "--version"])
    if not res.ok:
        return None, f"`{path.name} --version` failed: {res.first_line()}"
    return None, res.first_line()
