"""scripts/mutation.py's mutants: one change each, code only (no docstrings, f-string texts,
TYPE_CHECKING blocks or lines marked `pragma: no mutate`), each compiling, with keys that
name the function and survive the code moving down the file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "mutation.py"

SOURCE = '''"""Module docstring."""
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LIMIT = 3


def check(value, items):
    """Docstring."""
    if value > LIMIT and not items:
        raise ValueError(f"too big: {value}")
    for item in items:
        if item == "skip":
            continue
        print(item)
    keep = 1  # pragma: no mutate
    return value is None
'''


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mutation_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_each_mutant_is_one_compiling_change_of_code(tool, tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    mutants = tool.mutants_of(path)
    keys = [m.key for m in mutants]
    assert keys == [
        "<module>: 3 -> 4",
        "<module>: 3 -> 2",
        "check: value > LIMIT and (not items) -> value > LIMIT or not items",
        "check: value > LIMIT -> value >= LIMIT",
        "check: not items -> items",
        "check: deleted: raise ValueError(f'too big: {value}')",
        "check: item == 'skip' -> item != 'skip'",
        "check: 'skip' -> ''",
        "check: deleted: continue",
        "check: deleted: print(item)",
        "check: return value is None -> return None",
        "check: value is None -> value is not None",
    ]
    for mutant in mutants:
        compile(mutant.source, "m.py", "exec")
        assert mutant.source != SOURCE
        assert mutant.source.count("\n") == SOURCE.count("\n")


def test_keys_do_not_change_when_the_code_moves(tool, tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    before = [(m.key, m.line) for m in tool.mutants_of(path)]
    path.write_text(SOURCE.replace('"""Module docstring."""\n', '"""Module docstring."""\n\n\n\n'))
    after = [(m.key, m.line) for m in tool.mutants_of(path)]
    assert [k for k, _ in after] == [k for k, _ in before]
    assert all(b + 3 == a for (_, b), (_, a) in zip(before, after))


def test_functions_limit_the_mutants(tool, tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    assert {m.key.split(":")[0] for m in tool.mutants_of(path, ["check"])} == {"check"}


@pytest.mark.parametrize("where", ["conftest.py", "test_uses.py"])
def test_a_mutant_that_breaks_the_tests_imports_is_killed(tool, tmp_path, where):
    """A module that no longer imports, seen from a conftest (pytest exits 4) or from a test
    module (exits 2: an error during collection), is a mutant the tests noticed; the same
    tests passing is a survivor."""
    (tmp_path / "served.py").write_text("VALUE = 1\n")
    (tmp_path / where).write_text("import served\n")
    (tmp_path / "test_it.py").write_text("def test_it():\n    assert True\n")
    worker = tool.Worker(tmp_path, sys.executable)
    assert worker.run_tests(["test_it.py", *([where] if where != "conftest.py" else [])],
                            60)[0] == "survived"
    (tmp_path / "served.py").write_text("raise TypeError('broken at import')\n")
    verdict = worker.run_tests(["test_it.py", *([where] if where != "conftest.py" else [])], 60)
    assert verdict[0] == "killed", verdict
