#!/usr/bin/env python3
"""Mutation testing of the modules that decide what root does or what a container gets.

For each module listed in tests/mutation/modules.toml this makes single changes to its source
(one mutant at a time: a comparison or boolean operator swapped, `not` removed, a constant moved
by one, True/False flipped, a string emptied, a returned value replaced by None, a statement of a
guard or a call deleted), writes the mutant INTO a private copy of the repository and runs the
module's selected tests there (fail fast, a timeout per mutant). Tests that start the hook or the
runtime as real processes import the copy's package too, whatever environment they hand the
child: the mutant is in the files, not in a switch.

`--changed-since [TAG]` is the quick guard of the test command: only the listed modules whose
file changed since TAG (default: the newest `v*` tag reachable from HEAD), committed or not,
and in each only the functions the change touched (the whole module when it touched lines
outside any function), within a time budget (`--budget`, seconds): a module gets its share of
what is left, and the mutants it had no time for are counted apart (the rest are a fixed
shuffle, so a run cut short still samples the whole change).
With no such tag or no listed module changed it says so and passes.

Output: one line per module, `MODULE: KILLED/TOTAL killed (SCORE%)`, then each surviving mutant
as `file:line  the change`. Mutants listed as equivalent in the configuration are counted apart
and not part of TOTAL. Exit status 0 when every module reaches its `min_score`, 1 when one does
not, 2 for a configuration or set-up error (a module's tests failing unmutated included).

    python3 scripts/mutation.py [--list] [--jobs N] [--functions F,...] [MODULE_NAME_OR_PATH ...]
    python3 scripts/mutation.py --changed-since [TAG] [--budget SECONDS]
    make mutation [MUTATION_MODULES="device_ids hook/request"] [MUTATION_JOBS=N]
    make mutation-changed [MUTATION_SINCE=v0.3.0]
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "tests" / "mutation" / "modules.toml"
CHANGED_BUDGET = 540.0  # seconds: the guard in scripts/test.sh stays within 10 minutes

_CMP_SWAP = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
    ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclass
class Mutant:
    path: str          # relative to the repository
    line: int
    key: str           # stable across line moves: "function: old -> new"
    change: str        # shown to people: "old -> new"
    source: str = field(repr=False)
    qualname: str = ""  # the function it is in ("<module>" outside any)


def _snippet(node: ast.AST, limit: int = 70) -> str:
    text = ast.unparse(node).replace("\n", "; ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Sites(ast.NodeVisitor):
    """Collects (node, replacement-node-or-source, description) for one module's source."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line))
        self.sites: list[tuple[ast.AST, str, str, str]] = []  # node, new text, qualname, change
        self.scope: list[str] = []
        self.skip_lines: set[int] = {
            n + 1 for n, line in enumerate(self.lines) if "pragma: no mutate" in line}

    # --- helpers -------------------------------------------------------------------------
    def _add(self, node: ast.AST, new: ast.AST | str, change: str | None = None) -> None:
        if node.lineno in self.skip_lines:
            return
        text = new if isinstance(new, str) else ast.unparse(new)
        if change is None:
            change = f"{_snippet(node)} -> {text if isinstance(new, str) else _snippet(new)}"
        self.sites.append((node, text, ".".join(self.scope) or "<module>", change))

    def _replaced(self, node: ast.AST, **fields) -> ast.AST:
        clone = copy.copy(node)
        for name, value in fields.items():
            setattr(clone, name, value)
        return clone

    # --- scopes and what is never mutated ------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scope.append(node.name)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        self._body(node.body)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self._body(node.body)
        self.scope.pop()

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)

    def _body(self, body: list[ast.stmt]) -> None:
        for index, stmt in enumerate(body):
            if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # docstring
            self.visit(stmt)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return

    def visit_Import(self, node: ast.Import) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_arguments(self, node: ast.arguments) -> None:
        return

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.visit(node.test)
        for block in (node.body, node.orelse):
            for stmt in block:
                self._delete(stmt)
            self._body_noskip(block)

    def _body_noskip(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.visit(stmt)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # f-strings are texts; their inner positions are unreliable before 3.12

    def visit_Assign(self, node: ast.Assign) -> None:
        # `TYPE_CHECKING = False` and `__all__` lists are not behaviour.
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if names in (["TYPE_CHECKING"], ["__all__"]):
            return
        self.visit(node.value)
        for target in node.targets:
            if not isinstance(target, ast.Name):
                self.visit(target)

    # --- statements ----------------------------------------------------------------------
    def _delete(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.Pass, ast.FunctionDef, ast.ClassDef)):
            return
        first = _snippet(stmt, 60).split(";")[0]
        self._add(stmt, "pass", f"deleted: {first}")

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            self._delete(node)
        self.visit(node.value)

    def visit_Raise(self, node: ast.Raise) -> None:
        self._delete(node)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            self._add(node, "return None", f"return {_snippet(value, 50)} -> return None")
        if value is not None:
            self.visit(value)

    def visit_Continue(self, node: ast.Continue) -> None:
        self._add(node, "pass", "deleted: continue")

    def visit_Break(self, node: ast.Break) -> None:
        self._add(node, "pass", "deleted: break")

    # --- expressions ---------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        for index, op in enumerate(node.ops):
            swap = _CMP_SWAP.get(type(op))
            if swap is not None:
                ops = list(node.ops)
                ops[index] = swap()
                self._add(node, self._replaced(node, ops=ops))
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self._add(node, self._replaced(node, op=other))
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self._add(node, ast.unparse(node.operand).join("()"),
                      f"{_snippet(node)} -> {_snippet(node.operand)}")
        elif isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return  # -1 is a constant; moving it by one is the same as for 1
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swaps = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv}
        swap = swaps.get(type(node.op))
        if swap is not None and not _is_text(node):
            self._add(node, self._replaced(node, op=swap()))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool):
            self._add(node, repr(not value))
        elif isinstance(value, int):
            self._add(node, repr(value + 1))
            if value != 0:
                self._add(node, repr(value - 1))
        elif isinstance(value, str):
            self._add(node, repr("") if value else repr("XX"))


