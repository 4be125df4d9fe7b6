"""The lock on the doors to the host (nvdocker2/host): outside `host/run.py` no module of
nvdocker2 starts a program or looks one up, outside `host/load.py` none loads code other than
by `import` (ctypes, runpy, importlib's loading by path), outside `host/files.py` none creates
a file or a directory, and no environment variable but the documented ones is read (test
hooks only through `host/testing.py`, under the test suite's switch).

The standard library is held to it too: what starts a program or loads code found on a
search path though its name does not say so (`ctypes.util.find_library` runs ldconfig, gcc
and objdump; `platform.architecture` runs `file`; `uuid.getnode` may run ip or ifconfig) is
listed in REFUSED, and found through aliases, `from` imports and attribute access.

This reads the source (the AST of every module under nvdocker2/), so a new call site fails
here before it can reopen a hole that a test of behaviour would only find later.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nvdocker2

PACKAGE = Path(nvdocker2.__file__).resolve().parent
RUN_DOOR = "host/run.py"
FILES_DOOR = "host/files.py"
TEST_SWITCH = "host/testing.py"
LOAD_DOOR = "host/load.py"


# The environment variables nvdocker2 reads that change what it does (README, docs/).
DOCUMENTED_ENV = {"NVDOCKER2_STATE_DIR", "NVDOCKER2_DEBUG", "NVDOCKER2_SMOKE_IMAGE"}

# The standard library's doors: what starts a program, or loads code other than by `import`
# (from a search path, or from a file by its path), by full name. A module is refused whole
# (its import and every use); a name, with what follows it (`ctypes.util.find_library`).
# Each is allowed in its door module alone.
PROGRAM, CODE = "starts a program", "loads code"
DOOR_OF = {PROGRAM: RUN_DOOR, CODE: LOAD_DOOR}
REFUSED = {
    # modules whose purpose is to start programs (or that open a pager or a browser)
    **dict.fromkeys(["subprocess", "_posixsubprocess", "pty", "multiprocessing",
                     "asyncio.subprocess", "concurrent.futures.process", "webbrowser",
                     "pydoc", "distutils", "ensurepip", "venv"], PROGRAM),
    # os and shutil: exec, spawn, fork, a shell, a lookup on PATH
    **dict.fromkeys(["os.system", "os.popen", "os.fork", "os.forkpty", "os.startfile",
                     "shutil.which"], PROGRAM),
    # `file -b` (architecture), `uname -p` (processor; uname()'s processor, which platform()
    # and unpacking uname() read); system(), machine(), release() and libc_ver() run nothing
    **dict.fromkeys(["platform.architecture", "platform.processor", "platform.platform",
                     "platform.uname", "platform._syscmd_file", "platform._syscmd_ver",
                     "platform._Processor"], PROGRAM),
    # without libuuid: ip, ifconfig, arp, netstat found on PATH (uuid4 runs nothing)
    **dict.fromkeys(["uuid.getnode", "uuid.uuid1", "uuid._get_command_stdout"], PROGRAM),
    **dict.fromkeys(["asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
                     "concurrent.futures.ProcessPoolExecutor", "imaplib.IMAP4_stream"],
                    PROGRAM),
    # ctypes: find_library runs ldconfig, gcc, cc, ld, objdump; CDLL("name") searches
    # LD_LIBRARY_PATH; runpy and the importlib loaders run a file found by name or path
    **dict.fromkeys(["ctypes", "_ctypes", "runpy", "zipimport", "imp",
                     "importlib.util.spec_from_file_location", "importlib.util.spec_from_loader",
                     "importlib.machinery.SourceFileLoader",
                     "importlib.machinery.SourcelessFileLoader",
                     "importlib.machinery.ExtensionFileLoader",
                     "importlib.machinery.PathFinder", "importlib.machinery.FileFinder"], CODE),
}
REFUSED_PREFIXES = {"os.exec": PROGRAM, "os.spawn": PROGRAM, "os.posix_spawn": PROGRAM}
# Methods whose receiver cannot be named (an event loop's).
REFUSED_METHODS = {"subprocess_exec": PROGRAM, "subprocess_shell": PROGRAM}
IMPORTING_BY_NAME = {"__import__", "importlib.import_module"}
# Names no module of ours gives a variable: read as the module even where no import binds them
# (any other unbound name is a variable: `imp`, `platform` and `uuid` often are).
UNMISTAKABLE = {"os", "shutil", "subprocess", "ctypes", "_ctypes", "importlib", "asyncio"}
CREATING_METHODS = {"mkdir", "makedirs", "write_text", "write_bytes", "touch", "mkfifo",
                    "mknod", "symlink_to", "hardlink_to", "link_to"}
CREATING_SHUTIL = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"}
CREATING_OS = {"mkdir", "makedirs", "mkfifo", "mknod", "symlink", "link"}


def modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        out.append((rel, ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "<expr>"  # a call's result, a subscript: a receiver we cannot name


def _write_mode(call: ast.Call, position: int) -> bool:
    """An open() whose mode (positional `position` or mode=) writes, creates or appends."""
    mode = call.args[position] if len(call.args) > position else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wxa+")
    return True  # a mode we cannot read is a mode we cannot vouch for


def refused(name: str) -> str | None:
    """Why the standard library's `name` (full, dotted) is a door, or None."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        why = REFUSED.get(".".join(parts[:n]))
        if why:
            return why
    return next((why for prefix, why in REFUSED_PREFIXES.items() if name.startswith(prefix)),
                None)


