"""nvidia-docker: the exact argv it hands to docker, for every command-line shape."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import pytest

from nvdocker2 import __version__, wrapper


class Recorder:
    """Stands in for os.execvp: records the call instead of replacing the process."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, file: str, argv: list[str]) -> None:
        self.calls.append((file, list(argv)))


def run(args, env=None):
    rec = Recorder()
    out, err = io.StringIO(), io.StringIO()
    code = wrapper.main(args, environ=env or {}, execvp=rec, stdout=out, stderr=err)
    return code, rec.calls, out.getvalue(), err.getvalue()


def exec_argv(args, env=None):
    code, calls, _, err = run(args, env)
    assert code == 0, err
    assert len(calls) == 1
    file, argv = calls[0]
    assert file == argv[0]
    return argv


RUN = ["--runtime=nvidia"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "--rm", "img"], ["docker", "run", *RUN, "--rm", "img"]),
        (["create", "img"], ["docker", "create", *RUN, "img"]),
        (["run"], ["docker", "run", *RUN]),
        (
            ["container", "run", "img", "nvidia-smi"],
            ["docker", "container", "run", *RUN, "img", "nvidia-smi"],
        ),
        (["container", "create", "img"], ["docker", "container", "create", *RUN, "img"]),
        # global options with a value: the value is never taken for the subcommand
        (["-H", "run", "run", "img"], ["docker", "-H", "run", "run", *RUN, "img"]),
        (
            ["--host", "unix:///x.sock", "run", "img"],
            ["docker", "--host", "unix:///x.sock", "run", *RUN, "img"],
        ),
        (
            ["--host=unix:///x.sock", "run", "img"],
            ["docker", "--host=unix:///x.sock", "run", *RUN, "img"],
        ),
        (["-Hunix:///x.sock", "run", "img"], ["docker", "-Hunix:///x.sock", "run", *RUN, "img"]),
        (["-H=unix:///x.sock", "run", "img"], ["docker", "-H=unix:///x.sock", "run", *RUN, "img"]),
        (["--config", "create", "run"], ["docker", "--config", "create", "run", *RUN]),
        (["--context", "run", "create", "x"], ["docker", "--context", "run", "create", *RUN, "x"]),
        (["-c", "ctx", "run", "x"], ["docker", "-c", "ctx", "run", *RUN, "x"]),
        (["-l", "debug", "run", "x"], ["docker", "-l", "debug", "run", *RUN, "x"]),
        (["--log-level", "run", "run"], ["docker", "--log-level", "run", "run", *RUN]),
        (
            ["--tlscacert", "run", "--tlscert", "c", "--tlskey", "k", "create", "i"],
            [
                "docker",
                "--tlscacert",
                "run",
                "--tlscert",
                "c",
                "--tlskey",
                "k",
                "create",
                *RUN,
                "i",
            ],
        ),
        # global flags without a value, alone or grouped as pflag allows
        (["-D", "run", "x"], ["docker", "-D", "run", *RUN, "x"]),
        (
            ["--debug", "--tls", "--tlsverify=false", "run", "x"],
            ["docker", "--debug", "--tls", "--tlsverify=false", "run", *RUN, "x"],
        ),
        (["-Dl", "debug", "run", "x"], ["docker", "-Dl", "debug", "run", *RUN, "x"]),
        (["-DH", "run", "create", "x"], ["docker", "-DH", "run", "create", *RUN, "x"]),
        (["--", "run", "x"], ["docker", "--", "run", *RUN, "x"]),
        # only the subcommand counts: later words named run/create are the container's business
        (["run", "img", "run"], ["docker", "run", *RUN, "img", "run"]),
        (["create", "--name", "run", "img"], ["docker", "create", *RUN, "--name", "run", "img"]),
    ],
)
def test_run_and_create_get_the_nvidia_runtime_right_after_the_subcommand(args, expected):
    assert exec_argv(args) == expected


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["ps", "-a"],
        ["images"],
        ["exec", "-it", "c", "run"],
        ["start", "create"],
        ["-H", "unix:///x.sock", "ps"],
        ["container", "ls"],
        ["container"],
        ["image", "create"],
        ["--help"],
        ["-v"],
        ["compose", "run", "svc"],
        # an option this wrapper does not know: it cannot tell value from subcommand, so it
        # leaves the line as the user wrote it
        ["--some-future-option", "run", "x"],
        ["-X", "run"],
        ["-H"],
        ["--"],
    ],
)
def test_everything_else_passes_through_unchanged(args):
    assert exec_argv(args) == ["docker", *args]


