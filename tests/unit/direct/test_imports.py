"""Direct mode runs inside `create` on every container start: standard library only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import nvdocker2

ROOT = str(Path(nvdocker2.__file__).resolve().parent.parent)
RUNTIME_SIDE = ["nvdocker2.direct", "nvdocker2.direct.discover", "nvdocker2.direct.spec",
                "nvdocker2.direct.hook", "nvdocker2.direct.cdi", "nvdocker2.direct.ldcache",
                "nvdocker2.direct.rootfs",
                "nvdocker2.direct.errors", "nvdocker2.direct.create", "nvdocker2.toolkit_config",
                "nvdocker2.toolkit_schema",
                "nvdocker2.oneline", "nvdocker2.direct.confine",
                "nvdocker2.direct.cdi_versions", "nvdocker2.direct.gated",
                # the doors to the host, stdlib-only
                "nvdocker2.host", "nvdocker2.host.files", "nvdocker2.host.run"]


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


def test_the_hook_role_starts_without_json_re_subprocess_typing_or_discovery(tmp_path):
    """The createContainer hook runs on every GPU container start: what it imports is what it
    costs. It reads JSON with the C scanner, forks ldconfig itself, and loads ctypes only in
    the child that confines ldconfig."""
    import json

    from fixtures.fake_driver import make_bundle

    bundle, _rootfs, _spec = make_bundle(tmp_path)
    code = (f"import sys; sys.path.append({ROOT!r}); from nvdocker2.runtime import main; "
            "rc = main(['direct-hook', 'update-ldcache', '--ldconfig', '/bin/true'], 'x'); "
            "print(rc); print('\\n'.join(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                          text=True, timeout=60, input=json.dumps({"bundle": str(bundle)}))
    rc, *loaded = proc.stdout.split()
    assert rc == "0", proc.stderr
    heavy = {"json", "re", "subprocess", "typing", "dataclasses", "ctypes",
             "nvdocker2.direct.discover", "nvdocker2.direct.spec", "nvdocker2.direct.ldcache"}
    assert heavy & set(loaded) == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="confining ldconfig needs root")
def test_the_confined_ldconfig_child_binds_libc_without_the_ctypes_package(tmp_path):
    """The child that confines ldconfig runs on every GPU container start too: it binds the
    libc calls through ctypes' C half, and still ends with CAP_SYS_CHROOT alone under
    no_new_privs."""
    code = (f"import os, sys; sys.path.append({ROOT!r})\n"
            "from nvdocker2.direct.confine import drop_privileges, private_view\n"
            f"private_view({str(tmp_path)!r}, set())\n"
            "drop_privileges()\n"
            "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
            "print(status['CapEff'].strip(), status['CapBnd'].strip(),"
            " status['NoNewPrivs'].strip(), 'ctypes' in sys.modules)")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0000000000040000", "0000000000040000", "1", "False"]


def test_direct_create_path_imports_no_dataclasses_typing_or_re():
    """Direct mode's `create` imports discovery, the plan and the ld cache reader on every GPU
    container start: dataclasses (with inspect, ast, dis and tokenize), typing and re would
    cost it about 20 ms of CPU, twice the interpreter's own start."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({ROOT!r}); import nvdocker2.runtime, "
         "nvdocker2.runtime.spec, nvdocker2.direct.create, nvdocker2.direct.discover, "
         "nvdocker2.direct.spec, nvdocker2.direct.ldcache; print('\\n'.join(sys.modules))"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert {"nvdocker2.direct.discover", "nvdocker2.direct.spec"} <= loaded
    assert loaded & {"dataclasses", "inspect", "typing", "re"} == set()
