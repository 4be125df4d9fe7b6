"""Our nvidia-container-cli's argument reader (nvdocker2.nvc.args), decision by decision: the
option forms argp accepts, the exact refusals, the values' bounds and the help text. The
process-level tests are in test_args.py."""

from __future__ import annotations

import pytest

from nvdocker2.nvc.args import (
    InputError,
    Parsed,
    Shown,
    UsageError,
    imex_channels,
    parse,
    parse_pid,
    parse_user,
)


def usage_error(argv: list[str]) -> tuple[str, str, bool]:
    with pytest.raises(UsageError) as e:
        parse(argv)
    return e.value.text, e.value.prog, e.value.usage


def input_error(argv: list[str]) -> str:
    with pytest.raises(InputError) as e:
        parse(argv)
    return str(e.value)


def test_parsed_answers_flags_last_values_and_joined_lists():
    p = Parsed("configure", globals={"root": ["/a", "/b"], "user": [None]},
               options={"device": ["0", None, "1"], "mig-config": [None], "pid": []})
    assert p.flag("root") and p.flag("device") and p.flag("pid") and not p.flag("compute")
    assert p.last("root", "globals") == "/b" and p.last("root") is None
    assert p.last("pid") is None and p.last("device") == "1"
    assert p.joined("device") == "0,1" and p.joined("mig-config") == ""
    assert p.joined("imex-channel") is None


def test_values_attached_or_as_the_next_word_short_or_long():
    p = parse(["-kr/d", "-d", "/log", "--ldc", "/c", "-u", "--no-create-imex-channels",
               "configure", "-p", "7", "--device", "0", "-d1", "--mig-monitor=", "/root",
               "--imex-channel", "3"])
    assert p.globals == {"load-kmods": [None], "root": ["/d"], "debug": ["/log"],
                         "ldcache": ["/c"], "user": [None], "no-create-imex-channels": [None]}
    assert p.options == {"pid": ["7"], "device": ["0", "1"], "mig-monitor": [""],
                         "imex-channel": ["3"]}
    assert p.args == ["/root"]
    assert input_error(["configure", "--", "-r"]) == "invalid rootfs directory"


def test_the_first_argument_ends_the_global_options_and_names_the_command():
    p = parse(["--user=5:6", "list", "-lb"])
    assert p.command == "list" and p.globals == {"user": ["5:6"]}
    assert p.options == {"libraries": [None], "binaries": [None]} and p.args == []
    assert usage_error(["list", "--root=/d"]) == (
        "unrecognized option '--root=/d'", "nvidia-container-cli list", False)


def test_an_optional_value_never_takes_the_next_word():
    p = parse(["-u", "info"])
    assert p.command == "info" and p.globals == {"user": [None]}
    p = parse(["-u1:2", "info"])
    assert p.globals == {"user": ["1:2"]}


@pytest.mark.parametrize("argv, text, prog, usage", [
    (["--=x", "info"], "unrecognized option '--=x'", "nvidia-container-cli", False),
    (["configure", "--no", "/r"], "option '--no' is ambiguous; possibilities: '--no-cgroups'"
     " '--no-devbind' '--no-persistenced' '--no-fabricmanager'",
     "nvidia-container-cli configure", False),
    (["--no", "info"], "option '--no' is ambiguous; possibilities: '--no-pivot'"
     " '--no-create-imex-channels'", "nvidia-container-cli", False),
    (["-r"], "option requires an argument -- 'r'", "nvidia-container-cli", False),
    (["-kx", "info"], "invalid option -- 'x'", "nvidia-container-cli", False),
    (["--root"], "option '--root' requires an argument", "nvidia-container-cli", False),
    (["--load-kmods=1", "info"], "option '--load-kmods' doesn't allow an argument",
     "nvidia-container-cli", False),
    (["-k"], "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]",
     "nvidia-container-cli", True),
    (["configure", "-", "/r"], "Usage: nvidia-container-cli configure [OPTION...] ROOTFS",
     "nvidia-container-cli configure", True),
    (["list", "x"], "Too many arguments", "nvidia-container-cli list", False),
])
def test_bad_command_lines_are_refused_as_argp_refuses_them(argv, text, prog, usage):
    assert usage_error(argv) == (text, prog, usage)


