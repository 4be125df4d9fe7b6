"""No module of nvdocker2 uses another module's private names: what a module calls `_name` is
its own to change, so a change there breaks no other module. Read with `ast` from every module:

- `from X import _name` (or `from . import _name`) of an nvdocker2 module X;
- `mod._name` where `mod` is an nvdocker2 module imported into the module;
- `obj._name` on anything but `self`/`cls`, where `_name` is defined only in other modules of
  nvdocker2 (a method, a class attribute or an attribute set on `self`) — such as another
  module's engine reached into for `eng._own(...)`.

Dunder names are public. Modules owned elsewhere while issue 40 is worked on are listed in
ALLOWED, each entry naming the file and the name; the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nvdocker2"

# (file, name) pairs still to be made public by their owners (issue 40): remove as they go.
ALLOWED = {
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, class and module attributes,
    attributes it sets on anything, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # setattr(obj, "_name", ...), __slots__ and the like
    return {n for n in names if _private(n)}


def _module_of(node: ast.expr, imported: dict[str, str]) -> str | None:
    """The module `node` names (`mod` or `pkg.mod`, through what the module imported)."""
    if isinstance(node, ast.Name):
        return imported.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _module_of(node.value, imported)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(source: str, name: str, is_package: bool, modules: frozenset[str],
                 elsewhere: frozenset[str]) -> list[tuple[int, str]]:
    """(line, private name) for each use in module `name` of another module's private name;
    `elsewhere`: the private names other modules of nvdocker2 define."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    own = _defined(tree)
    imported: dict[str, str] = {}  # local name -> the nvdocker2 module it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    bound = alias.asname or alias.name.split(".")[0]
                    imported[bound] = alias.name if alias.asname else bound
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source_module = ".".join(base + ([node.module] if node.module else []))
            else:
                source_module = node.module or ""
            if source_module not in modules:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, alias.name))
                if f"{source_module}.{alias.name}" in modules:
                    imported[alias.asname or alias.name] = f"{source_module}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        receiver = node.value
        if _module_of(receiver, imported) in modules:
            found.append((node.lineno, node.attr))
        elif not (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")) \
                and node.attr not in own and node.attr in elsewhere:
            found.append((node.lineno, node.attr))
    return sorted(set(found))


def violations() -> list[str]:
    modules = _modules()
    trees = {name: path.read_text(encoding="utf-8") for name, path in modules.items()}
    defined = {name: _defined(ast.parse(text)) for name, text in trees.items()}
    out = []
    for name, path in modules.items():
        elsewhere = frozenset().union(*(d for m, d in defined.items() if m != name))
        rel = str(path.relative_to(PACKAGE.parent))
        for line, private in private_uses(trees[name], name, path.name == "__init__.py",
                                          frozenset(modules), elsewhere):
            if (rel, private) not in ALLOWED:
                out.append(f"{rel}:{line}: {private}")
    return out


MODULES = frozenset({"pkg", "pkg.a", "pkg.b"})


def test_a_private_name_imported_from_another_module_is_found():
    src = "from pkg.a import _helper, public\nfrom . import _x\n"
    assert private_uses(src, "pkg.b", False, MODULES, frozenset()) == [(1, "_helper"),
                                                                      (2, "_x")]


def test_a_private_attribute_of_an_imported_module_is_found():
    src = "import pkg.a\nfrom pkg import a as A\nA._f()\npkg.a._g\nA.__name__\n"
    assert private_uses(src, "pkg.b", False, MODULES, frozenset()) == [(3, "_f"), (4, "_g")]


def test_reaching_into_another_modules_object_is_found_and_its_own_are_not():
    src = ("class C:\n    def _mine(self):\n        return self._theirs()\n"
           "def f(eng, c):\n    eng._own()\n    c._mine()\n    eng._nowhere\n")
    assert private_uses(src, "pkg.b", False, MODULES, frozenset({"_own", "_theirs"})) == [
        (5, "_own")]


def test_no_module_uses_another_modules_private_names():
    found = violations()
    assert not found, ("private names used across modules (make them public where they are "
                       "defined, or keep the use inside that module):\n" + "\n".join(found))


def test_every_allowed_use_is_still_there():
    """An entry whose use is gone goes too."""
    modules = _modules()
    for rel, private in sorted(ALLOWED):
        text = (PACKAGE.parent / rel).read_text(encoding="utf-8")
        assert private in text, f"{rel}: {private} is no longer used: remove it from ALLOWED"
    assert all((PACKAGE.parent / rel).exists() for rel, _ in ALLOWED) and modules


def _imported_modules(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every module an import statement anywhere in the module names (functions included)."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.add(source)
            out.update(f"{source}.{alias.name}" for alias in node.names)
    return out


ENGINES = ("docker", "containerd", "crio")


def test_an_engine_imports_no_other_engine_and_the_store_no_engine():
    """What engines share lives outside their folders (engines/systemd.py, engines/peer.py,
    engines/tomlread.py, store/): one engine changes without another noticing."""
    found = []
    for name, path in _modules().items():
        parts = name.split(".")
        if parts[:2] == ["nvdocker2", "engines"] and len(parts) > 2 and parts[2] in ENGINES:
            others = [e for e in ENGINES if e != parts[2]]
        elif parts[:2] == ["nvdocker2", "store"]:
            others = list(ENGINES)
        else:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module in _imported_modules(tree, name, path.name == "__init__.py"):
            if any(module.split(".")[:3] == ["nvdocker2", "engines", o] for o in others):
                found.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert not found, "\n".join(sorted(found))
