"""What a person meets first at the command line (usage errors, -h, help texts, completion),
the same on every typer version nvdocker2 supports (Debian 12's 0.7 to the newest on PyPI)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ..cli_run import cli

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
COMMANDS = ["install", "uninstall", "rollback", "backups", "status", "doctor", "cdi generate"]


def assert_usage_error(code: int, out: str, err: str, fragment: str, command: str) -> None:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("error: ") and fragment in lines[0], err
    assert lines[1] == f"hint: see '{command} --help' for its options"
    assert "Usage:" not in err + out and "Traceback" not in err


@pytest.mark.parametrize(
    "args, fragment, command",
    [
        (["-V"], "-V", "nvdocker2"),
        (["install", "--bogus"], "--bogus", "nvdocker2 install"),
        (["install", "--reload", "bogus"], "'bogus' is not one of", "nvdocker2 install"),
        (["status", "--timeout", "3"], "--timeout", "nvdocker2 status"),
        (["install", "--timeout", "soon"], "'--timeout'", "nvdocker2 install"),
        (["bogus"], "bogus", "nvdocker2"),
        (["backups", "extra"], "extra", "nvdocker2 backups"),
        (["cdi", "generate", "--nope"], "--nope", "nvdocker2 cdi generate"),
    ],
)
def test_usage_errors_are_our_two_lines_with_exit_2(args, fragment, command):
    assert_usage_error(*cli(*args), fragment, command)


def test_usage_error_through_the_console_script(tmp_path):
    cfg = tmp_path / "daemon.json"
    for args in (["install", "--bogus"], ["-V"]):
        r = subprocess.run([str(NVDOCKER2), *args, "--config", str(cfg)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("error: ") and "\nhint: see 'nvdocker2" in r.stderr
        assert "internal error" not in r.stderr
    assert not cfg.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_is_help_for_every_command(command):
    code, out, err = cli(*command.split(), "-h")
    assert code == 0, err
    assert out.startswith(f"Usage: nvdocker2 {command} [OPTIONS]")
    assert "-h, --help" in out
    assert cli(*command.split(), "--help")[1] == out


@pytest.mark.parametrize("command", COMMANDS)
def test_help_never_cuts_text_and_shows_one_default_per_option(command):
    out = cli(*command.split(), "--help")[1]
    assert "…" not in out and "..." not in out.replace("[ARGS]...", "")
    for option in out.split("\n  -")[1:]:
        assert option.count("[default:") <= 1, option


@pytest.mark.parametrize(
    "command, says",
    [
        ("install", "The engine's file to add the runtime to"),
        ("uninstall", "The engine's file to remove the runtime from"),
        ("rollback", "The engine's file to restore from its backups"),
        ("backups", "The engine's file whose backups to list"),
        ("status", "The engine's file to report on"),
        ("doctor", "The engine's file to check"),
    ],
)
def test_config_help_says_what_the_command_does_with_it(command, says):
    out = " ".join(cli(command, "--help")[1].split())
    assert f"--config PATH {says} [default:" in out
    assert "/var/snap/docker/current/config/daemon.json" in out or command == "doctor"
    if command in ("backups", "status", "doctor"):
        assert "to change" not in out


@pytest.mark.parametrize("command", ["install", "uninstall", "rollback", "status", "doctor"])
def test_help_says_which_engines_each_option_serves(command):
    from nvdocker2.engines import registry

    out = cli(command, "--help")[1]
    # Each option's block of the help, by its flag ("--pidfile PATH dockerd's pid file ...").
    blocks = {b.split()[0]: " ".join(b.split()) for b in ("\n" + out).split("\n  -")[1:]}
    some = [(opt, owners) for opt, owners in registry.options(command)
            if len(owners) < len(registry.names())]
    for opt, owners in some:
        text = blocks["-" + opt.flag.lstrip("-")]
        assert text.endswith(f"({', '.join(owners)})"), text
    assert some or command in ("status", "doctor")


def test_install_help_names_each_engines_file():
    out = " ".join(cli("install", "--help")[1].split())
    assert "Add the nvidia runtime to the engine's config: Docker's daemon.json, containerd's " \
           "config.toml, CRI-O's drop-in (/etc/crio/crio.conf.d/99-nvidia.conf)." in out
    for flag in ("--docker-host URL", "--pidfile PATH", "--dockerd-log PATH"):
        assert flag in out and out.split(flag, 1)[1].split(" --", 1)[0].endswith("(docker)")


def test_no_command_prints_the_help_and_exits_0():
    code, out, err = cli()
    assert code == 0, err
    assert out.startswith("Usage: nvdocker2 [OPTIONS] COMMAND")
    code, out, _ = cli("cdi")
    assert code == 0 and out.startswith("Usage: nvdocker2 cdi [OPTIONS] COMMAND")


def test_top_level_help_lists_commands_whole_and_completion():
    out = cli("-h")[1]
    assert "--install-completion" in out and "--show-completion" in out
    flat = " ".join(out.split())
    assert "Check this host's GPU container setup and say how to fix what is wrong" in flat


def test_show_completion_prints_a_bash_script():
    env = {"PATH": "/usr/bin:/bin", "SHELL": "/bin/bash"}
    # typer 0.7 without shellingham takes the shell's name; later ones may detect it.
    for args in (["--show-completion", "bash"], ["--show-completion"]):
        r = subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, timeout=60,
                           env=env)
        if r.returncode == 0:
            break
    assert r.returncode == 0, r.stderr
    assert "_NVDOCKER2_COMPLETE" in r.stdout and "complete " in r.stdout


@pytest.mark.parametrize("args", [["--version"], ["install", "-h"], ["status", "--bogus"]])
def test_start_up_imports_neither_rich_nor_jsonschema(args):
    code = (
        "import sys\nfrom nvdocker2.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('rich', 'jsonschema', 'nvdocker2.engines.transaction')"
        " if m in sys.modules]\n"
        "sys.stderr.write(f'loaded: {heavy}\\n')\n"
    )
    r = subprocess.run([sys.executable, "-I", "-c", code, *args], capture_output=True, text=True,
                       timeout=60)
    assert r.stderr.splitlines()[-1] == "loaded: []", r.stderr


DAEMON_45 = Path(__file__).parents[2] / "fixtures" / "daemon-45-lines.json"


def install_loading(cfg: Path, modules: tuple, *more: str) -> subprocess.CompletedProcess:
    """`install --reload none` on `cfg` in a fresh `python3 -I`; its stderr's last line says
    its exit code and which of `modules` it had loaded by then."""
    code = (
        "import sys\nfrom nvdocker2.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
        f"loaded = [m for m in {modules!r} if m in sys.modules]\n"
        "sys.stderr.write(f'exit {rc}, loaded: {loaded}\\n')\n"
    )
    return subprocess.run([sys.executable, "-I", "-c", code, "install", "--config", str(cfg),
                           "--runtime-path", "/usr/bin/nvidia-container-runtime",
                           "--allow-missing-runtime", "--reload", "none", *more],
                          capture_output=True, text=True, timeout=60)


def test_install_reload_none_imports_no_schema_library_pydantic_rich_or_http(tmp_path):
    """`install --reload none` on a daemon.json that conforms (issue 22: it must start fast)
    loads neither jsonschema (the quick check passes it), pydantic (typer >= 0.29 would build
    its adapters with it), rich (no spinner without a terminal), http.client nor socket (no
    dockerd to ask) nor tempfile (a dry run's); it still does the whole change."""
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(DAEMON_45.read_bytes())
    r = install_loading(cfg, ("jsonschema", "pydantic", "rich", "http.client", "socket",
                              "tempfile"))
    assert r.stderr.splitlines()[-1] == "exit 0, loaded: []", r.stderr
    assert "added runtimes.nvidia" in r.stdout
    doc = json.loads(cfg.read_text())
    assert doc["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime"}
    assert doc["runtimes"]["kata"] == {"runtimeType": "io.containerd.kata.v2"}


# What `install --reload none` once imported and never used on that path: secrets (and through
# it random, hmac, base64), difflib (a dry run's diff), base64 (CDI mode's undo), shlex (a
# dead dockerd's start command) and hashlib (OpenSSL's libcrypto, for two sha256 digests the
# interpreter's own module makes). Each cost the install's own time a start.
NOT_ON_INSTALL_PATH = ("secrets", "random", "hmac", "difflib", "base64", "shlex", "hashlib")


def floor_modules() -> set:
    """The modules typer (without rich, as the CLI loads it) and filelock load by themselves:
    a version of them that imports one of NOT_ON_INSTALL_PATH brings it whatever nvdocker2
    does."""
    code = "import sys\nsys.modules['rich'] = None\nimport typer, filelock\nprint(*sys.modules)"
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                       timeout=60, check=True)
    return set(r.stdout.split())


