"""Malformed and hostile daemon.json files through the real CLI: exit 2 (or 3), the file
byte-identical, one error line naming the problem (with line:column where there is one) and
one hint line, no traceback, no temp file, no backup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..cli_run import cli

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
RT = "/usr/bin/nvidia-container-runtime"

# (id, bytes, fragment of the error line)
HOSTILE = [
    ("trailing-comma-object", b'{\n  "debug": true,\n}\n', "line 2, column 16: trailing comma"),
    ("trailing-comma-array", b'{"dns": ["1.1.1.1",]}', "line 1, column 19: trailing comma"),
    (
        "line-comment",
        b'{\n  // GPU hosts\n  "debug": true\n}',
        "line 2, column 3: comments are not allowed",
    ),
    ("block-comment", b'{"debug": /* on */ true}', "line 1, column 11: comments are not allowed"),
    ("hash-comment", b"# managed by hand\n{}", "line 1, column 1: comments are not allowed"),
    ("nan", b'{"mtu": NaN}', "line 1, column 9: NaN is not a valid JSON value"),
    ("infinity", b'{"mtu": Infinity}', "Infinity is not a valid JSON value"),
    ("minus-infinity", b'{"mtu": -Infinity}', "-Infinity is not a valid JSON value"),
    ("truncated-array", b'{"dns": ["1.1.1.1"', "truncated"),
    ("truncated-string", b'{"data-root": "/var/lib/do', "truncated"),
    ("truncated-after-key", b'{"debug"', "truncated"),
    ("single-quotes", b"{'debug': true}", "line 1, column 2: strings must use double quotes"),
    ("unquoted-key", b"{debug: true}", "property name debug is not in double quotes"),
    ("missing-colon", b'{"debug" true}', "line 1, column 10: unexpected word 'true', expected ':'"),
    ("missing-comma", b'{"debug": true\n "mtu": 1}', "line 2, column 2: missing comma"),
    (
        "trailing-data",
        b'{"debug": true}\n{"mtu": 1}\n',
        "line 2, column 1: unexpected '{' after the end",
    ),
    ("leading-zero", b'{"mtu": 01500}', "malformed number"),
    ("control-char", b'{"data-root": "/a\tb"}', "control character inside a string"),
    ("bad-escape", b'{"data-root": "C:\\docker"}', "invalid escape sequence"),
    (
        "invalid-utf8",
        b'{"labels": ["\xc3\x28"]}',
        "line 1, column 14: invalid UTF-8 at byte offset 13",
    ),
    ("utf16-bom", '{"debug": true}'.encode("utf-16"), "invalid UTF-8 at byte offset 0"),
    ("nul-padding", b'{"debug": true}\n' + b"\x00" * 64, "NUL bytes after the end"),
    ("bom-and-trailing-comma", b'\xef\xbb\xbf{"debug": true,}', "trailing comma"),
    ("top-level-array", b'[{"runtimes": {}}]', "line 1, column 1: the top level is an array"),
    ("top-level-string", b'"runtimes"', "the top level is a string"),
    ("top-level-null", b"null", "the top level is null"),
    ("runtimes-array", b'{"runtimes": ["nvidia"]}', '"runtimes" is an array, not an object'),
    ("runtimes-string", b'{"runtimes": "nvidia"}', '"runtimes" is a string, not an object'),
    (
        "runtime-entry-string",
        b'{"runtimes": {"nvidia": "/usr/bin/x"}}',
        '"runtimes" entry "nvidia" is a string',
    ),
    ("other-entry-array", b'{"runtimes": {"kata": ["/k"]}}', '"runtimes" entry "kata" is an array'),
    (
        "default-runtime-number",
        b'{"default-runtime": 1}',
        '"default-runtime" is a number, not a string',
    ),
    (
        "default-runtime-null",
        b'{"default-runtime": null}',
        '"default-runtime" is null, not a string',
    ),
    ("wrong-type-known-key", b'{"mtu": "1500"}', 'mtu: "1500" is not of type integer'),
    (
        "wrong-type-nested",
        b'{"log-opts": {"max-size": 10}}',
        "log-opts.max-size: 10 is not of type string",
    ),
    (
        "other-runtime-bad-path",
        b'{"runtimes": {"kata": {"path": 5}}}',
        "runtimes.kata.path: 5 is not of type string",
    ),
    ("float-for-int", b'{"shutdown-timeout": 1.5}', "shutdown-timeout: 1.5 is not of type integer"),
    (
        "int-over-int64",
        b'{"max-concurrent-downloads": 12345678901234567890}',
        "max-concurrent-downloads: 12345678901234567890 is greater than the maximum",
    ),
    (
        "deep-nesting",
        b'{"a": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        "nesting deeper than 1000 levels",
    ),
]


def etc(tmp_path: Path) -> Path:
    d = tmp_path / "etc"
    d.mkdir(exist_ok=True)
    return d



def assert_two_lines(stderr: str) -> None:
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("warning: ")]
    assert len(lines) == 2, stderr
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert "Traceback" not in stderr


@pytest.mark.parametrize("raw, fragment", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_file_is_refused_and_left_byte_identical(tmp_path, raw, fragment):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.write_bytes(raw)
    code, out, err = cli(
        "install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
        "--reload", "none", "--no-verify"
    )
    assert code == 2, err
    assert cfg.read_bytes() == raw
    assert fragment in err, err
    assert f"error: {cfg}" in err
    assert_two_lines(err)
    assert os.listdir(cfg.parent) == ["daemon.json"]
    assert not (tmp_path / "state" / "backups").exists()


@pytest.mark.parametrize(
    "raw, fragment", [h[1:] for h in HOSTILE[:32:3]], ids=[h[0] for h in HOSTILE[:32:3]]
)
def test_hostile_file_is_refused_by_uninstall_too(tmp_path, raw, fragment):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.write_bytes(raw)
    code, out, err = cli("uninstall", "--config", str(cfg), "--reload", "none")
    assert code == 2 and cfg.read_bytes() == raw
    assert_two_lines(err)


def test_17_mib_file_is_refused(tmp_path):
    cfg = etc(tmp_path) / "daemon.json"
    raw = b'{"labels": ["' + b"x" * (17 * 1024 * 1024) + b'"]}'
    cfg.write_bytes(raw)
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--reload", "none")
    assert code == 2 and "over the 16 MiB limit" in err
    assert cfg.read_bytes() == raw


def test_directory_in_place_of_the_file(tmp_path):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.mkdir()
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--reload", "none")
    assert code == 2 and "is a directory" in err and cfg.is_dir()
    assert_two_lines(err)


def test_dangling_symlink(tmp_path):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.symlink_to(cfg.parent / "gone.json")
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--reload", "none")
    assert code == 2 and "which does not exist" in err
    assert cfg.is_symlink() and not (cfg.parent / "gone.json").exists()


def test_symlink_loop(tmp_path):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.symlink_to(cfg.parent / "b.json")
    (cfg.parent / "b.json").symlink_to(cfg)
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--reload", "none")
    assert code == 2 and "symlink loop" in err


def test_fifo_in_place_of_the_file(tmp_path):
    cfg = etc(tmp_path) / "daemon.json"
    os.mkfifo(cfg)
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--reload", "none")
    assert code == 2 and "not a regular file" in err


def test_parent_is_a_file(tmp_path):
    (tmp_path / "docker").write_bytes(b"")
    code, _, err = cli(
        "install",
        "--config",
        str(tmp_path / "docker" / "daemon.json"),
        "--runtime-path",
        RT, "--allow-missing-runtime",
        "--reload",
        "none",
    )
    assert code == 2 and "not a directory" in err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--runtime-path", "nvidia-container-runtime"], "is not absolute"),
        (["--runtime-name", "runc"], "reserved"),
        (["--runtime-name", "io.containerd.runc.v2"], "reserved"),
        (["--reload", "sometimes"], "Invalid value for '--reload'"),
        (["--reload", "signal", "--restart"], "--restart: --reload signal"),
        (["--reload", "none", "--restart"], "--restart: --reload none"),
        (["--timeout", "-1"], "Invalid value for '--timeout'"),
        (["--set-default", "--runtime-name", ""], "empty"),
    ],
)
def test_bad_flags_exit_2_and_touch_nothing(tmp_path, args, fragment):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.write_bytes(b"{}")
    code, _, err = cli(
        "install",
        "--config",
        str(cfg),
        *(["--runtime-path", RT, "--allow-missing-runtime"]
          if "--runtime-path" not in args else []),
        *args,
    )
    assert code == 2, err
    assert fragment in err
    assert cfg.read_bytes() == b"{}"
    assert os.listdir(cfg.parent) == ["daemon.json"]


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b'{"debug": true,}', "line 1, column 15: trailing comma"),
        (b'{"a": "\xff"}', "invalid UTF-8"),
    ],
)
def test_real_console_script_reports_without_traceback(tmp_path, raw, fragment):
    cfg = etc(tmp_path) / "daemon.json"
    cfg.write_bytes(raw)
    for cmd in (["install", "--runtime-path", RT, "--allow-missing-runtime"], ["uninstall"],
                ["status"]):
        r = subprocess.run(
            [str(NVDOCKER2), cmd[0], "--config", str(cfg), *cmd[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert fragment in (r.stderr + r.stdout)
        assert "Traceback" not in r.stderr
    assert cfg.read_bytes() == raw


def test_json_mode_error_is_one_object_on_stdout(tmp_path):
    import json

    cfg = etc(tmp_path) / "daemon.json"
    cfg.write_bytes(b'{"debug": true,}')
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", "--json")
    assert code == 2
    obj = json.loads(out)
    assert obj["changed"] is False and obj["exit_code"] == 2 and "trailing comma" in obj["error"]
    assert "error: " in err