def _is_text(node: ast.BinOp) -> bool:
    return any(isinstance(side, (ast.Constant, ast.JoinedStr)) and
               isinstance(getattr(side, "value", ""), str) for side in (node.left, node.right))


def _within(qualname: str, functions: list[str]) -> bool:
    return any(qualname == f or qualname.startswith(f + ".") for f in functions)


def mutants_of(path: Path, functions: list[str] | None = None,
               only: list[str] | None = None) -> list[Mutant]:
    """Every single mutant of `path`; only those inside `functions` (qualified names, a nested
    function belongs to its parent) when given, and inside `only` too when that is given."""
    source = path.read_text()
    tree = ast.parse(source)
    sites = _Sites(source)
    sites.visit(tree)
    rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    done: set[tuple[int, int, str]] = set()
    for node, text, qualname, change in sites.sites:
        if functions and not _within(qualname, functions):
            continue
        if only is not None and not _within(qualname, only):
            continue
        start = sites.offsets[node.lineno - 1] + _col(sites.lines[node.lineno - 1], node.col_offset)
        end = sites.offsets[node.end_lineno - 1] + _col(sites.lines[node.end_lineno - 1],
                                                        node.end_col_offset)
        if isinstance(node, ast.expr) and "\n" in source[start:end]:
            text = text.join("()")  # a multi-line expression may rely on its brackets
        if (start, end, text) in done:
            continue  # a raise inside an if: deleted once, not twice
        done.add((start, end, text))
        new = source[:start] + text + source[end:]
        try:
            compile(new, rel, "exec")
        except SyntaxError:
            continue
        key = f"{qualname}: {change}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key += f" #{seen[key]}"
        out.append(Mutant(rel, node.lineno, key, change, new, qualname))
    return out


def _col(line: str, byte_col: int) -> int:
    """ast columns count UTF-8 bytes; the source string counts characters."""
    return len(line.encode()[:byte_col].decode(errors="ignore"))

# --- what changed since a release tag -------------------------------------------------------

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "core.quotePath=false", *args], cwd=repo,
                          capture_output=True, text=True)


