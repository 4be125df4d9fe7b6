"""reference §8: text from argv or files that goes into an error line has its control characters
escaped, so every `error:` and `hint:` is exactly one line, in every program we ship."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2 import runtime, wrapper
from nvdocker2.oneline import one_line

BIN = Path(sys.executable).parent
HOSTILE = "x\ny\r\x1b[2Kz\u2028w\x85v"


def test_one_line_escapes_every_line_break_and_terminal_control():
    out = one_line(HOSTILE + "\t\x00\x7f")
    assert out == "x\\ny\\r\\x1b[2Kz\\u2028w\\x85v\\t\\x00\\x7f"
    assert out.splitlines() == [out] and out.isprintable()
    assert one_line("Zürich 山田 ok") == "Zürich 山田 ok"  # printable text is left alone


def test_runtime_create_with_a_newline_bundle_prints_one_error_line(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = runtime.main(["create", "--bundle", "\n", "create"], self_path=str(tmp_path / "x"))
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("nvidia-container-runtime: error: ")
    assert "\\n" in err


def test_cli_error_naming_a_hostile_path_is_one_line(tmp_path):
    bad = tmp_path / f"no{HOSTILE}dir" / "deeper" / "daemon.json"
    r = subprocess.run([str(BIN / "nvdocker2"), "install", "--config", str(bad), "--reload",
                        "none", "--no-verify"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["error", "hint"], r.stderr
    assert "no x\\ny\\r\\x1b[2Kz" not in lines[0] and "x\\ny\\r\\x1b[2Kz\\u2028w" in lines[0]


def test_hook_error_naming_a_hostile_bundle_is_one_line(tmp_path):
    state = '{"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": "%s"}' % (
        str(tmp_path / "b").replace("\\", "\\\\") + "\\n\\u001b[31mevil")
    r = subprocess.run([str(BIN / "nvidia-container-runtime-hook"), "prestart"], input=state,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("nvidia-container-runtime-hook: error: ") and "\\x1b[31m" in r.stderr


def test_wrapper_error_is_one_line_whatever_the_command_error_holds():
    def fail(path, argv):
        raise PermissionError(13, "Permission\ndenied")

    err = io.StringIO()
    code = wrapper.main(["ps"], {"NV_DOCKER": "/x"}, fail, io.StringIO(), err)
    assert code == wrapper.EXIT_NOT_EXECUTABLE
    assert len(err.getvalue().splitlines()) == 2  # error: and hint:, nothing more
    assert "Permission\\ndenied" in err.getvalue()


@pytest.mark.parametrize("message", [HOSTILE, "a\u2029b"])
def test_doctor_plain_text_keeps_one_line_per_check(message):
    from nvdocker2.doctor.model import CheckResult
    from nvdocker2.doctor.render import render_report

    out = render_report([CheckResult("x.y", "X", "fail", message, "hint " + message)])
    # The summary (which quotes the failure), a blank line, the check, its hint.
    assert len(out.splitlines()) == 4, out
