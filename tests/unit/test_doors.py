"""The lock on the doors to the host (nvdocker2/host): outside `host/run.py` no module of
nvdocker2 starts a program or looks one up, outside `host/files.py` none creates a file or a
directory, and no environment variable but the documented ones is read (test hooks only
through `host/testing.py`, under the test suite's switch).

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


# The environment variables nvdocker2 reads that change what it does (README, docs/).
DOCUMENTED_ENV = {"NVDOCKER2_STATE_DIR", "NVDOCKER2_DEBUG", "NVDOCKER2_SMOKE_IMAGE"}

PROCESS_MODULES = {"subprocess", "pty", "multiprocessing"}
OS_PROCESS = ("exec", "spawn", "posix_spawn")
OS_PROCESS_EXACT = {"system", "popen", "fork", "forkpty"}
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


def process_calls(tree: ast.Module) -> list[str]:
    """Where `tree` starts or looks up a program (import or call), as "line: what"."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                PROCESS_MODULES):
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            bad = [a.name for a in node.names if a.name.startswith(OS_PROCESS)
                   or a.name in OS_PROCESS_EXACT or a.name == "which"]
            if bad:
                found.append(f"{node.lineno}: from {node.module} import {', '.join(bad)}")
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            head, _, attr = name.rpartition(".")
            if head == "os" and (attr.startswith(OS_PROCESS) or attr in OS_PROCESS_EXACT):
                found.append(f"{node.lineno}: {name}")
            elif name == "shutil.which":
                found.append(f"{node.lineno}: {name}")
    return found


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


def test_only_host_run_starts_or_looks_up_programs():
    bad = [f"nvdocker2/{rel}:{hit}" for rel, tree in modules()
           if rel != RUN_DOOR for hit in process_calls(tree)]
    assert bad == [], "run programs through nvdocker2.host.run:\n" + "\n".join(bad)


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
    "os.posix_spawn('/x', ['x'], {})", "os.popen('x')",
])
def test_the_process_check_sees(source):
    assert process_calls(ast.parse(source))


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