def last_tag(repo: Path) -> str | None:
    """The newest `v*` tag reachable from HEAD; None without one (or without a repository)."""
    done = _git(repo, "describe", "--tags", "--abbrev=0", "--match", "v*")
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def changed_lines(repo: Path, tag: str) -> dict[str, set[int] | None]:
    """The files changed between where HEAD's history left `tag` and the working tree (committed
    or not), each with the lines of its current text that the change touched: None for a file
    that is new (all of it). ValueError when `tag` names no commit."""
    base = _git(repo, "merge-base", tag, "HEAD")
    if base.returncode != 0:
        raise ValueError(f"{tag} is not a commit of this repository's history")
    diff = _git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-renames",
                base.stdout.strip(), "--")
    if diff.returncode != 0:
        raise ValueError(f"git diff against {tag} failed: {diff.stderr.strip()}")
    out: dict[str, set[int] | None] = {}
    current: str | None = None
    new_file = False
    for line in diff.stdout.splitlines():
        if line.startswith("diff --git "):
            current, new_file = None, False
        elif line.startswith("--- "):
            new_file = line == "--- /dev/null"
        elif line.startswith("+++ "):
            current = line[len("+++ b/"):] if line.startswith("+++ b/") else None
            if current is not None:
                out[current] = None if new_file else set()
        elif current is not None and (hunk := _HUNK.match(line)):
            lines = out[current]
            if lines is None:
                continue
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            # A deletion touches the lines on both sides of where the text was.
            lines.update(range(start, start + count) if count else (max(start, 1), start + 1))
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard")
    for name in untracked.stdout.splitlines():
        out[name] = None
    return out