def test_help_usage_and_version_are_shown():
    assert parse(["info", "--help"]) == Shown(
        "Usage: nvidia-container-cli info [OPTION...]\n"
        "Query the driver and report its information as well as the devices it detected.\n"
        "\n"
        "Options:\n"
        "      --csv                      Output in CSV format\n"
        "  -?, --help                     Give this help list\n"
        "      --usage                    Give a short usage message\n"
        "  -V, --version                  Print program version")
    top = parse(["-?"]).text.splitlines()
    assert top[0] == "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"
    assert top[1] == "Command line utility for manipulating NVIDIA GPU containers."
    assert "  -u, --user[=UID[:GID]]         User and group to use for privilege separation" in top
    assert "  -r, --root=PATH                Path to the driver root directory" in top
    assert top[-5:] == ["", "Commands:",
                        "    info                         Report information about the driver"
                        " and devices",
                        "    list                         List driver components",
                        "    configure                    Configure a container with GPU"
                        " support"]
    assert parse(["configure", "--usage"]) == Shown(
        "Usage: nvidia-container-cli configure [OPTION...] ROOTFS")
    assert parse(["--usa"]).text == "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"
    version = parse(["list", "-V"]).text
    assert version.startswith("cli-version: ") and version.endswith(
        "\nlib-version: none (nvdocker2, pure Python)")


@pytest.mark.parametrize("argv, message", [
    (["configure", "r"], "invalid rootfs directory"),
    (["configure", "/"], "invalid rootfs directory"),
    (["configure", "--pid=7", "--pid=x", "/r"], "invalid pid: 'x'"),
    (["configure", "--pid=", "/r"], "invalid pid: ''"),
    (["--user=1", "--user=x", "info"], "invalid user: 'x'"),
    (["list", "--imex-channel=1", "--imex-channel=2048"], "invalid IMEX channel: '2048'"),
    (["configure", "--imex-channel=", "--imex-channel=all", "/r"], "invalid IMEX channel:"
     " 'all'"),
])
def test_bad_values_are_input_errors(argv, message):
    assert input_error(argv) == message


def test_at_most_32_requirements():
    assert len(parse(["configure", *["--require=cuda>=1"] * 32, "/r"]).options["require"]) == 32
    assert input_error(["configure", *["-rcuda>=1"] * 33, "/r"]) == "too many requirements"


@pytest.mark.parametrize("text, pid", [("1", 1), ("2147483647", 2147483647), ("007", 7)])
def test_pids(text, pid):
    assert parse_pid(text) == pid


@pytest.mark.parametrize("text", ["0", "2147483648", "-1", "+1", "\u0663", "", "1 "])
def test_bad_pids(text):
    with pytest.raises(InputError) as e:
        parse_pid(text)
    assert str(e.value) == f"invalid pid: {text!r:.60}"


@pytest.mark.parametrize("text, ids", [
    ("0", (0, None)), ("1000:1001", (1000, 1001)), ("4294967294:4294967294",
                                                     (4294967294, 4294967294))])
def test_users(text, ids):
    assert parse_user(text) == ids


@pytest.mark.parametrize("text", ["4294967295", "1:4294967295", "1:", ":1", "a", "1:b",
                                  "\u0663", "-1"])
def test_bad_users(text):
    with pytest.raises(InputError) as e:
        parse_user(text)
    assert str(e.value) == f"invalid user: {text!r:.60}"


def test_imex_channels():
    assert imex_channels(" 3, ,0,2047,") == (3, 0, 2047)
    assert imex_channels("") == ()
    for bad in ("2048", "x", "\u0663", "-1"):
        with pytest.raises(InputError) as e:
            imex_channels(f"1,{bad}")
        assert str(e.value) == f"invalid IMEX channel: {bad!r:.60}"


def test_no_options_name_is_a_prefix_of_another_at_one_level():
    """An exact name then needs no rule of its own: it is the one prefix match (argp prefers
    the exact one, which a new option could make matter)."""
    from nvdocker2.nvc.args import _BUILTIN, COMMANDS, GLOBAL

    for opts in [GLOBAL] + [c[0] for c in COMMANDS.values()]:
        names = [o.name for o in opts + _BUILTIN]
        assert [(a, b) for a in names for b in names if a != b and b.startswith(a)] == []
