"""No import cycles at module level in nvdocker2: a cycle makes what a module sees at import time
depend on which module of the cycle was imported first.

The graph is read with `ast` from each module's top-level imports: those that run when the module
is imported (class bodies and module-level `if`/`try` included), not those inside functions or
under `if TYPE_CHECKING:`. `from X import Y` is an edge to X, or to X.Y where Y is a submodule
(`from nvdocker2.agent import apply` imports that module, not a name of the package's
`__init__`); `import X.Y` is one to X.Y.

A second graph adds the imports inside functions: an import put in a function to get round a
cycle still needs the other module, and only hides the cycle. Those cycles are broken too, but
for the ones listed in CYCLES_LEFT with why they are still there."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nvdocker2"

def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _source(node: ast.ImportFrom, package: str) -> str:
    """The module `from X import ...` names, relative ones resolved against `package`."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _top_level_imports(tree: ast.Module, name: str, is_package: bool,
                       modules: frozenset[str] = frozenset()) -> set[str]:
    """The modules `name` imports when it is imported; `modules`: the submodules to tell apart
    from names in `from X import Y`."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _source(node, package)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    found.add(sub if sub in modules else source)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit([n for n in inner if isinstance(n, ast.stmt)]
                              + [s for h in inner if isinstance(h, ast.ExceptHandler)
                                 for s in h.body])

    visit(tree.body)
    return found


def imports_anywhere(tree: ast.Module, name: str, is_package: bool,
                     modules: frozenset[str]) -> set[str]:
    """The nvdocker2 modules `name` needs, imported at the top or inside a function (such an
    import still needs the other module: it only hides the cycle from the module-level test),
    leaving out what is under `if TYPE_CHECKING:` (never run) and `name`'s own packages
    (importing a module runs its packages first: no cycle)."""
    package = name if is_package else name.rpartition(".")[0]
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _source(node, package)
            subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules]
            # `from pkg import mod` needs the module; `from pkg import name`, the package too
            wanted = subs if len(subs) == len(node.names) else [source, *subs]
        else:
            continue
        for dotted in wanted:
            target = owner(dotted)
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def import_graph(anywhere: bool = False) -> dict[str, set[str]]:
    """module -> the modules it imports at module level (with `anywhere`: also inside
    functions, see `imports_anywhere`)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        imported = (imports_anywhere if anywhere else _top_level_imports)(
            tree, name, is_package, frozenset(modules))
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_imports_in_functions_and_type_checking_blocks_are_not_edges():
    tree = ast.parse(
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from .. import parent_mod\n"
        "if TYPE_CHECKING:\n    from nvdocker2.only_typing import X\n"
        "try:\n    import nvdocker2.tried\nexcept ImportError:\n    import nvdocker2.fallback\n"
        "class C:\n    from nvdocker2.in_class import Y\n"
        "from nvdocker2.pkg import submodule, name\n"
        "def f():\n    import nvdocker2.in_function\n")
    assert _top_level_imports(tree, "nvdocker2.pkg.mod", False,
                              frozenset({"nvdocker2.pkg.submodule"})) == {
        "os", "typing", "nvdocker2.pkg", "nvdocker2", "nvdocker2.tried", "nvdocker2.fallback",
        "nvdocker2.in_class", "nvdocker2.pkg.submodule"}


def test_nvdocker2_has_no_module_level_import_cycle():
    graph = import_graph()
    assert "nvdocker2.host.run" in graph["nvdocker2.engines.docker.cdi"]  # the graph is read
    found = sorted(sorted(c) for c in cycles(graph))
    assert not found, f"import cycles at module level (break each one: move what both sides " \
                      f"need to a module of its own, or pass it in): {found}"


# Cycles through imports inside functions, still to be broken, each with why it is still
# there; the list only shrinks (a cycle that is gone goes from it too).
CYCLES_LEFT = {
    frozenset({"nvdocker2.direct.discover", "nvdocker2.direct.gated", "nvdocker2.direct.graphics",
               "nvdocker2.direct.spec", "nvdocker2.direct.wsl"}):
        "discover picks WSL2's discovery and wsl builds spec's Plan: it goes when the "
        "discovery's records and the Plan leave discover.py and spec.py",
}


def test_no_cycle_hidden_in_a_function_but_the_ones_still_listed():
    found = cycles(import_graph(anywhere=True))
    new = sorted(sorted(c) for c in found - set(CYCLES_LEFT))
    assert not new, "import cycles through imports inside functions (break each one: move " \
                    "what both sides need to a module of its own, or pass it in):\n" + \
                    "\n".join(" -> ".join(c) for c in new)
    gone = sorted(sorted(c) for c in set(CYCLES_LEFT) - found)
    assert not gone, f"cycles no longer there: remove them from CYCLES_LEFT: {gone}"


def test_an_import_inside_a_function_is_an_edge_and_a_type_checking_one_is_not():
    modules = frozenset({"pkg", "pkg.a", "pkg.b", "pkg.c"})
    tree = ast.parse("from . import a\nimport pkg\nTYPE_CHECKING = False\n"
                     "if TYPE_CHECKING:\n    from pkg import c\n"
                     "def f():\n    from pkg.b import thing\n    import os\n")
    assert imports_anywhere(tree, "pkg.c", False, modules) == {"pkg.a", "pkg.b"}
    tree = ast.parse("from pkg import a, name\n")
    assert imports_anywhere(tree, "pkg.b", False, modules) == {"pkg.a"}  # pkg: its own
    assert imports_anywhere(tree, "other", False, modules | {"other"}) == {"pkg", "pkg.a"}
