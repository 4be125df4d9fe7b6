"""Direct mode runs inside `create` on every container start: standard library only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)
RUNTIME_SIDE = ["nvdocker2.direct", "nvdocker2.direct.discover", "nvdocker2.direct.spec",
                "nvdocker2.direct.hook", "nvdocker2.direct.cdi", "nvdocker2.direct.ldcache",
                "nvdocker2.direct.rootfs", "nvdocker2.direct.toml_edit",
                "nvdocker2.direct.errors", "nvdocker2.direct.create", "nvdocker2.toolkit_config",
                "nvdocker2.oneline"]


def test_direct_mode_imports_only_the_standard_library():
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({ROOT!r}); import " + ", ".join(RUNTIME_SIDE)
         + "; print('\\n'.join(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    for banned in ("typer", "rich", "jsonschema", "filelock", "click", "packaging", "yaml",
                   "nvdocker2.cli", "nvdocker2.errors", "nvdocker2.engines.docker.daemonjson",
                   "nvdocker2.direct.commands"):
        assert banned not in loaded
    if sys.version_info >= (3, 10):
        ours = {m for m in loaded if m.startswith("nvdocker2")}
        assert ours == {"nvdocker2", *RUNTIME_SIDE}
        foreign = {m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names
                   and not m.startswith(("_", "nvdocker2"))}
        assert foreign == set()