def test_install_reload_none_imports_only_what_it_uses(tmp_path):
    """A real install (a new entry, its backup and journal entry written) loads none of
    NOT_ON_INSTALL_PATH; the names it makes from random bytes keep their shape, and a dry run
    still shows its diff (difflib is loaded when it is wanted)."""
    fixture = DAEMON_45.read_bytes()
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(fixture)
    dry = install_loading(cfg, NOT_ON_INSTALL_PATH, "--dry-run")
    last = dry.stderr.splitlines()[-1]
    assert last.startswith("exit 0, loaded: [") and "'difflib'" in last, dry.stderr
    assert '+    "nvidia": {' in dry.stdout, dry.stdout
    assert cfg.read_bytes() == fixture
    ours = tuple(m for m in NOT_ON_INSTALL_PATH if m not in floor_modules())
    assert ours, "typer and filelock load every module of NOT_ON_INSTALL_PATH themselves"
    r = install_loading(cfg, ours)
    assert r.stderr.splitlines()[-1] == "exit 0, loaded: []", r.stderr
    assert json.loads(cfg.read_text())["runtimes"]["nvidia"] == {
        "path": "/usr/bin/nvidia-container-runtime"}
    backup = next(line for line in r.stdout.splitlines() if line.startswith("backup: "))
    bid = backup.split()[1]
    stamp, _, tail = bid.partition("-")
    assert len(stamp) == 16 and stamp.endswith("Z") and len(tail) == 6, backup
    assert int(tail, 16) >= 0
    assert [p.name for p in tmp_path.iterdir() if p.name != "state"] == ["daemon.json"]
    # the digests made without hashlib are hashlib's: the journal's name, the backup's checksum
    state = tmp_path / "state"
    key = hashlib.sha256(str(cfg).encode()).hexdigest()[:16]
    assert (state / "journal" / f"{key}.json").is_file()
    meta = json.loads((state / "backups" / f"{bid}.meta.json").read_text())
    assert meta["sha256"] == hashlib.sha256(fixture).hexdigest()