@pytest.mark.parametrize(
    "nv_gpu, devices",
    [
        ("0", "0"),
        ("0 1", "0,1"),
        ("0,1", "0,1"),
        (" 0 ,  1,2 ", "0,1,2"),
        ("0\t1", "0,1"),
        ("all", "all"),
        ("none", "none"),
        ("1:0", "1:0"),
        ("GPU-3a2b1c0d-0000-1111-2222-333344445555", "GPU-3a2b1c0d-0000-1111-2222-333344445555"),
        (
            "MIG-bd2ea0a5-50a1-5a7b-b1ac-dbb7b4f7fb9c 0",
            "MIG-bd2ea0a5-50a1-5a7b-b1ac-dbb7b4f7fb9c,0",
        ),
    ],
)
def test_nv_gpu_becomes_nvidia_visible_devices(nv_gpu, devices):
    argv = exec_argv(["-H", "tcp://h:2375", "run", "--rm", "img"], {"NV_GPU": nv_gpu})
    assert argv == [
        "docker",
        "-H",
        "tcp://h:2375",
        "run",
        "--runtime=nvidia",
        "-e",
        f"NVIDIA_VISIBLE_DEVICES={devices}",
        "--rm",
        "img",
    ]


@pytest.mark.parametrize("nv_gpu", ["", "   ", ",", " , "])
def test_empty_nv_gpu_adds_no_device_list(nv_gpu):
    assert exec_argv(["run", "img"], {"NV_GPU": nv_gpu}) == ["docker", "run", *RUN, "img"]


def test_nv_gpu_is_ignored_for_commands_that_do_not_start_containers():
    assert exec_argv(["ps"], {"NV_GPU": "0 1"}) == ["docker", "ps"]


@pytest.mark.parametrize(
    "nv_gpu, bad",
    [("0 x", "x"), ("gpu0", "gpu0"), ("0;rm", "0;rm"), ("-1", "-1"), ("1:", "1:"),
     # ids the hook refuses at container start (a security review found the wrapper passed them)
     ("\u0663", "\u0663"), ("MIG-GPU-aaaa/1/0", "MIG-GPU-aaaa/1/0"), ("all,0", "all"),
     ("0 none", "none"), ("1:\u0661", "1:\u0661")],
)
def test_bad_nv_gpu_is_refused_before_docker_runs(nv_gpu, bad):
    code, calls, out, err = run(["run", "img"], {"NV_GPU": nv_gpu})
    assert code == 2
    assert calls == []
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("error: NV_GPU=") and repr(bad) in lines[0]
    assert lines[1].startswith("hint: ")
    assert out == ""


@pytest.mark.parametrize(
    "nv_docker, head",
    [
        ("/opt/docker/bin/docker", ["/opt/docker/bin/docker"]),
        ("podman", ["podman"]),
        ("sudo -E docker", ["sudo", "-E", "docker"]),
        ("'/opt/my docker/docker'", ["/opt/my docker/docker"]),
        ("", ["docker"]),
        ("  ", ["docker"]),
    ],
)
def test_nv_docker_names_the_docker_command(nv_docker, head):
    assert exec_argv(["run", "i"], {"NV_DOCKER": nv_docker}) == [*head, "run", *RUN, "i"]
    assert exec_argv(["ps"], {"NV_DOCKER": nv_docker}) == [*head, "ps"]


def test_unbalanced_quote_in_nv_docker_is_an_error():
    code, calls, _, err = run(["ps"], {"NV_DOCKER": "'docker"})
    assert code == 2 and calls == []
    assert err.startswith("error: NV_DOCKER=")


def test_version_prints_our_version_then_runs_docker_version():
    code, calls, out, err = run(["version"])
    assert code == 0 and err == ""
    assert out == f"NVIDIA Docker: {__version__}\n"
    assert calls == [("docker", ["docker", "version"])]


def test_version_after_global_options():
    code, calls, out, _ = run(["-H", "unix:///s", "version"])
    assert code == 0
    assert out == f"NVIDIA Docker: {__version__}\n"
    assert calls == [("docker", ["docker", "-H", "unix:///s", "version"])]


