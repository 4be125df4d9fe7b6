"""The one doctor model (nvdocker2/doctor/model.py): checks of one type with their dependencies,
run in dependency order, a check whose dependency failed reported as skipped with why; the
report a user reads; containerd's and CRI-O's checks through it; and the generic doctor
importing no engine."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from ..cli_run import cli, engine_env

from nvdocker2.doctor import CheckPlan, report
from nvdocker2.doctor.model import Check, Facts, fail, ok, run_checks, run_order, skip, warn
from nvdocker2.doctor.render import render_report

DOCTOR = Path(__file__).resolve().parents[3] / "nvdocker2" / "doctor"


class Seen(Facts):
    """Facts that remember which checks read them, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []


def _check(id, outcome, needs=(), blocked_by=()):
    def func(facts):
        facts.ran.append(id)
        return outcome

    return Check(id, f"title of {id}", func, tuple(needs), blocked_by=tuple(blocked_by))


def test_a_check_runs_after_what_it_needs_and_the_report_keeps_the_list_order(capsys):
    facts = Seen()
    checks = [
        _check("app.start", ok("started"), needs=("daemon.up",)),
        _check("app.logs", ok("quiet"), needs=("app.start",)),
        _check("daemon.up", ok("pid 7")),
    ]
    assert report(CheckPlan(facts, checks), as_json=True) == 0
    assert facts.ran == ["daemon.up", "app.start", "app.logs"]
    out = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in out["checks"]] == ["app.start", "app.logs", "daemon.up"]
    assert out["summary"] == {"fail": 0, "warn": 0, "skip": 0, "ok": 3, "total": 3,
                              "first_to_fix": None}


def test_a_failed_dependency_skips_its_dependents_transitively_in_the_report(capsys):
    facts = Seen()
    checks = [
        _check("app.start", ok("started"), needs=("daemon.up",)),
        _check("app.logs", ok("quiet"), needs=("app.start",)),
        _check("daemon.up", fail("no daemon on /run/d.sock", "systemctl start d")),
        _check("disk", warn("90% full", "free some space")),
    ]
    assert report(CheckPlan(facts, checks), verbose=True) == 1
    assert facts.ran == ["daemon.up", "disk"]  # the skipped ones never ran
    assert capsys.readouterr().out == (
        "1 fail, 1 warn, 2 skip, 0 ok (4 checks); fix first: daemon.up: no daemon on "
        "/run/d.sock\n"
        "\n"
        "fail  daemon.up  no daemon on /run/d.sock\n"
        "                 hint: systemctl start d\n"
        "warn  disk       90% full\n"
        "                 hint: free some space\n"
        "skip  app.start  skipped: needs daemon.up, which failed\n"
        "skip  app.logs   skipped: needs app.start, which was skipped\n"
    )


def test_without_verbose_the_skips_one_failure_caused_are_one_row():
    checks = [_check("root", fail("gone", "bring it back")),
              _check("a", ok("x"), needs=("root",)), _check("b", ok("y"), needs=("root",))]
    text = render_report(run_checks(Seen(), checks))
    assert "skip  2 checks  need root, which failed: a b\n" in text


def test_blocked_by_skips_on_a_failure_only_not_on_a_skip():
    checks = [
        _check("gpu", skip("no GPU here")),
        _check("mode", fail("broken", "fix it")),
        _check("after-skip", ok("ran"), blocked_by=("gpu",)),
        _check("after-fail", ok("ran"), blocked_by=("mode",)),
    ]
    results = {r.id: (r.status, r.detail) for r in run_checks(Seen(), checks)}
    assert results["after-skip"] == ("ok", "ran")
    assert results["after-fail"] == ("skip", "skipped: needs mode, which failed")


@pytest.mark.parametrize("checks, message", [
    ([_check("a", ok("x"), needs=("b",)), _check("b", ok("y"), needs=("a",))],
     "checks depend on each other in a cycle: a, b"),
    ([_check("a", ok("x"), needs=("nowhere",))],
     "check a depends on nowhere, which is not in the list"),
    ([_check("a", ok("x")), _check("a", ok("y"))], "check a is listed twice"),
])
def test_a_bad_list_is_a_bug_said_before_any_check_runs(checks, message):
    facts = Seen()
    with pytest.raises(ValueError) as exc:
        run_checks(facts, checks)
    assert str(exc.value) == message and facts.ran == []


