"""Hostile and odd command lines against the runtime shim (docs/reference.md §3).

containerd-shim builds the argv, but its values (container ids, bundle paths, log paths) come
from users: the shim must find `create` and its bundle exactly as runc does, never mistake a
value named `create` for the subcommand, and pass every argv through unchanged.

- arbitrary bytes (split at NUL, decoded as Python decodes sys.argv) never crash the parser;
- generated runc command lines, whose true subcommand and bundle are known by construction,
  are read right, whatever the values hold;
- the shim's real `main` execs the low-level runtime with exactly the argv it was given, or
  refuses with one line; only `os.execv` is replaced, by a recorder.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from nvdocker2 import runtime
from nvdocker2.runtime.args import parse_args, subcommand

PROG = "nvidia-container-runtime"
CWD = "/run/containerd/io.containerd.runtime.v2.task/moby/0123abc"

ARGV_BYTES = st.binary(max_size=300).map(
    lambda b: [os.fsdecode(part) for part in b.split(b"\0")] if b else [])


@settings(max_examples=300, deadline=None)
@given(argv=ARGV_BYTES)
def test_arbitrary_bytes_never_crash_the_parser(argv: list[str]) -> None:
    is_create, bundle = parse_args([PROG, *argv], cwd=CWD)
    command, index = subcommand([PROG, *argv])
    assert is_create == (command == "create")
    if is_create:
        assert argv[index - 1] == "create"
        assert isinstance(bundle, str) and os.path.isabs(bundle)
    else:
        assert bundle is None


# --- command lines whose meaning is known by construction ---------------------------------------

VALUES = st.sampled_from(["create", "-b", "--bundle", "--bundle=x", "start", "-", "--", "",
                          "../b", "/b/create", "a b", "é", "x=y"]) | st.text(
    alphabet=st.characters(blacklist_characters="\x00"), max_size=8)
NON_DASH = VALUES.map(lambda v: v.lstrip("-") or "id")
GLOBAL = st.one_of(
    st.sampled_from(["--root", "-root", "--log", "--log-format", "--criu", "--rootless",
                     "--cgroup-manager", "--log-level"]).flatmap(
        lambda f: VALUES.map(lambda v: [f, v])),
    st.sampled_from(["--root=", "--log=", "-log-format="]).flatmap(
        lambda f: VALUES.map(lambda v: [f + v])),
    st.sampled_from(["--debug", "--systemd-cgroup", "-debug"]).map(lambda f: [f]),
)
BUNDLE = st.one_of(
    st.sampled_from(["--bundle", "-b", "-bundle"]).flatmap(
        lambda f: VALUES.map(lambda v: ([f, v], v))),
    st.sampled_from(["--bundle=", "-b="]).flatmap(lambda f: VALUES.map(lambda v: ([f + v], v))),
)
OTHER = st.one_of(
    st.sampled_from(["--console-socket", "--pid-file", "--preserve-fds"]).flatmap(
        lambda f: VALUES.map(lambda v: ([f, v], None))),
    st.sampled_from(["--no-pivot", "--no-new-keyring"]).map(lambda f: ([f], None)),
)
SUBCOMMANDS = st.sampled_from(["create", "start", "state", "kill", "delete", "exec", "run",
                               "features", "ps", "events", "update", "pause", "resume"])


@st.composite
def command_lines(draw, sub: str | None = None, last_bundle: str | None = None
                  ) -> tuple[list[str], str, str | None, int]:
    """(argv, true subcommand, true bundle value or None, index of the subcommand in argv);
    `sub` and a final `--bundle last_bundle` can be imposed."""
    argv: list[str] = []
    for part in draw(st.lists(GLOBAL, max_size=4)):
        argv += part
    sub = sub or draw(st.just("create") | SUBCOMMANDS)
    at = len(argv)
    argv.append(sub)
    bundle = None
    for part, value in draw(st.lists(BUNDLE | OTHER, max_size=4)):
        argv += part
        if value is not None and part[0].lstrip("-").split("=")[0] in ("bundle", "b"):
            bundle = value
    if last_bundle is not None:
        argv += ["--bundle", last_bundle]
        bundle = last_bundle
    argv.append(draw(NON_DASH))  # the container id: may well be "create"
    return argv, sub, bundle, at


@settings(max_examples=300, deadline=None)
@given(case=command_lines())
def test_generated_runc_command_lines_are_read_as_runc_reads_them(case) -> None:
    argv, sub, bundle, at = case
    assert subcommand([PROG, *argv]) == (sub, at + 1), argv
    is_create, found = parse_args([PROG, *argv], cwd=CWD)
    assert is_create == (sub == "create"), argv
    if sub != "create":
        assert found is None
    elif bundle:
        assert found == os.path.normpath(os.path.join(CWD, bundle)), argv
    else:
        assert found == CWD, argv


# --- the real entry point ------------------------------------------------------------------------


class Exec(BaseException):
    def __init__(self, path: str, argv: list[str]) -> None:
        super().__init__(path)
        self.path, self.argv = path, list(argv)


def _record_execv(path, argv):
    raise Exec(path, argv)


@pytest.fixture(scope="module")
def host():
    """A fake low-level runtime and a config.toml naming it; a real bundle."""
    with tempfile.TemporaryDirectory(prefix="nvd2-rtfuzz-") as d:
        root = Path(d)
        runc = root / "runc"
        runc.write_text("#!/bin/sh\nexit 0\n")  # never run: execv is recorded instead
        runc.chmod(0o755)
        hook = root / "nvidia-container-runtime-hook"
        hook.write_text("#!/bin/sh\nexit 0\n")
        hook.chmod(0o755)
        config = root / "config.toml"
        config.write_text(f'[nvidia-container-runtime]\nruntimes = ["{runc}"]\n'
                          f'[nvidia-container-runtime-hook]\npath = "{hook}"\n')
        bundle = Path(BUNDLE_DIR)
        bundle.mkdir(exist_ok=True)
        try:
            yield root, runc, config, bundle
        finally:
            shutil.rmtree(bundle, ignore_errors=True)


SPEC = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"args": ["sh"], "env": ["PATH=/bin"]}, "hooks": {}}


BUNDLE_DIR = f"/tmp/nvd2-rtfuzz-bundle-{os.getpid()}"  # the module fixture's real bundle


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=ARGV_BYTES | command_lines().map(lambda c: c[0])
       | command_lines("create", BUNDLE_DIR).map(lambda c: c[0]))
# Found by random runs: a bundle path holding a newline or an escape made a two-line error.
@example(argv=["create", "--bundle", "\n", "create"])
@example(argv=["create", "--bundle", "/x\r\x1b[2K\u2028y", "id"])
def test_main_execs_the_runtime_with_the_exact_argv_or_refuses_in_one_line(
    host, argv: list[str]
) -> None:
    root, runc, config, bundle = host
    (bundle / "config.json").write_text(json.dumps(SPEC))
    saved = os.environ.get("NVIDIA_CONTAINER_RUNTIME_CONFIG")
    os.environ["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = str(config)
    stderr = sys.stderr
    sys.stderr = io.StringIO()
    real = os.execv
    os.execv = _record_execv
    ran = None
    try:
        code = runtime.main(list(argv), self_path=str(root / PROG))
    except Exec as e:
        ran, code = e, None
    finally:
        os.execv = real
        err = sys.stderr.getvalue()
        sys.stderr = stderr
        if saved is None:
            os.environ.pop("NVIDIA_CONTAINER_RUNTIME_CONFIG", None)
        else:
            os.environ["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = saved
    is_create, found = parse_args([PROG, *argv], cwd=os.getcwd())
    if ran is None:
        event("refused")
        # Only a create can fail (no such bundle, no config.json there); one line, exit 1.
        assert is_create, (argv, err)
        assert code == 1 and err.startswith(f"{PROG}: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
        return
    event("create exec" if is_create else "pass-through exec")
    assert ran.path == str(runc)
    assert ran.argv == [str(runc), *argv]  # the argv unchanged, in order
    if is_create and found == str(bundle):
        spec = json.loads((bundle / "config.json").read_text())
        hooks = spec["hooks"]["prestart"]
        assert [h["path"] for h in hooks] == [str(root / "nvidia-container-runtime-hook")]