def _bindings(tree: ast.Module) -> dict[str, str]:
    """Local name -> the full name it stands for, from the module's imports (`import a.b as
    c`, `from a import b as c`); relative imports are nvdocker2's own."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update((a.asname, a.name) if a.asname else (a.name.split(".")[0],) * 2
                       for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
    return out


def door_calls(tree: ast.Module) -> list[tuple[str, str]]:
    """Where `tree` uses a door of the standard library (REFUSED): (why, "line: what"), for
    imports, `from` imports and their aliases, attribute access, getattr with a constant
    name, imports by a constant name and the builtin `help()` (a pager)."""
    names = _bindings(tree)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

    def full(node: ast.AST) -> str:
        head, _, rest = _dotted(node).partition(".")
        base = names.get(head, head if head in UNMISTAKABLE else "<unbound>")
        return f"{base}.{rest}" if rest else base

    found = []

    def see(line: int, what: str, name: str) -> None:
        why = refused(name)
        if why:
            found.append((why, f"{line}: {what}" + (f" ({name})" if name != what else "")))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                see(node.lineno, f"import {a.name}", a.name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if a.name != "*":
                    see(node.lineno, f"from {node.module} import {a.name}",
                        f"{node.module}.{a.name}")
                elif refused(node.module) or any(k.startswith(node.module + ".")
                                                 for k in [*REFUSED, *REFUSED_PREFIXES]):
                    found.append((refused(node.module) or PROGRAM,
                                  f"{node.lineno}: from {node.module} import *"))
        elif isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            see(node.lineno, _dotted(node), full(node))
            if isinstance(node, ast.Attribute) and node.attr in REFUSED_METHODS:
                found.append((REFUSED_METHODS[node.attr], f"{node.lineno}: {_dotted(node)}"))
        elif isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            builtin = dotted in ("help", "__import__", "getattr") and dotted not in names
            callee = dotted if builtin else full(node.func)
            first = node.args[0] if node.args else None
            second = node.args[1] if len(node.args) > 1 else None
            if callee == "help":
                found.append((PROGRAM, f"{node.lineno}: help() (a pager)"))
            elif callee == "getattr" and isinstance(second, ast.Constant) and isinstance(
                    second.value, str):
                see(node.lineno, f"getattr({_dotted(first)}, {second.value!r})",
                    f"{full(first)}.{second.value}")
            elif callee in IMPORTING_BY_NAME and isinstance(first, ast.Constant) and (
                    isinstance(first.value, str)):
                see(node.lineno, f"{_dotted(node.func)}({first.value!r})", first.value)
    return found


def process_calls(tree: ast.Module) -> list[str]:
    """Where `tree` starts or looks up a program (import or call), as "line: what"."""
    return [hit for why, hit in door_calls(tree) if why == PROGRAM]


def creating_calls(tree: ast.Module) -> list[str]:
    """Where `tree` creates a file or a directory, as "line: what"."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        head, _, attr = name.rpartition(".")
        if name in ("open", "io.open") and _write_mode(node, 1):
            found.append(f"{node.lineno}: {name}(..., writing)")
        elif head and attr == "open" and head not in ("os", "io", "gzip", "tarfile") and (
                _write_mode(node, 0)):
            found.append(f"{node.lineno}: {name}(writing)")
        elif name == "os.open" and any("O_CREAT" in _dotted(n) for a in node.args
                                       for n in ast.walk(a)):
            found.append(f"{node.lineno}: os.open(..., O_CREAT)")
        elif head == "os" and attr in CREATING_OS:
            found.append(f"{node.lineno}: {name}")
        elif head == "shutil" and attr in CREATING_SHUTIL:
            found.append(f"{node.lineno}: {name}")
        elif head and head not in ("os", "shutil") and attr in CREATING_METHODS:
            found.append(f"{node.lineno}: {name}")
    return found


def _constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and (
                isinstance(node.value.value, str)):
            out.update((t.id, node.value.value) for t in node.targets if isinstance(t, ast.Name))
    return out


