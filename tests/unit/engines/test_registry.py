"""A new engine is one package and one `registry.register()` call: an engine of its own line
format (`name=path`, the transaction test's LinesEngine) and its own fake service, written
into a temporary package, registered, and driven through the real CLI — install, status,
backups, rollback, uninstall — with no module of the CLI changed. Its option shows in
`--help`, and is refused (exit 2, naming the engine) with another engine."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
from ..cli_run import cli
from . import test_protocol

from nvdocker2.engines import registry

OPTIONS = '''
from pathlib import Path
from nvdocker2.engines.front import CliOption

OPTIONS = [CliOption("lines_state", ("--lines-state",), ("install", "uninstall", "rollback"),
                     "Where linesd keeps the lines it runs.", rank=185, kind=Path,
                     metavar="PATH")]
'''

FRONT = '''
"""linesd: a config of name=path lines; the daemon "runs" what it copied at its last apply."""
from pathlib import Path

from {PROTOCOL} import LinesEngine

from nvdocker2.changes import ABSENT, Change
from nvdocker2.engines.base import FileEdit, Plan, Service, VerifyFailed
from nvdocker2.engines.commands import TransactionFront


class Linesd(Service):
    strategy = "signal"
    verifies = True

    def __init__(self, config, state):
        self.config, self.state = Path(config), Path(state)

    def apply(self):
        data = self.config.read_bytes() if self.config.exists() else b""
        self.state.write_bytes(data)

    def verify(self, expect, timeout):  # a rollback expects nothing in particular
        if expect is not None and self.state.read_bytes() != expect:
            raise VerifyFailed("linesd runs other lines")
        return None


class Engine(LinesEngine):
    def _lines(self, read):
        old = read(self.config)
        return old, dict(line.split("=", 1) for line in (old or b"").decode().splitlines())

    def _plan(self, old, lines, changes, reason, journal):
        new = "".join(f"{k}={v}\\n" for k, v in lines.items()).encode()
        return Plan((FileEdit(self.config, old, new),), tuple(changes), reason, journal,
                    expect=new, expect_old=old)

    def plan_install(self, read, req, journal):
        old, lines = self._lines(read)
        before = lines.get(req.runtime_name, ABSENT)
        lines[req.runtime_name] = req.runtime_path
        change = Change(f"lines.{req.runtime_name}", "added", before, req.runtime_path)
        record = {"config": str(self.config),
                  "runtimes": {req.runtime_name: {"installed": req.runtime_path}}}
        return self._plan(old, lines, [change] if before != req.runtime_path else [],
                          f"install runtime {req.runtime_name} (lines)", record)

    def plan_uninstall(self, read, req, journal):
        old, lines = self._lines(read)
        gone = lines.pop(req.runtime_name, ABSENT)
        changes = [Change(f"lines.{req.runtime_name}", "removed", gone)] if gone != ABSENT \\
            else []
        return self._plan(old, lines, changes, f"uninstall runtime {req.runtime_name} (lines)", {})


class Front(TransactionFront):
    name = "lines"

    def __init__(self):
        self.state = None

    def run(self, action, opts, reporter):
        self.state = opts["lines_state"]
        return super().run(action, opts, reporter)

    def engine(self, config):
        self._config = config
        return Engine(config)

    def service(self, reload, verify, unit, address):
        return Linesd(self._config, self.state), []

    def says(self, eng, runtime_name):
        return {"runtimes": self._lines_of(eng)}

    @staticmethod
    def _lines_of(eng):
        return Engine._lines(eng, lambda p: p.read_bytes() if p.exists() else None)[1]


def make():
    return Front()
'''


@pytest.fixture
def lines_engine(tmp_path, monkeypatch):
    """The package `linesengine` in tmp_path, registered as engine "lines"."""
    pkg = tmp_path / "pkgs" / "linesengine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""An engine of name=path lines."""\n')
    (pkg / "options.py").write_text(textwrap.dedent(OPTIONS))
    (pkg / "front.py").write_text(
        textwrap.dedent(FRONT).replace("{PROTOCOL}", test_protocol.__name__))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    options = importlib.import_module("linesengine.options")
    front = importlib.import_module("linesengine.front")
    registry.register("lines", options.OPTIONS, front.make)
    yield tmp_path
    registry.unregister("lines")
    for name in ("linesengine", "linesengine.options", "linesengine.front"):
        sys.modules.pop(name, None)


