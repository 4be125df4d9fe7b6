"""`nvdocker2 cdi refresh` without the CLI's parser (nvdocker2.console) is the same command:
the same stdout, stderr and exit code as the CLI gives, with and without --json, in every
outcome (no spec, unchanged, rewritten, left alone, refused), and every other command line
goes to the CLI (help, completion, bad or empty values, unknown words)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from nvdocker2.console import refresh_options

from .test_cdi import GPU
from .test_cdi_refresh import HAND_MADE, installed, remove_a_gpu

ENTRIES = {
    "console": "import sys; from nvdocker2.console import main; main()",
    "cli": "import sys; from nvdocker2.cli import main; main()",
}


def both(host, *args: str) -> dict[str, tuple[int, str, str]]:
    """(exit code, stdout, stderr) of the console script's entry and of the CLI's, the spec
    directory's files put back between the two, backup names made alike."""
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(host.toml),
               NVDOCKER2_STATE_DIR=str(host.state))
    saved = ({p.name: p.read_bytes() for p in host.spec_dir.iterdir()}
             if host.spec_dir.is_dir() else None)
    out = {}
    for name, code in ENTRIES.items():
        if saved is not None:
            for p in host.spec_dir.iterdir():
                p.unlink()
            for n, data in saved.items():
                (host.spec_dir / n).write_bytes(data)
        r = subprocess.run([sys.executable, "-c", code, "cdi", "refresh", "--config",
                            str(host.config), *args], capture_output=True, text=True, env=env,
                           timeout=60)
        out[name] = (r.returncode, re.sub(r"\d{8}T\d{6}Z-[0-9a-f]+", "BACKUP", r.stdout),
                     r.stderr)
    return out


@pytest.mark.parametrize("flags", [(), ("--json",)])
def test_every_outcome_reads_the_same_as_the_cli(host, flags):
    r = both(host, *flags)  # nothing installed: no spec
    assert r["console"] == r["cli"] and r["console"][0] == 0
    assert "no CDI spec" in r["console"][1] or '"present": false' in r["console"][1]

    installed(host)
    r = both(host, *flags)
    assert r["console"] == r["cli"] and r["console"][0] == 0
    assert "unchanged" in r["console"][1] or '"changed": false' in r["console"][1]

    remove_a_gpu(host)
    r = both(host, *flags, "--timeout", "5")
    assert r["console"] == r["cli"] and r["console"][0] == 0
    assert f"{GPU}={host.driver.gpus[1].uuid}" not in r["console"][1]
    assert "rewrote" in r["console"][1] or '"changed": true' in r["console"][1]

    host.spec.write_bytes(HAND_MADE)
    r = both(host, *flags, f"--cdi-spec-dir={host.spec_dir}")
    assert r["console"] == r["cli"] and r["console"][0] == 0
    assert "left alone" in r["console"][1] or '"left_alone": "it does not' in r["console"][1]
    assert host.spec.read_bytes() == HAND_MADE


@pytest.mark.parametrize("flags", [(), ("--json",)])
def test_a_refusal_has_the_cli_s_lines_and_exit_code(host, flags):
    installed(host)
    host.spec_dir.chmod(0o777)  # anyone may write it: refresh must not trust it
    r = both(host, *flags)
    assert r["console"] == r["cli"]
    code, stdout, stderr = r["console"]
    assert code == 3
    assert stderr.startswith(f"error: CDI spec directory {host.spec_dir}: ")
    assert "\nhint: " in stderr
    if flags:
        assert json.loads(stdout)["exit_code"] == 3


@pytest.mark.parametrize("argv, found", [
    (["cdi", "refresh"], {"json": False}),
    (["cdi", "refresh", "--json", "--config", "/x/daemon.json"],
     {"json": True, "--config": "/x/daemon.json"}),
    (["cdi", "refresh", "--config=/x/d.json", "--cdi-spec-dir", "/c", "--timeout", "2.5"],
     {"json": False, "--config": "/x/d.json", "--cdi-spec-dir": "/c", "--timeout": "2.5"}),
])
def test_plain_refresh_command_lines_run_without_the_parser(argv, found):
    assert refresh_options(argv) == found


@pytest.mark.parametrize("argv", [
    ["cdi", "refresh", "--help"], ["cdi", "refresh", "-h"], ["cdi", "generate"],
    ["cdi", "refresh", "--config"], ["cdi", "refresh", "--config", ""],
    ["cdi", "refresh", "--config="], ["cdi", "refresh", "--config", "--json"],
    ["cdi", "refresh", "--timeout", "abc"], ["cdi", "refresh", "--timeout", "-1"],
    ["cdi", "refresh", "--timeout", "1e3"], ["cdi", "refresh", "--json=yes"],
    ["cdi", "refresh", "--config", "/a", "--config", "/b"], ["cdi", "refresh", "extra"],
    ["cdi", "refresh", "--", "--json"], ["--version"], ["install"], ["refresh", "cdi"],
])
def test_every_other_command_line_goes_to_the_cli(argv):
    assert refresh_options(argv) is None


def test_completion_goes_to_the_cli(monkeypatch):
    monkeypatch.setenv("_NVDOCKER2_COMPLETE", "complete_bash")
    assert refresh_options(["cdi", "refresh"]) is None


@pytest.mark.parametrize("args, code", [(["--timeout", "abc"], 2), (["--help"], 0),
                                        (["--bogus"], 2)])
def test_what_goes_to_the_cli_gets_the_cli_s_answer(host, args, code):
    r = both(host, *args)
    assert r["console"] == r["cli"] and r["console"][0] == code


def test_a_plain_refresh_loads_no_parser_and_help_still_comes_from_the_cli(host):
    installed(host)
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(host.toml),
               NVDOCKER2_STATE_DIR=str(host.state))
    code = ("import atexit, sys; atexit.register(lambda: sys.stderr.write("
            "'parser\\n' if 'typer' in sys.modules else 'no parser\\n')); "
            "from nvdocker2.console import main; main()")
    for args, loaded in ((["--json"], "no parser"), (["--help"], "parser")):
        r = subprocess.run([sys.executable, "-c", code, "cdi", "refresh", "--config",
                            str(host.config), *args], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines()[-1] == loaded
    assert "Regenerate the CDI spec" in r.stdout