def env_reads(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of every NVDOCKER2_* variable read from the environment directly."""
    consts = _constants(tree)

    def value(n: ast.AST) -> str | None:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return n.value
        if isinstance(n, ast.Name):
            return consts.get(n.id)
        return None

    found = []
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and _dotted(node.func) in (
                "os.environ.get", "os.getenv", "environ.get", "env.get") and node.args:
            arg = node.args[0]
        elif isinstance(node, ast.Subscript) and _dotted(node.value) in ("os.environ",):
            arg = node.slice.value if type(node.slice).__name__ == "Index" else node.slice
        name = value(arg) if arg is not None else None
        if name and name.startswith("NVDOCKER2_"):
            found.append((node.lineno, name))
    return found


def test_only_host_run_starts_or_looks_up_programs_and_only_host_load_loads_code():
    bad = [f"nvdocker2/{rel}:{hit} ({why})" for rel, tree in modules()
           for why, hit in door_calls(tree) if rel != DOOR_OF[why]]
    assert bad == [], ("run programs through nvdocker2.host.run and load code through "
                       "nvdocker2.host.load:\n" + "\n".join(bad))


def test_only_host_files_creates_files_and_directories():
    bad = [f"nvdocker2/{rel}:{hit}" for rel, tree in modules()
           if rel != FILES_DOOR for hit in creating_calls(tree)]
    assert bad == [], "create files and directories through nvdocker2.host.files:\n" + (
        "\n".join(bad))


def test_no_environment_variable_but_the_documented_ones_steers_nvdocker2():
    bad = [f"nvdocker2/{rel}:{line}: {name}" for rel, tree in modules() if rel != TEST_SWITCH
           for line, name in env_reads(tree) if name not in DOCUMENTED_ENV]
    assert bad == [], ("read test hooks through nvdocker2.host.testing.hook (the test "
                       "suite's switch), and document any other variable:\n" + "\n".join(bad))


# --- the checks above catch what they are meant to ---------------------------------------


@pytest.mark.parametrize("source", [
    "import subprocess", "from subprocess import run", "os.execvp('x', ['x'])",
    "os.system('x')", "shutil.which('dockerd')", "from shutil import which",
    "os.posix_spawn('/x', ['x'], {})", "os.popen('x')", "import os as o\no.spawnv(0, 'x', [])",
    "from os import execv as run_it", "import shutil as s\ns.which", "getattr(os, 'system')",
    "import platform\nplatform.architecture()", "from platform import processor",
    "import platform as p\np.uname().processor", "import platform\nplatform.platform()",
    "import uuid\nuuid.getnode()", "from uuid import uuid1 as u", "import webbrowser",
    "from pty import spawn", "import multiprocessing.pool", "import pydoc", "help(len)",
    "from concurrent.futures import ProcessPoolExecutor",
    "import asyncio\nasyncio.create_subprocess_exec('x')", "loop.subprocess_shell(p, 'x')",
    "__import__('subprocess')", "importlib.import_module('subprocess')",
    "from importlib import import_module as im\nim('pty')", "from os import *",
])
def test_the_process_check_sees(source):
    assert process_calls(ast.parse(source))


@pytest.mark.parametrize("source", [
    "import ctypes", "import ctypes.util", "from ctypes.util import find_library",
    "import ctypes.util as cu\ncu.find_library('c')", "from ctypes import CDLL",
    "import _ctypes", "import runpy", "import importlib.util\n"
    "importlib.util.spec_from_file_location('m', '/x.py')",
    "from importlib.machinery import SourceFileLoader", "import zipimport",
    "__import__('ctypes')",
])
def test_the_code_loading_check_sees(source):
    assert [why for why, _ in door_calls(ast.parse(source))] and all(
        why == CODE for why, _ in door_calls(ast.parse(source)))


@pytest.mark.parametrize("source", [
    "import os\nos.environ", "import platform\nplatform.system()",
    "import platform\nplatform.machine(); platform.release(); platform.libc_ver()",
    "import uuid\nuuid.uuid4()", "platform.architecture(); uuid.getnode(); imp.path",
    "from concurrent.futures import ThreadPoolExecutor", "import importlib\n"
    "importlib.import_module('nvdocker2.engines.docker.front')", "help = 'x'\nprint(help)",
    "self.which('x')", "from .run import which", "x.system", "sys.platform",
    "import shutil\nshutil.rmtree(p)",
])
def test_the_door_check_lets_the_rest_be(source):
    assert door_calls(ast.parse(source)) == []


@pytest.mark.parametrize("source", [
    "Path('/etc/cdi').mkdir(parents=True)", "os.makedirs('/etc/cdi')", "os.mkdir('/x', 0o700)",
    "open('/x', 'w')", "open(p, mode='a')", "p.open('wb')", "p.write_text('x')",
    "os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)", "shutil.copyfile(a, b)", "p.touch()",
])
def test_the_creation_check_sees(source):
    assert creating_calls(ast.parse(source))


@pytest.mark.parametrize("source", ["open(p, 'rb')", "open(p)", "p.open('rb')",
                                    "os.open(p, os.O_RDONLY)", "tempfile.mkdtemp()"])
def test_the_creation_check_lets_reads_be(source):
    assert creating_calls(ast.parse(source)) == []


def test_the_environment_check_sees_a_test_hook_read_directly():
    tree = ast.parse('HOOK = "NVDOCKER2_TEST_X"\nos.environ.get(HOOK)\nos.environ["NVDOCKER2_Y"]')
    assert env_reads(tree) == [(2, "NVDOCKER2_TEST_X"), (3, "NVDOCKER2_Y")]
