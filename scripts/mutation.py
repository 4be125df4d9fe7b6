#!/usr/bin/env python3
"""Mutation testing of the modules that decide what root does or what a container gets.

For each module listed in tests/mutation/modules.toml this makes single changes to its source
(one mutant at a time: a comparison or boolean operator swapped, `not` removed, a constant moved
by one, True/False flipped, a string emptied, a returned value replaced by None, a statement of a
guard or a call deleted), writes the mutant INTO a private copy of the repository and runs the
module's selected tests there (fail fast, a timeout per mutant). Tests that start the hook or the
runtime as real processes import the copy's package too, whatever environment they hand the
child: the mutant is in the files, not in a switch.

Output: one line per module, `MODULE: KILLED/TOTAL killed (SCORE%)`, then each surviving mutant
as `file:line  the change`. Mutants listed as equivalent in the configuration are counted apart
and not part of TOTAL. Exit status 0 when every module reaches its `min_score`, 1 when one does
not, 2 for a configuration or set-up error (a module's tests failing unmutated included).

    python3 scripts/mutation.py [--list] [--jobs N] [MODULE_NAME_OR_PATH ...]
    make mutation [MUTATION_MODULES="device_ids hook/request"] [MUTATION_JOBS=N]
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
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


def mutants_of(path: Path, functions: list[str] | None = None) -> list[Mutant]:
    """Every single mutant of `path`; only those inside `functions` (qualified names, a nested
    function belongs to its parent) when given."""
    source = path.read_text()
    tree = ast.parse(source)
    sites = _Sites(source)
    sites.visit(tree)
    rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    done: set[tuple[int, int, str]] = set()
    for node, text, qualname, change in sites.sites:
        if functions and not any(qualname == f or qualname.startswith(f + ".")
                                 for f in functions):
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
        out.append(Mutant(rel, node.lineno, key, change, new))
    return out


def _col(line: str, byte_col: int) -> int:
    """ast columns count UTF-8 bytes; the source string counts characters."""
    return len(line.encode()[:byte_col].decode(errors="ignore"))


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

    if args.list:
        for module in modules:
            for mutant in mutants_of(REPO / module["path"], module.get("functions")):
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
        for module in modules:
            line, failed = run_module(module, workers)
            report.append(line)
            print(line, flush=True)
            status = max(status, failed)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"# {time.monotonic() - started:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} s CPU"
          " in the tests", flush=True)
    return status


def run_module(module: dict, workers: list[Worker]) -> tuple[str, int]:
    name, tests = module["name"], module["tests"]
    equivalent = {e["key"]: e["reason"] for e in module.get("equivalent", [])}
    verdict, baseline = workers[0].run_tests(tests, timeout=600)
    if verdict != "survived":
        return f"{name}: error: its tests fail without a mutant ({verdict})", 2
    timeout = max(20.0, 4 * baseline)
    mutants = mutants_of(REPO / module["path"], module.get("functions"))
    counted = [m for m in mutants if m.key not in equivalent]
    stale = set(equivalent) - {m.key for m in mutants}

    def job(index_mutant):
        index, mutant = index_mutant
        return mutant, workers[index % len(workers)].try_mutant(mutant, tests, timeout)

    # Each worker takes every len(workers)-th mutant, so no two share a copy at once.
    results: list[tuple[Mutant, str]] = []
    with ThreadPoolExecutor(len(workers)) as pool:
        lanes = [[(i, m) for i, m in enumerate(counted) if i % len(workers) == w]
                 for w in range(len(workers))]
        for lane_results in pool.map(lambda lane: [job(x) for x in lane], lanes):
            results.extend(lane_results)
    results.sort(key=lambda r: r[0].line)
    killed = sum(1 for _, v in results if v in ("killed", "timeout"))
    total = len(results)
    score = 100.0 * killed / total if total else 100.0
    lines = [f"{name}: {killed}/{total} killed ({score:.1f}%)"
             + (f", {len(equivalent) - len(stale)} equivalent excluded" if equivalent else "")]
    for mutant, verdict in results:
        if verdict == "survived":
            lines.append(f"  survived {mutant.path}:{mutant.line}  {mutant.key}")
        elif verdict not in ("killed", "timeout"):
            lines.append(f"  {verdict} {mutant.path}:{mutant.line}  {mutant.key}")
    for key in sorted(stale):
        lines.append(f"  stale equivalent entry (no such mutant now): {key}")
    failed = 0 if score >= float(module.get("min_score", 95)) else 1
    return "\n".join(lines), failed


if __name__ == "__main__":
    sys.exit(main())