def test_docker_checks_are_in_an_order_the_runner_accepts():
    from nvdocker2.engines.docker.doctor import all_checks

    every = all_checks(smoke=True)
    assert [c.id for c in run_order(every)] == [c.id for c in every]


def test_a_fact_is_computed_once_and_its_exception_kept():
    calls = []

    def compute():
        calls.append(1)
        raise OSError("unreadable")

    facts = Seen()
    for _ in range(2):
        with pytest.raises(OSError):
            facts.fact("x", compute)
    assert calls == [1]


# -- containerd and CRI-O through the same model ---------------------------------------------


def _doctor(*args):
    code, out, err = cli("doctor", *args, "--verbose")
    assert err == ""
    return code, {line.split()[1]: line for line in out.splitlines()[2:] if line[:4] in
                  ("fail", "warn", "skip", "ok  ")}


def test_containerd_config_that_does_not_parse_skips_what_reads_it(tmp_path, monkeypatch):
    cfg = engine_env(tmp_path, monkeypatch, b"version = 2\n[plugins\n")
    code, rows = _doctor("--engine", "containerd", "--config", str(cfg))
    assert code == 1
    assert rows["containerd-config"].startswith("fail  containerd-config")
    assert rows["containerd-binary"].startswith("fail  containerd-binary")  # PATH is empty
    for dependent in ("containerd-shadow", "containerd-runtime"):
        assert rows[dependent].split(None, 2)[2] == \
            "skipped: needs containerd-config, which failed"
    assert rows["containerd-effective"].split(None, 2)[2] == \
        "skipped: needs containerd-binary, which failed"
    assert rows["containerd-running"].startswith("warn  containerd-running")


def test_containerd_runtime_and_shadow_run_on_a_config_that_parses(tmp_path, monkeypatch):
    cfg = engine_env(tmp_path, monkeypatch, b'version = 2\n')
    code, rows = _doctor("--engine", "containerd", "--config", str(cfg))
    assert code == 1
    assert rows["containerd-config"].startswith("ok    containerd-config")
    assert rows["containerd-shadow"].startswith("ok    containerd-shadow")
    assert rows["containerd-runtime"].split(None, 2)[2] == \
        'no runtime "nvidia" in the CRI plugin\'s runtimes'


def test_crio_checks_are_of_the_shared_type_and_depend_on_nothing(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    drop = tmp_path / "99-nvidia.conf"
    code, out, err = cli("doctor", "--engine", "crio", "--config", str(drop), "--json")
    assert code == 1 and err == ""
    checks = {c["id"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert checks == {
        "crio-dropin": ("fail", f"{drop} does not exist"),
        "crio-running": ("warn", "no crio on PATH that is safe to run (owned by root, in "
                                 "directories no other user can write)"),
    }


# -- the generic doctor knows no engine ------------------------------------------------------


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_generic_doctor_imports_no_engine():
    files = sorted(DOCTOR.glob("*.py"))
    assert len(files) > 5
    found = {f.name: [n for n in _imports(f) if n == "nvdocker2.engines"
                      or n.startswith("nvdocker2.engines.")] for f in files}
    assert {name: bad for name, bad in found.items() if bad} == {}


def test_the_import_scan_sees_an_engine_import_inside_a_function(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from nvdocker2.engines.docker import cdi\n"
                 "    import nvdocker2.engines.crio\n")
    assert _imports(f) == ["nvdocker2.engines.docker", "nvdocker2.engines.docker.cdi",
                           "nvdocker2.engines.crio"]


def test_dockerd_and_its_address_are_defined_once_under_the_docker_service():
    package = DOCTOR.parent
    where = sorted(
        (str(f.relative_to(package)), node.name)
        for f in package.rglob("*.py")
        for node in ast.walk(ast.parse(f.read_text(), str(f)))
        if isinstance(node, ast.ClassDef) and node.name in ("DockerHost", "DockerdProcess")
    )
    assert where == [("engines/docker/service/api.py", "DockerHost"),
                     ("engines/docker/service/process.py", "DockerdProcess")]