def _defs(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of each outermost function, methods included
    (the classes around them give their names); decorators belong to their function."""
    spans: list[tuple[int, int, str]] = []

    def walk(body: list[ast.stmt], scope: list[str]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, scope + [node.name])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                spans.append((first, node.end_lineno or node.lineno,
                              ".".join(scope + [node.name])))
    walk(tree.body, [])  # type: ignore[attr-defined]
    return spans


def changed_mutants(path: Path, mutants: list[Mutant], lines: set[int] | None) -> list[Mutant]:
    """The mutants a change touching `lines` of `path` is answerable for: every mutant of each
    function with a touched line (all of its body: a change may leave its other lines
    untested), and those outside any function on a touched line. All of them for None."""
    if lines is None:
        return list(mutants)
    spans = _defs(ast.parse(path.read_text()))
    touched = [name for first, last, name in spans if any(first <= n <= last for n in lines)]

    def in_def(line: int) -> bool:
        return any(first <= line <= last for first, last, _ in spans)
    return [m for m in mutants if (_within(m.qualname, touched) if in_def(m.line)
                                   else m.line in lines)]


# --- running ---------------------------------------------------------------------------------

def copy_tree(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    for name in files:
        if not name:
            continue
        src = REPO / os.fsdecode(name)
        if not src.is_file() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


class Worker:
    """One private copy of the repository in which mutants are written and tested."""

    def __init__(self, root: Path, python: str) -> None:
        self.root = root
        self.python = python
        copy_tree(root)

    def _drop_bytecode(self, rel: str) -> None:
        path = self.root / rel
        for pyc in (path.parent / "__pycache__").glob(path.stem + ".*.pyc"):
            pyc.unlink()

    def run_tests(self, tests: list[str], timeout: float) -> tuple[str, float]:
        env = dict(os.environ, PYTHONPATH=str(self.root), PYTHONDONTWRITEBYTECODE="1",
                   NVDOCKER2_MUTATION="1")
        env.pop("PYTEST_ADDOPTS", None)
        argv = [self.python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                "-p", "no:randomly", "--no-header", "--tb=no", "-o", "addopts=", *tests]
        started = time.monotonic()
        # Its own session, so a timeout ends the processes the tests started too.
        proc = subprocess.Popen(argv, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output = proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "timeout", time.monotonic() - started
        elapsed = time.monotonic() - started
        if proc.returncode == 0:
            return "survived", elapsed
        if proc.returncode in (1, 3):  # tests failed / internal error (an import broke)
            return "killed", elapsed
        if proc.returncode in (2, 4) and any(
                sign in output for sign in (b"while loading conftest", b"during collection")):
            # The mutant broke an import the tests make before any test runs (a conftest, a
            # test module): nothing the module serves could be used, so the tests noticed.
            return "killed", elapsed
        if proc.returncode < 0:  # the test run crashed (a segfault in a driver library call)
            return "killed", elapsed
        return f"error rc={proc.returncode}: {output.decode(errors='replace')[-300:]}", elapsed

    def try_mutant(self, mutant: Mutant, tests: list[str], timeout: float) -> str:
        path = self.root / mutant.path
        original = path.read_bytes()
        try:
            path.write_text(mutant.source)
            self._drop_bytecode(mutant.path)
            verdict = self.run_tests(tests, timeout)[0]
            if sys.stderr.isatty():
                print("." if verdict in ("killed", "timeout") else "S", end="", file=sys.stderr,
                      flush=True)
            return verdict
        finally:
            path.write_bytes(original)
            self._drop_bytecode(mutant.path)


def load_config() -> dict:
    with open(CONFIG, "rb") as f:
        return tomllib.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="module names or paths (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--jobs", "-j", type=int,
                        default=int(os.environ.get("MUTATION_JOBS") or os.cpu_count() or 1),
                        help="mutants tested at once, each in its own copy (default: the CPUs)")
    parser.add_argument("--python", default=None, help="the interpreter that runs pytest")
    parser.add_argument("--functions", default=None, metavar="F,...",
                        help="mutate only inside these functions (qualified names, commas)")
    parser.add_argument("--changed-since", nargs="?", const="", default=None, metavar="TAG",
                        help="only the listed modules changed since TAG, committed or not, and "
                             "in them the functions the change touched (default TAG: the newest "
                             "v* tag reachable from HEAD)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="stop starting mutants after this long; those left are counted "
                             f"apart (default: {CHANGED_BUDGET:.0f} with --changed-since, "
                             "none otherwise)")
    args = parser.parse_args(argv)

    config = load_config()
    python = args.python or str(REPO / ".venv" / "bin" / "python")
    if not Path(python).exists():
        python = sys.executable
    modules = config["module"]
    if args.modules:
        modules = [m for m in modules if m["name"] in args.modules or m["path"] in args.modules]
        if not modules:
            print(f"error: no module named {' '.join(args.modules)} in {CONFIG.relative_to(REPO)}",
                  file=sys.stderr)
            print("hint: --list shows the modules and their mutants", file=sys.stderr)
            return 2
    for module in modules:
        for key in ("path", "tests"):
            if key == "path" and not (REPO / module[key]).is_file():
                print(f"error: {module['name']}: {module[key]} does not exist", file=sys.stderr)
                print(f"hint: update its path in {CONFIG.relative_to(REPO)}", file=sys.stderr)
                return 2
        for test in module["tests"]:
            if not (REPO / test.split("::")[0]).exists():
                print(f"error: {module['name']}: test {test} does not exist", file=sys.stderr)
                print(f"hint: update its tests in {CONFIG.relative_to(REPO)}", file=sys.stderr)
                return 2

    only = [f for f in args.functions.split(",") if f] if args.functions else None
    plan = [(m, mutants_of(REPO / m["path"], m.get("functions"), only)) for m in modules]
    budget = args.budget
    if args.changed_since is not None:
        budget = CHANGED_BUDGET if budget is None else budget
        selected = changed_plan(plan, args.changed_since)
        if isinstance(selected, int):
            return selected
        plan = selected

    if args.list:
        for _, mutants in plan:
            for mutant in mutants:
                print(f"{mutant.path}:{mutant.line}  {mutant.key}")
        return 0

    # A SIGTERM ends the run like ^C: the copies are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    status = 0
    report: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nvdocker2-mutation.") as tmp:
        # Readable by other users, as a checkout is: some tests run the copy as `nobody`.
        os.chmod(tmp, 0o755)
        workers = [Worker(Path(tmp) / f"w{n}", python) for n in range(max(1, args.jobs))]
        left = sum(len(mutants) for _, mutants in plan)
        for module, mutants in plan:
            deadline = None
            if budget is not None:
                # Each module gets its share of the time left, by its number of mutants.
                now = time.monotonic()
                share = max(0.0, started + budget - now) * len(mutants) / max(left, 1)
                deadline = now + share
                left -= len(mutants)
            line, failed = run_module(module, workers, mutants, deadline)
            report.append(line)
            print(line, flush=True)
            status = max(status, failed)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"# {time.monotonic() - started:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} s CPU"
          " in the tests", flush=True)
    return status


def changed_plan(plan: list[tuple[dict, list[Mutant]]], since: str
                 ) -> list[tuple[dict, list[Mutant]]] | int:
    """The part of `plan` a change since the tag `since` ("": the newest v* tag) is answerable
    for; an exit status when there is nothing to run (0) or the tag is unusable (2)."""
    tag = since or last_tag(REPO)
    if tag is None:
        print("mutation: no v* tag reachable from HEAD, nothing to compare with: no mutant run")
        return 0
    try:
        changed = changed_lines(REPO, tag)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        print("hint: give a tag that HEAD descends from, e.g. --changed-since "
              f"{last_tag(REPO) or 'v0.3.0'}", file=sys.stderr)
        return 2
    out = []
    for module, mutants in plan:
        if module["path"] in changed:
            chosen = changed_mutants(REPO / module["path"], mutants, changed[module["path"]])
            print(f"mutation: {module['name']} changed since {tag}: {len(chosen)} of "
                  f"{len(mutants)} mutants in what the change touched", flush=True)
            if chosen:
                # A fixed shuffle, so a run cut short by its budget still samples all of them.
                random.Random(module["name"]).shuffle(chosen)
                out.append((module, chosen))
    if not out:
        print(f"mutation: no mutant in what changed since {tag} in the listed modules "
              f"({CONFIG.relative_to(REPO)}): no mutant run")
        return 0
    return out


def run_module(module: dict, workers: list[Worker], mutants: list[Mutant],
               deadline: float | None = None) -> tuple[str, int]:
    name, tests = module["name"], module["tests"]
    equivalent = {e["key"]: e["reason"] for e in module.get("equivalent", [])}
    verdict, baseline = workers[0].run_tests(tests, timeout=600)
    if verdict != "survived":
        return f"{name}: error: its tests fail without a mutant ({verdict})", 2
    timeout = max(20.0, 4 * baseline)
    counted = [m for m in mutants if m.key not in equivalent]
    every = mutants_of(REPO / module["path"], module.get("functions"))
    stale = set(equivalent) - {m.key for m in every}

    def job(index_mutant):
        index, mutant = index_mutant
        limit = timeout
        if deadline is not None:
            limit = min(timeout, deadline - time.monotonic())
            if limit <= 0:
                return mutant, "not run"
        verdict = workers[index % len(workers)].try_mutant(mutant, tests, limit)
        if verdict == "timeout" and limit < timeout:
            verdict = "not run"  # cut by the budget, not by the mutant
        return mutant, verdict

    # Each worker takes every len(workers)-th mutant, so no two share a copy at once.
    results: list[tuple[Mutant, str]] = []
    with ThreadPoolExecutor(len(workers)) as pool:
        lanes = [[(i, m) for i, m in enumerate(counted) if i % len(workers) == w]
                 for w in range(len(workers))]
        for lane_results in pool.map(lambda lane: [job(x) for x in lane], lanes):
            results.extend(lane_results)
    results.sort(key=lambda r: r[0].line)
    killed = sum(1 for _, v in results if v in ("killed", "timeout"))
    not_run = sum(1 for _, v in results if v == "not run")
    total = len(results) - not_run
    score = 100.0 * killed / total if total else 100.0
    lines = [f"{name}: {killed}/{total} killed ({score:.1f}%)"
             + (f", {len(equivalent) - len(stale)} equivalent excluded" if equivalent else "")
             + (f", {not_run} not run (time budget spent)" if not_run else "")]
    for mutant, verdict in results:
        if verdict == "survived":
            lines.append(f"  survived {mutant.path}:{mutant.line}  {mutant.key}")
        elif verdict not in ("killed", "timeout", "not run"):
            lines.append(f"  {verdict} {mutant.path}:{mutant.line}  {mutant.key}")
    for key in sorted(stale):
        lines.append(f"  stale equivalent entry (no such mutant now): {key}")
    failed = 0 if score >= float(module.get("min_score", 95)) else 1
    return "\n".join(lines), failed


if __name__ == "__main__":
    sys.exit(main())
