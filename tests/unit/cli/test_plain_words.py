"""Help and usage errors in the project's own words on every typer nvdocker2 supports (Debian
12's 0.7 to the newest): no library internals (enum reprs, pydantic's wording), the hint names
the command the user typed, and an empty path is a usage error, not the working directory."""

from __future__ import annotations

import os

import pytest
from ..cli_run import cli

LIBRARY_WORDS = ("EngineName.", "Value error", "Input should be", "(auto)", "x>=0")


@pytest.mark.parametrize("command", ["install", "uninstall", "rollback", "backups", "status",
                                     "doctor", "cdi refresh"])
def test_help_shows_plain_defaults(command):
    code, out, err = cli(*command.split(), "--help")
    assert code == 0, err
    for word in LIBRARY_WORDS:
        assert word not in out, (word, out)
    flat = " ".join(out.split())
    if command != "cdi refresh":
        assert "--engine docker|containerd|crio" in flat
        assert "containerd or crio [default: docker]." in flat
    if command in ("install", "uninstall", "rollback"):
        assert "(restart), none. [default: auto]" in flat
        assert "the change. [default: 30.0]" in flat


@pytest.mark.parametrize(
    "args, line",
    [
        (["install", "--engine", "bogus"],
         "error: Invalid value for '--engine': 'bogus' is not one of 'docker', 'containerd', "
         "'crio'."),
        (["install", "--reload", "bogus"],
         "error: Invalid value for '--reload': 'bogus' is not one of 'auto', 'systemd', 'sysv', "
         "'signal', 'none'."),
        (["uninstall", "--timeout", "-1"], "error: Invalid value for '--timeout': -1 is below 0"),
        (["install", "--timeout", "soon"],
         "error: Invalid value for '--timeout': 'soon' is not a valid float."),
        (["rollback", "--timeout=later"],
         "error: Invalid value for '--timeout': 'later' is not a valid float."),
        (["cdi", "refresh", "--timeout", "-0.5"],
         "error: Invalid value for '--timeout': -0.5 is below 0"),
    ],
)
def test_bad_values_are_worded_the_same_on_every_typer(args, line, tmp_path):
    code, out, err = cli(*args, "--config", str(tmp_path / "daemon.json"))
    assert code == 2 and out == ""
    command = " ".join(a for a in args if not a.startswith("-") and a[:1] not in "-0123456789"
                       and a not in ("bogus", "soon"))
    assert err.splitlines() == [line, f"hint: see 'nvdocker2 {command} --help' for its options"]
    assert not (tmp_path / "daemon.json").exists()


@pytest.mark.parametrize("args", [["install", "--config"], ["uninstall", "--pidfile"],
                                  ["cdi", "generate", "--output"], ["status", "--docker-host"]])
def test_a_missing_value_hints_the_commands_own_help(args):
    code, out, err = cli(*args)
    assert code == 2
    assert err.splitlines() == [f"error: Option '{args[-1]}' requires an argument.",
                                f"hint: see 'nvdocker2 {' '.join(args[:-1])} --help' for its "
                                "options"]


@pytest.mark.parametrize(
    "args",
    [
        ["install", "--config", ""],
        ["install", "--config="],
        ["uninstall", "--engine", "containerd", "--config", ""],
        ["rollback", "--config", ""],
        ["install", "--config", "x.json", "--pidfile", ""],
        ["cdi", "generate", "--output", ""],
    ],
)
def test_an_empty_path_is_a_usage_error(args, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    code, out, err = cli(*args)
    flag = next(a for a in reversed(args) if a.startswith("--") and a != "--engine")
    flag = flag.rstrip("=")
    command = " ".join(a for a in args if not a.startswith("-") and a not in ("", "x.json",
                                                                              "containerd"))
    assert code == 2, err
    assert err.splitlines() == [
        f"error: Invalid value for '{flag}': an empty path names no file",
        f"hint: see 'nvdocker2 {command} --help' for its options"]
    assert "directory" not in err and os.listdir(work) == []
    assert not (tmp_path / "state").exists()
