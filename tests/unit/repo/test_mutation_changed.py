"""scripts/mutation.py --changed-since, the quick guard of scripts/test.sh: in a real git
repository with a release tag, the listed module whose file changed is chosen and, in it, only
the functions the change touched (committed or not); a survivor there fails the run, nothing
changed or no tag passes saying so, and a tag that is no commit is refused with a hint."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "mutation.py"

MODULE = '''"""A listed module."""
LIMIT = 3


def small(value):
    return value < LIMIT


def weak(value):
    if value is None:
        raise ValueError("no value")
    return value + 1


class Box:
    SIZE = 2

    def fits(self, n):
        return n <= self.SIZE
'''

TESTS = '''from pkg.m import Box, small, weak


def test_small():
    assert small(2) is True and small(3) is False


def test_weak_runs():
    weak(1)


def test_box():
    assert Box().fits(2) and not Box().fits(3)
'''

CONFIG = '''[[module]]
name = "pkg/m"
path = "pkg/m.py"
tests = ["tests/test_m.py"]

[[module]]
name = "pkg/other"
path = "pkg/other.py"
tests = ["tests/test_m.py"]
'''

ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
           GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org",
           GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A repository laid out as this one: the script, its configuration, a module, its tests."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts" / "mutation.py")
    (root / "tests" / "mutation").mkdir(parents=True)
    (root / "tests" / "mutation" / "modules.toml").write_text(CONFIG)
    (root / "tests" / "test_m.py").write_text(TESTS)
    (root / "pkg").mkdir()
    (root / "pkg" / "m.py").write_text(MODULE)
    (root / "pkg" / "other.py").write_text("def other():\n    return 1\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


@pytest.fixture
def tool(repo):
    spec = importlib.util.spec_from_file_location("mutation_tool_changed",
                                                  repo / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def guard(repo, *args):
    return subprocess.run([sys.executable, "scripts/mutation.py", "--jobs", "1",
                           "--changed-since", *args], cwd=repo, env=ENV, capture_output=True,
                          text=True, timeout=300)


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def keys(mutants):
    return sorted({m.qualname for m in mutants})


def test_the_touched_function_of_the_changed_module_is_chosen(repo, tool):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", "value + 1", "value + 2")  # uncommitted
    changed = tool.changed_lines(repo, "v1.0")
    assert changed == {"pkg/m.py": {12}}
    path = repo / "pkg" / "m.py"
    chosen = tool.changed_mutants(path, tool.mutants_of(path), changed["pkg/m.py"])
    assert keys(chosen) == ["weak"]
    assert len(chosen) == len([m for m in tool.mutants_of(path) if m.qualname == "weak"])


def test_committed_and_uncommitted_changes_are_both_seen(repo, tool):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", "        return n <= self.SIZE", "        return n < self.SIZE")
    git(repo, "commit", "-q", "-am", "second")
    edit(repo / "pkg" / "m.py", "value < LIMIT", "value <= LIMIT")
    path = repo / "pkg" / "m.py"
    lines = tool.changed_lines(repo, tool.last_tag(repo))["pkg/m.py"]
    assert keys(tool.changed_mutants(path, tool.mutants_of(path), lines)) == [
        "Box.fits", "small"]


def test_a_deletion_touches_its_function_and_module_code_only_its_lines(repo, tool):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", '    if value is None:\n        raise ValueError("no value")\n', "")
    edit(repo / "pkg" / "m.py", "LIMIT = 3", "LIMIT = 4")
    path = repo / "pkg" / "m.py"
    lines = tool.changed_lines(repo, "v1.0")["pkg/m.py"]
    chosen = tool.changed_mutants(path, tool.mutants_of(path), lines)
    assert keys(chosen) == ["<module>", "weak"]
    assert sorted(m.change for m in chosen if m.qualname == "<module>") == ["4 -> 3", "4 -> 5"]


def test_a_new_file_is_all_changed(repo, tool):
    git(repo, "tag", "v1.0")
    (repo / "pkg" / "new.py").write_text("def f():\n    return 1\n")
    git(repo, "add", "pkg/new.py")
    git(repo, "commit", "-q", "-m", "new")
    (repo / "pkg" / "untracked.py").write_text("X = 1\n")
    changed = tool.changed_lines(repo, "v1.0")
    assert changed == {"pkg/new.py": None, "pkg/untracked.py": None}


def test_a_survivor_in_the_changed_function_fails_the_run(repo):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", "value + 1", "value + 2")
    done = guard(repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mutation: pkg/m changed since v1.0: 7 of 15 mutants in what the change touched" \
        in done.stdout
    assert "pkg/m: 1/7 killed (14.3%)" in done.stdout  # only `is None` inverted is noticed
    assert "survived pkg/m.py:12  weak: return value + 2 -> return None" in done.stdout
    assert "small" not in done.stdout and "pkg/other" not in done.stdout


def test_a_killed_change_passes(repo):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", "value < LIMIT", "LIMIT > value")
    done = guard(repo, "v1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pkg/m: 2/2 killed (100.0%)" in done.stdout


def test_a_spent_budget_counts_the_mutants_left_apart(repo):
    git(repo, "tag", "v1.0")
    edit(repo / "pkg" / "m.py", "value + 1", "value + 2")
    done = guard(repo, "--budget", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pkg/m: 0/0 killed (100.0%), 7 not run (time budget spent)" in done.stdout


def test_nothing_changed_passes_saying_so(repo):
    git(repo, "tag", "v1.0")
    (repo / "README").write_text("not a listed module\n")
    done = guard(repo)
    assert (done.returncode, done.stdout) == (0, (
        "mutation: no mutant in what changed since v1.0 in the listed modules "
        "(tests/mutation/modules.toml): no mutant run\n"))


def test_no_tag_passes_saying_so(repo):
    done = guard(repo)
    assert (done.returncode, done.stdout) == (0, (
        "mutation: no v* tag reachable from HEAD, nothing to compare with: no mutant run\n"))


def test_a_tag_that_is_no_commit_is_refused(repo):
    git(repo, "tag", "v1.0")
    done = guard(repo, "v9.9")
    assert done.returncode == 2
    assert done.stderr == ("error: v9.9 is not a commit of this repository's history\n"
                           "hint: give a tag that HEAD descends from, e.g. --changed-since v1.0\n")


def test_a_test_run_that_crashes_kills_the_mutant(repo, tool, tmp_path):
    """A mutant that makes a driver library call segfault is noticed, not an error."""
    (repo / "tests" / "test_crash.py").write_text(
        "import os, signal\n\n\ndef test_crash():\n    os.kill(os.getpid(), signal.SIGSEGV)\n")
    worker = tool.Worker(tmp_path / "w", sys.executable)
    assert worker.run_tests(["tests/test_crash.py"], 60)[0] == "killed"
    assert worker.run_tests(["tests/test_m.py"], 60)[0] == "survived"
