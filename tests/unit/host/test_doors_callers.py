"""What a caller of the doors (nvdocker2/host) can rely on, seen from the program run or the
file made: the environment and working directory a program gets, `-I` for Python, and modes
that the umask does not decide."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from nvdocker2.host import files, run


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_a_program_gets_a_scrubbed_environment_and_starts_in_root(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    monkeypatch.setenv("BASH_ENV", "/tmp/evil.sh")
    monkeypatch.chdir(tmp_path)
    ran = run.run(["env"], timeout=10, text=True, env={"GIVEN": "1"})
    seen = dict(line.split("=", 1) for line in ran.stdout.splitlines())
    expected = {"PATH", "GIVEN", *(k for k in os.environ if k.startswith("NVD2_"))}
    if os.geteuid() != 0:
        expected |= {"XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"} & set(os.environ)
    assert set(seen) == expected
    assert seen["GIVEN"] == "1"
    assert run.run(["pwd"], timeout=10, text=True).stdout == "/\n"


def test_python_always_runs_isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    ran = run.run([sys.executable, "-c", "import sys; print(sys.flags.isolated)"], timeout=30,
                  text=True)
    assert ran.argv[1] == "-I" and ran.stdout == "1\n"


def test_a_missing_program_is_not_run_and_says_so():
    with pytest.raises(run.NotRun) as err:
        run.run(["nvdocker2-no-such-program"], timeout=5)
    assert err.value.missing and "not found on PATH" in str(err.value)


def test_a_program_past_its_timeout_is_killed(tmp_path):
    with pytest.raises(run.Timeout):
        run.run(["sleep", "30"], timeout=0.2)


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_directories_get_exactly_their_mode_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        made = files.make_dirs(tmp_path / "a" / "b", 0o755)
    finally:
        os.umask(old)
    assert made == [str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    assert (_mode(tmp_path / "a"), _mode(tmp_path / "a" / "b")) == (0o755, 0o755)
    assert files.make_dirs(tmp_path / "a" / "b", 0o700) == []  # nothing new, nothing changed
    assert _mode(tmp_path / "a" / "b") == 0o755


def test_a_file_built_from_a_private_file_is_private(tmp_path):
    secret = tmp_path / "config.toml"
    secret.write_bytes(b"[auth]\npassword = 1\n")
    secret.chmod(0o600)
    old = os.umask(0)
    try:
        files.copy_new(secret, tmp_path / "copy.toml")
        mode = files.derived_mode(0o644, [secret, tmp_path / "missing"])
    finally:
        os.umask(old)
    assert _mode(tmp_path / "copy.toml") == 0o600 and mode == 0o600
    assert (tmp_path / "copy.toml").read_bytes() == secret.read_bytes()


def test_a_new_file_is_never_written_through_a_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"root's\n")
    (tmp_path / "new").symlink_to(target)
    with pytest.raises(FileExistsError):
        files.write_new(tmp_path / "new", b"theirs\n", 0o644)
    assert target.read_bytes() == b"root's\n"