@pytest.mark.parametrize(
    "fmt", [["--format", "{{.Server.Version}}"], ["-f", "x"], ["--format={{json .}}"]]
)
def test_version_with_format_keeps_stdout_for_docker(fmt):
    code, calls, out, err = run(["version", *fmt])
    assert code == 0
    assert out == ""
    assert err == f"NVIDIA Docker: {__version__}\n"
    assert calls == [("docker", ["docker", "version", *fmt])]


def test_word_version_as_a_value_is_not_the_version_command():
    code, calls, out, _ = run(["-H", "version", "ps"])
    assert code == 0
    assert out == ""
    assert calls == [("docker", ["docker", "-H", "version", "ps"])]


def _raise(exc):
    def execvp(file, argv):
        raise exc

    return execvp


def test_missing_docker_binary_is_reported_with_exit_127():
    err = io.StringIO()
    code = wrapper.main(
        ["ps"],
        environ={"NV_DOCKER": "nodocker"},
        execvp=_raise(FileNotFoundError(2, "No such file")),
        stderr=err,
    )
    assert code == 127
    assert err.getvalue().splitlines() == [
        "error: cannot run 'nodocker': command not found",
        "hint: install the docker CLI, or set NV_DOCKER to its path",
    ]


def test_non_executable_docker_is_reported_with_exit_126():
    err = io.StringIO()
    code = wrapper.main(
        ["ps"], environ={}, execvp=_raise(PermissionError(13, "Permission denied")), stderr=err
    )
    assert code == 126
    assert err.getvalue().splitlines()[0] == "error: cannot run 'docker': Permission denied"


@pytest.fixture
def fake_docker(tmp_path):
    """A recording docker on PATH: writes its argv (NUL separated) and pid, exits 7."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "argv"
    script = bindir / "docker"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        printf '%s\\0' "$@" > {record}
        echo $$ > {record}.pid
        exit 7
        """)
    )
    script.chmod(0o755)
    return bindir, record


def test_real_exec_replaces_the_process_and_keeps_docker_exit_code(fake_docker):
    bindir, record = fake_docker
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", NV_GPU="0 1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvdocker2.wrapper",
            "-H",
            "unix:///x.sock",
            "run",
            "-it",
            "img",
            "sh",
        ],
        env=env,
    )
    assert proc.wait(timeout=30) == 7
    assert record.read_bytes().split(b"\0")[:-1] == [
        b"-H",
        b"unix:///x.sock",
        b"run",
        b"--runtime=nvidia",
        b"-e",
        b"NVIDIA_VISIBLE_DEVICES=0,1",
        b"-it",
        b"img",
        b"sh",
    ]
    # exec, not a child: docker ran with the wrapper's own pid
    assert int((record.parent / "argv.pid").read_text()) == proc.pid


def test_real_exec_of_version_prints_our_line_first(fake_docker):
    bindir, record = fake_docker
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "nvdocker2.wrapper", "version"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 7
    assert proc.stdout == f"NVIDIA Docker: {__version__}\n"
    assert record.read_bytes() == b"version\0"


@pytest.mark.parametrize(
    "nv_gpu",
    ["0", "0 1", "0,1", "all", "none", "void", "1:0", "GPU-3a2b1c0d-0000-1111-2222-333344445555",
     "MIG-bd2ea0a5-50a1-5a7b-b1ac-dbb7b4f7fb9c", "\u0663", "MIG-GPU-aaaa/1/0", "all,0", "0 none",
     "0;rm", "-1", "GPU-", "GPU--1", "1:", "x" * 200],
)
def test_the_wrapper_passes_exactly_what_the_hook_accepts(nv_gpu):
    """One validator: an NV_GPU the wrapper passes is a NVIDIA_VISIBLE_DEVICES the hook's
    request decision accepts, and one it refuses is one the hook refuses."""
    from nvdocker2.hook.request import RequestError, container_request
    from nvdocker2.toolkit_config import ToolkitConfig

    code, calls, _, _ = run(["run", "img"], {"NV_GPU": nv_gpu})
    value = ",".join(nv_gpu.replace(",", " ").split())
    try:
        container_request([f"NVIDIA_VISIBLE_DEVICES={value}"], True, [], ToolkitConfig())
        hook_accepts = True
    except RequestError:
        hook_accepts = False
    assert (code == 0) == hook_accepts, (nv_gpu, code)
    assert (len(calls) == 1) == hook_accepts