def test_a_registered_engine_runs_every_command_through_the_cli(lines_engine):
    cfg, linesd = lines_engine / "lines.conf", lines_engine / "linesd.state"
    cfg.write_bytes(b"runc=/usr/bin/runc\n")
    changing = ["--engine", "lines", "--config", str(cfg), "--lines-state", str(linesd)]

    code, out, err = cli("install", *changing, "--runtime-path", "/opt/rt",
                         "--allow-missing-runtime", "--reload", "signal")
    assert code == 0, err
    assert cfg.read_bytes() == linesd.read_bytes() == b"runc=/usr/bin/runc\nnvidia=/opt/rt\n"
    assert 'added lines.nvidia: "/opt/rt"' in out.splitlines()
    assert "verified: yes, lines reports the change" in out.splitlines()

    code, out, err = cli("status", "--engine", "lines", "--config", str(cfg), "--json")
    assert code == 0, err
    st = json.loads(out)
    assert st["engine"] == "lines" and st["config"] == str(cfg)
    assert st["runtimes"] == {"runc": "/usr/bin/runc", "nvidia": "/opt/rt"}
    assert st["journal"]["runtimes"] == {"nvidia": {"installed": "/opt/rt"}}

    code, out, err = cli("backups", "--engine", "lines", "--config", str(cfg), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["engine"] == "lines" and listed["files"] == [str(cfg)]
    assert [b["reason"].split(" [")[0] for b in listed["backups"]] == \
        ["install runtime nvidia (lines)"]

    code, out, err = cli("rollback", *changing)
    assert code == 0, err
    assert cfg.read_bytes() == linesd.read_bytes() == b"runc=/usr/bin/runc\n"
    assert f"restored {cfg} from backup {listed['backups'][0]['id']}" in out.splitlines()

    assert cli("install", *changing, "--runtime-path", "/opt/rt", "--allow-missing-runtime")[0] == 0
    code, out, err = cli("uninstall", *changing)
    assert code == 0, err
    assert cfg.read_bytes() == linesd.read_bytes() == b"runc=/usr/bin/runc\n"
    assert "removed lines.nvidia" in out.splitlines()


def test_its_option_is_in_help_and_refused_with_another_engine(lines_engine):
    code, out, _ = cli("install", "--help")
    text = " ".join(out.split())
    assert code == 0
    assert "--lines-state PATH Where linesd keeps the lines it runs." in text
    assert ("Container engine to configure: docker, containerd, crio or lines "
            "[default: docker].") in text

    code, out, err = cli("install", "--engine", "docker", "--lines-state", "/x", "--dry-run")
    assert code == 2 and out == ""
    assert err.splitlines() == ["error: --lines-state applies to --engine lines only",
                                "hint: leave it out with --engine docker"]


def test_an_engine_no_longer_registered_is_a_usage_error():
    code, out, err = cli("status", "--engine", "lines")
    assert code == 2 and out == ""
    assert err.splitlines()[0].startswith("error: Invalid value for '--engine'")
    code, out, _ = cli("install", "--help")
    assert "--lines-state" not in out


def test_the_cli_names_no_engine_and_imports_none():
    """The command line reaches engines only through the registry and `engines.front`."""
    import ast
    from pathlib import Path

    import nvdocker2.cli

    allowed = {"nvdocker2.engines", "nvdocker2.engines.registry", "nvdocker2.engines.front"}
    for path in sorted(Path(nvdocker2.cli.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("nvdocker2.engines"):
                assert node.module in allowed, f"{path.name} imports {node.module}"
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value in registry.BUILTIN
                    for c in node.comparators):
                raise AssertionError(f"{path.name}:{node.lineno} compares with an engine name")


@pytest.mark.parametrize("name", ["docker", "containerd", "crio"])
def test_an_engines_options_import_neither_its_format_nor_its_service(name):
    """The registry imports `options.py` as any module (its package's `__init__.py` first) on
    every start of nvdocker2: that must bring in the options and nothing of the engine."""
    import subprocess

    code = (f"import sys, nvdocker2.engines.{name}.options as o; assert o.OPTIONS; "
            "print('\\n'.join(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    package = f"nvdocker2.engines.{name}"
    assert {m for m in loaded if m.startswith(package + ".")} == {package + ".options"}
    assert not loaded & {"tomlkit", "tomllib", "tomli", "json", "nvdocker2.engines.base",
                         "nvdocker2.engines.transaction", "nvdocker2.store.journal"}
