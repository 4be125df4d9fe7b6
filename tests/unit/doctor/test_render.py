"""The doctor's renderers and exit code: one list of results, shown as a rich table on a
terminal (colour unless NO_COLOR), plain text when piped, JSON with --json (reference §5)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from nvdocker2.engines.docker.doctor import run_doctor
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.doctor.host import HostRoot
from nvdocker2.doctor.model import Check, CheckResult, fail, ok, run_checks, skip, warn
from nvdocker2.doctor.render import first_to_fix, render, render_json, render_report, summary

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


NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"

# an SGR sequence that sets a foreground colour (30-37, 90-97, or 38;5 / 38;2)
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7])[;m]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_is_a_summary_beside_a_list_of_id_status_detail_hint():
    out = io.StringIO()
    render(RESULTS, out, as_json=True)
    obj = json.loads(out.getvalue())
    assert list(obj) == ["summary", "checks"]
    data = obj["checks"]
    assert data[1] == {
        "id": "dockerd.reachable",
        "status": "fail",
        "detail": "no answer from dockerd",
        "hint": "start it: systemctl start docker",
    }
    assert data[0]["hint"] is None
    assert [set(d) for d in data] == [{"id", "status", "detail", "hint"}] * 4


def test_piped_report_summary_first_then_failures_warnings_skips_and_the_oks_as_ids(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    render(RESULTS, out, as_json=False)
    text = out.getvalue()
    assert text == render_report(RESULTS)
    lines = text.splitlines()
    assert lines[0] == (
        "1 fail, 1 warn, 1 skip, 1 ok (4 checks); fix first: dockerd.reachable: "
        "no answer from dockerd"
    )
    assert [line.split()[:2] for line in lines[2:] if not line.startswith(" ")] == [
        ["fail", "dockerd.reachable"],
        ["warn", "driver.modules"],
        ["skip", "dockerd.sync"],
        ["ok", "1"],
    ]
    assert lines[3].strip() == "hint: start it: systemctl start docker"
    assert lines[-1].split()[3:] == ["config.parse", "(--verbose:", "what", "each", "found)"]
    assert "/etc/docker/daemon.json: valid" not in text
    assert "\x1b[" not in text


def test_verbose_gives_every_check_its_own_line_with_what_it_found():
    text = render_report(RESULTS, verbose=True)
    rows = [line.split()[:2] for line in text.splitlines()[2:] if not line.startswith(" ")]
    assert rows == [["fail", "dockerd.reachable"], ["warn", "driver.modules"],
                    ["skip", "dockerd.sync"], ["ok", "config.parse"]]
    assert "ok    config.parse       /etc/docker/daemon.json: valid" in text


def test_fix_first_is_the_failure_that_blocks_the_most_checks():
    results = [
        CheckResult("a.first", "a", "fail", "first failure", "fix a"),
        CheckResult("b.root", "b", "fail", "the root cause", "fix b"),
        *(CheckResult(f"c.{i}", "c", "skip", "skipped: needs b.root, which failed")
          for i in range(3)),
        CheckResult("d", "d", "skip", "skipped: needs a.first, which failed"),
    ]
    assert first_to_fix(results).id == "b.root"
    assert summary(results).endswith("; fix first: b.root: the root cause")
    report = render_report(results)
    assert "skip  3 checks  need b.root, which failed: c.0 c.1 c.2\n" in report
    assert "skip  d         skipped: needs a.first, which failed\n" in report
    no_fail = [CheckResult("w", "w", "warn", "a warning", "do x"), RESULTS[0]]
    assert summary(no_fail).endswith("; warning: w: a warning")
    assert summary([RESULTS[0]]).endswith("(1 check): nothing to fix")


LONG = CheckResult(
    "driver.libraries", "libraries", "fail",
    "no libnvidia-ml.so.<version> in /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu, "
    "/usr/lib64, /usr/lib, /lib/x86_64-linux-gnu, /lib64 and a-very-long-hyphenated-word",
    "install the driver's user-space libraries (e.g. apt-get install libnvidia-ml1)",
)


def test_wrapped_at_word_boundaries_to_the_width_never_inside_a_path(monkeypatch):
    for width in (60, 80, 120):
        text = render_report([LONG, *RESULTS], width=width)
        for line in text.splitlines():
            assert len(line) <= width or len(line.split()) <= 3, (width, line)
        words = text.split()
        for word in (LONG.detail + " " + LONG.hint).split():
            assert word in words, (width, word)
    monkeypatch.setenv("COLUMNS", "70")
    out = io.StringIO()
    render([LONG], out, as_json=False)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 70
    assert out.getvalue().splitlines()[5:8] == [
        "fail  driver.libraries  no libnvidia-ml.so.<version> in",
        " " * 24 + "/usr/lib/x86_64-linux-gnu,",
        " " * 24 + "/usr/lib/aarch64-linux-gnu, /usr/lib64,",
    ]


def test_terminal_report_is_coloured_unless_no_color(monkeypatch):
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
    assert text == render_report(RESULTS, width=160)


def test_the_real_cli_report_and_json_tell_the_same_checks(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text("{}\n")
    args = [str(NVDOCKER2), "doctor", "--config", str(cfg), "--docker-host",
            f"unix://{tmp_path}/none.sock"]
    env = dict(os.environ, COLUMNS="100")
    env.pop("NO_COLOR", None)
    report = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    verbose = subprocess.run([*args, "--verbose"], capture_output=True, text=True, env=env,
                             timeout=60)
    as_json = subprocess.run([*args, "--json"], capture_output=True, text=True, env=env,
                             timeout=60)
    assert report.returncode == verbose.returncode == as_json.returncode == 1
    obj = json.loads(as_json.stdout)
    results = obj["checks"]
    counts = {s: sum(1 for r in results if r["status"] == s)
              for s in ("fail", "warn", "ok", "skip")}
    # the summary object says what the report's first line says, counted from the list
    assert obj["summary"] == dict(counts, total=len(results), first_to_fix="dockerd.reachable")
    first = report.stdout.splitlines()[0]
    assert first.startswith(f"{counts['fail']} fail, {counts['warn']} warn, {counts['skip']} "
                            f"skip, {counts['ok']} ok ({len(results)} checks)")
    assert "fix first: dockerd.reachable: " in first
    # longer than the width only where one unbreakable word follows the status and id
    too_long = [line for line in report.stdout.splitlines()
                if len(line) > 100 and len(line.split()) > 3]
    assert too_long == []
    body = report.stdout.split("\n\n", 1)[1].splitlines()
    statuses = [line[:4].strip() for line in body if line[:1] != " "]
    assert statuses == sorted(statuses, key=["fail", "warn", "skip", "ok"].index)
    assert len(report.stdout.splitlines()) < len(verbose.stdout.splitlines())
    for r in results:
        assert r["id"] in report.stdout.split() or r["status"] == "skip"
        if r["status"] == "ok":
            assert r["detail"].split()[0] in verbose.stdout


def _constant(outcome):
    return lambda ctx: outcome


def _checks(*outcomes):
    return [Check(f"c{i}", f"check {i}", _constant(o)) for i, o in enumerate(outcomes)]


def test_exit_code_is_1_only_when_something_failed(tmp_path, monkeypatch):
    from nvdocker2.engines.docker import doctor as docker_doctor

    for outcomes, code in (
        ((ok("a"), warn("b", "h"), skip("c")), 0),
        ((ok("a"), fail("b", "h")), 1),
    ):
        monkeypatch.setattr(docker_doctor, "all_checks",
                            lambda smoke=False, o=outcomes: _checks(*o))
        out = io.StringIO()
        assert run_doctor(as_json=True, stream=out, ctx=Context(root=HostRoot(tmp_path))) == code
        obj = json.loads(out.getvalue())
        assert len(obj["checks"]) == len(outcomes) == obj["summary"]["total"]
        assert obj["summary"]["fail"] == code


def test_dependency_failure_skips_and_names_it(tmp_path):
    checks = _checks(fail("down", "start it"))
    checks.append(Check("c9", "needs c0", lambda ctx: ok("ran"), needs=("c0",)))
    results = run_checks(Context(root=HostRoot(tmp_path)), checks)
    assert results[1].status == "skip"
    assert results[1].detail == "skipped: needs c0, which failed"


def test_json_render_roundtrip_keeps_non_ascii():
    r = [CheckResult("x", "x", "ok", "café → ok")]
    assert json.loads(render_json(r))["checks"][0]["detail"] == "café → ok"
