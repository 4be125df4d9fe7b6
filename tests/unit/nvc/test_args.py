"""Our nvidia-container-cli's command line, read as NVIDIA's argp-based cli reads it: what the
callers pass (the hook's cli_argv, LXC's hook) parses, and a bad command line exits 1 with
argp's message and the Try line, never a traceback."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvdocker2.nvc.args import COMMANDS, GLOBAL, InputError, Parsed, Shown, UsageError, parse
from nvdocker2.nvc.main import main
from nvdocker2.nvc.require import RequirementError, check


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out, err), out.getvalue(), err.getvalue()


def test_the_hooks_command_line_parses():
    p = parse(["--root=/d", "--load-kmods", "--debug=/l", "--ldcache=/c", "--user=0:0",
               "configure", "--ldconfig=@/sbin/ldconfig", "--no-cgroups", "--device=0,1",
               "--mig-config=0", "--compute", "--utility", "--require=cuda>=11.0",
               "--require=driver>=500", "--pid=42", "/rootfs"])
    assert isinstance(p, Parsed) and p.command == "configure" and p.args == ["/rootfs"]
    assert p.last("root", "globals") == "/d" and p.flag("load-kmods")
    assert p.joined("device") == "0,1" and p.last("pid") == "42"
    assert p.options["require"] == ["cuda>=11.0", "driver>=500"]
    assert p.flag("compute") and p.flag("no-cgroups") and not p.flag("video")


def test_lxc_hooks_command_line_parses():
    # /usr/share/lxc/hooks/nvidia: `--user` without a value, values as separate words too
    p = parse(["--debug=/h/nvidia.log", "--user", "configure", "--no-cgroups",
               "--ldconfig=@/sbin/ldconfig", "--device=1", "--utility", "--compat32",
               "/usr/lib/x86_64-linux-gnu/lxc/rootfs"])
    assert p.globals["user"] == [None] and p.joined("device") == "1"


def test_argp_forms_short_bundles_prefixes_and_permuted_arguments():
    p = parse(["-kn", "-r", "/d", "configure", "/rootfs", "-cu", "-p42", "--dev", "all",
               "--no-c"])
    assert p.flag("load-kmods") and p.flag("no-pivot") and p.last("root", "globals") == "/d"
    assert p.flag("compute") and p.flag("utility") and p.last("pid") == "42"
    assert p.joined("device") == "all" and p.flag("no-cgroups") and p.args == ["/rootfs"]


@pytest.mark.parametrize("argv,message", [
    (["--bogus", "info"], "nvidia-container-cli: unrecognized option '--bogus'"),
    (["-x", "info"], "nvidia-container-cli: invalid option -- 'x'"),
    (["configure", "--pid"], "nvidia-container-cli configure: option '--pid' requires an"
                             " argument"),
    (["configure", "--compute=1", "/r"], "nvidia-container-cli configure: option '--compute'"
                                         " doesn't allow an argument"),
    (["configure", "--no", "/r"], "nvidia-container-cli configure: option '--no' is"
                                  " ambiguous; possibilities:"),
    ([], "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"),
    (["frobnicate"], "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"),
    (["configure"], "Usage: nvidia-container-cli configure [OPTION...] ROOTFS"),
    (["configure", "/a", "/b"], "Usage: nvidia-container-cli configure [OPTION...] ROOTFS"),
    (["info", "extra"], "nvidia-container-cli info: Too many arguments"),
    (["--device=0", "info"], "nvidia-container-cli: unrecognized option '--device=0'"),
])
def test_bad_command_lines_exit_1_with_argps_message(argv, message):
    code, out, err = _run(argv)
    assert code == 1 and out == ""
    first, second = err.splitlines()
    assert first.startswith(message)
    assert second.startswith("Try `nvidia-container-cli")


@pytest.mark.parametrize("argv,message", [
    (["configure", "rootfs"], "invalid rootfs directory"),
    (["configure", "/"], "invalid rootfs directory"),
    (["configure", "--pid=0", "/r"], "invalid pid: '0'"),
    (["configure", "--pid=1x", "/r"], "invalid pid: '1x'"),
    (["--user=root", "info"], "invalid user: 'root'"),
    (["configure", "--imex-channel=a", "/r"], "invalid IMEX channel: 'a'"),
    (["configure", *["--require=cuda>=1"] * 33, "/r"], "too many requirements"),
])
def test_bad_values_are_input_errors(argv, message):
    code, out, err = _run(argv)
    assert (code, out, err) == (1, "", f"nvidia-container-cli: input error: {message}\n")


@pytest.mark.parametrize("argv", [["--help"], ["configure", "--help"], ["--version"],
                                  ["list", "--usage"], ["-V"]])
def test_help_usage_and_version_exit_0(argv):
    code, out, err = _run(argv)
    assert code == 0 and err == "" and out.strip()


def test_a_missing_driver_is_an_initialization_error(tmp_path):
    code, out, err = _run([f"--root={tmp_path}", "info"])
    assert code == 1 and out == ""
    assert err.startswith("nvidia-container-cli: initialization error: no NVIDIA driver found")
    assert err.splitlines()[1].startswith("hint: ")


_WORDS = sorted({f"--{o.name}" for opts, _, _ in COMMANDS.values() for o in opts}
                | {f"--{o.name}" for o in GLOBAL} | set(COMMANDS) | {"--", "-", "/r"})


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=12),
                          st.sampled_from(_WORDS).flatmap(
                              lambda w: st.text(max_size=6).map(lambda t: f"{w}={t}"))),
                max_size=8))
def test_any_argv_parses_or_is_refused_with_a_usage_or_input_error(argv):
    try:
        result = parse(argv)
    except (UsageError, InputError) as err:
        assert str(err).strip()  # something to print before the Try line
        return
    assert isinstance(result, (Parsed, Shown))


@pytest.mark.parametrize("expression,facts,ok", [
    ("driver>=500", {"driver": "535.104.05"}, True),
    ("driver>=600", {"driver": "535.104.05"}, False),
    ("driver>=600 driver<536", {"driver": "535.104.05"}, True),  # spaces: alternatives
    ("driver>=500,driver<535", {"driver": "535.104.05"}, False),  # commas: all of them
    ("cuda>=99.0 brand=tesla", {"driver": "535.104.05"}, True),  # unknown facts hold
    ("driver==535.104.05", {"driver": "535.104.05"}, True),
])
def test_requirements(expression, facts, ok):
    if ok:
        check(expression, facts)
    else:
        with pytest.raises(RequirementError, match="unsatisfied condition"):
            check(expression, facts)


@pytest.mark.parametrize("expression", ["driver", "gpu>=1", "driver>=x", "brand>tesla"])
def test_malformed_requirements_are_refused(expression):
    with pytest.raises(RequirementError, match="invalid expression"):
        check(expression, {"driver": "535.104.05"})
