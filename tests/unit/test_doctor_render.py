"""The doctor's renderers and exit code: one list of results, shown as a rich table on a
terminal (colour unless NO_COLOR), plain text when piped, JSON with --json (SPEC §5)."""

from __future__ import annotations

import io
import json
import re

from nvdocker2.doctor import run_doctor
from nvdocker2.doctor.context import Context
from nvdocker2.doctor.host import HostRoot
from nvdocker2.doctor.registry import Check, CheckResult, fail, ok, run_checks, skip, warn
from nvdocker2.doctor.render import render, render_json, render_plain

RESULTS = [
    CheckResult("config.parse", "daemon.json parses", "ok", "/etc/docker/daemon.json: valid"),
    CheckResult(
        "dockerd.reachable",
        "dockerd answers",
        "fail",
        "no answer from dockerd",
        "start it: systemctl start docker",
    ),
    CheckResult("dockerd.sync", "agree", "skip", "skipped: needs dockerd.reachable, which failed"),
    CheckResult(
        "driver.modules", "modules", "warn", "nvidia_modeset not loaded", "modprobe nvidia_modeset"
    ),
]


# an SGR sequence that sets a foreground colour (30-37, 90-97, or 38;5 / 38;2)
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])[;m]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_is_a_list_of_id_status_detail_hint():
    out = io.StringIO()
    render(RESULTS, out, as_json=True)
    data = json.loads(out.getvalue())
    assert data[1] == {
        "id": "dockerd.reachable",
        "status": "fail",
        "detail": "no answer from dockerd",
        "hint": "start it: systemctl start docker",
    }
    assert data[0]["hint"] is None
    assert [set(d) for d in data] == [{"id", "status", "detail", "hint"}] * 4


def test_plain_text_when_piped_has_one_line_per_check_and_hints():
    out = io.StringIO()
    render(RESULTS, out, as_json=False)
    text = out.getvalue()
    assert text == render_plain(RESULTS)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["ok", "config.parse"]
    assert lines[1].split()[:2] == ["fail", "dockerd.reachable"]
    assert lines[2].strip() == "hint: start it: systemctl start docker"
    assert lines[-1] == "1 ok, 1 warn, 1 fail, 1 skip"
    assert "\x1b[" not in text


def test_table_on_a_terminal_is_coloured_unless_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "160")
    out = Terminal()
    render(RESULTS, out, as_json=False)
    assert COLOUR.search(out.getvalue())
    assert "dockerd.reachable" in out.getvalue() and "systemctl start docker" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    render(RESULTS, out, as_json=False)
    text = out.getvalue()
    assert not COLOUR.search(text)
    assert "check" in text.splitlines()[1] and "fix" in text.splitlines()[1]
    assert "1 ok, 1 warn, 1 fail, 1 skip" in text


def _constant(outcome):
    return lambda ctx: outcome


def _checks(*outcomes):
    return [Check(f"c{i}", f"check {i}", _constant(o)) for i, o in enumerate(outcomes)]


def test_exit_code_is_1_only_when_something_failed(tmp_path, monkeypatch):
    from nvdocker2.doctor import registry

    for outcomes, code in (
        ((ok("a"), warn("b", "h"), skip("c")), 0),
        ((ok("a"), fail("b", "h")), 1),
    ):
        monkeypatch.setattr(registry, "all_checks", lambda smoke=False, o=outcomes: _checks(*o))
        out = io.StringIO()
        assert run_doctor(as_json=True, stream=out, ctx=Context(root=HostRoot(tmp_path))) == code
        assert len(json.loads(out.getvalue())) == len(outcomes)


def test_dependency_failure_skips_and_names_it(tmp_path):
    checks = _checks(fail("down", "start it"))
    checks.append(Check("c9", "needs c0", lambda ctx: ok("ran"), needs=("c0",)))
    results = run_checks(Context(root=HostRoot(tmp_path)), checks)
    assert results[1].status == "skip"
    assert results[1].detail == "skipped: needs c0, which failed"


def test_json_render_roundtrip_keeps_non_ascii():
    r = [CheckResult("x", "x", "ok", "café → ok")]
    assert json.loads(render_json(r))[0]["detail"] == "café → ok"
