"""Every library the code imports is declared (pyproject.toml, debian/control, the rpm spec),
with bounds that admit Debian 12's version (tests/venv/oldest.txt); nothing reaches into a
dependency's own dependencies (click comes with typer, and typer >= 0.20 carries its own)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
STDLIB = set(sys.stdlib_module_names) | {"tomllib", "_json"}
DIST = {"typer": "typer", "rich": "rich", "jsonschema": "jsonschema", "filelock": "filelock",
        "packaging": "packaging", "tomli": "tomli", "tomlkit": "tomlkit", "yaml": "PyYAML"}
# Package names where Debian's or Fedora's differ from python3-<distribution>.
DEB = {"PyYAML": "python3-yaml"}
RPM = {"PyYAML": "python3-pyyaml"}


def third_party_imports() -> set[str]:
    found = set()
    for path in (REPO / "nvdocker2").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {n.split(".")[0] for n in names} - STDLIB - {"nvdocker2"}
    return found


def declared() -> dict[str, Requirement]:
    text = (REPO / "pyproject.toml").read_text()
    block = text[text.index("dependencies = [") : text.index("]", text.index("dependencies = ["))]
    return {r.name: r for r in (Requirement(ast.literal_eval(line.strip().rstrip(",")))
                                for line in block.splitlines()[1:] if line.strip())}


def test_every_imported_library_is_declared_everywhere():
    imports = third_party_imports()
    assert "click" not in imports
    deps = declared()
    control = (REPO / "debian" / "control").read_text()
    spec = (REPO / "rpm" / "nvdocker2.spec").read_text()
    for module in imports:
        assert DIST[module] in deps, module
        dist = DIST[module]
        assert DEB.get(dist, f"python3-{dist}") in control, module
        assert RPM.get(dist, f"python3-{dist}") in spec, module


def test_bounds_admit_debian_12_and_have_no_upper_cap():
    pins = {}
    for line in (REPO / "tests" / "venv" / "oldest.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name] = version
    for name, req in declared().items():
        assert req.specifier.contains(pins[name]), f"{req} refuses Debian 12's {pins[name]}"
        assert not any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), req


def test_a_venv_that_cannot_be_built_fails_ci_with_one_line_naming_it():
    r = subprocess.run([str(REPO / "scripts" / "test-venvs.sh")], capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "CI": "true",
                                         "NVDOCKER2_VENV_PYTHON": "/nonexistent/python3"})
    assert r.returncode == 3
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: venv newest could not be built: ")
