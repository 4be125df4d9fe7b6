"""dockerd's command line: which daemon.json keys it already got as flags, and the checks on a
candidate file that follow from it (refused before anything is written)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvdocker2.engines.docker.service.daemon import check_candidate_against
from nvdocker2.engines.docker.service.process import (
    DockerdProcess,
    flag_conflicts,
    flags_to_keys,
    is_dockerd,
    parse_flags,
    read_pidfile,
    read_process,
)
from nvdocker2.errors import BadInput


@pytest.mark.parametrize(
    "argv, keys",
    [
        (["--log-level=info"], {"log-level"}),
        (["--log-level", "info"], {"log-level"}),
        (["-l", "debug"], {"log-level"}),
        (["-D"], {"debug"}),
        (["-Dl", "warn"], {"debug", "log-level"}),
        (["-H", "fd://"], {"hosts"}),
        (["--host=unix:///x.sock", "-H", "tcp://0.0.0.0:2375"], {"hosts"}),
        (["--label", "a=b", "--registry-mirror=https://m"], {"labels", "registry-mirrors"}),
        (["--add-runtime", "x=/bin/x"], {"runtimes"}),
        (
            ["--debug", "--iptables=false", "--default-runtime", "runc"],
            {"debug", "iptables", "default-runtime"},
        ),
        (["--containerd=/run/containerd/containerd.sock"], {"containerd"}),
        (
            ["-s", "overlay2", "-p", "/run/d.pid", "-G", "docker"],
            {"storage-driver", "pidfile", "group"},
        ),
        (
            ["--exec-opt", "native.cgroupdriver=systemd", "--log-opt", "max-size=1m"],
            {"exec-opts", "log-opts"},
        ),
    ],
)
def test_flags_map_to_the_daemon_json_keys_dockerd_compares(argv, keys):
    assert set(flags_to_keys(argv)) == keys


def test_a_bool_flag_does_not_swallow_the_next_word():
    assert parse_flags(["--debug", "--log-level", "info"]) == [
        ("debug", None),
        ("log-level", "info"),
    ]
    assert parse_flags(["--live-restore", "-H", "fd://"]) == [
        ("live-restore", None),
        ("host", "fd://"),
    ]


def _process(*flags: str) -> DockerdProcess:
    return DockerdProcess(pid=42, argv=("/usr/sbin/dockerd", *flags), exe="/usr/sbin/dockerd")


def test_conflicts_name_the_key_and_the_flag():
    candidate = {"log-level": "debug", "runtimes": {"nvidia": {"path": "/x"}}}
    assert flag_conflicts(candidate, _process("--log-level=info")) == [("log-level", "--log-level")]


def test_runtimes_in_the_file_and_add_runtime_on_the_command_line_merge():
    candidate = {"runtimes": {"nvidia": {"path": "/x"}}}
    assert flag_conflicts(candidate, _process("--add-runtime", "y=/bin/y")) == []


def test_keys_inside_a_nested_object_count_as_top_level_but_runtimes_do_not():
    candidate = {"proxies": {"log-level": "debug"}, "runtimes": {"debug": {"path": "/x"}}}
    assert flag_conflicts(candidate, _process("-D", "-l", "info")) == [("log-level", "--log-level")]


def test_a_candidate_conflicting_with_a_flag_is_bad_input_naming_file_key_and_flag(tmp_path):
    config = tmp_path / "daemon.json"
    with pytest.raises(BadInput) as err:
        check_candidate_against(
            _process("--default-runtime=runc"),
            config,
            {"runtimes": {"nvidia": {"path": "/x"}}, "default-runtime": "nvidia"},
            config,
        )
    assert str(config) in err.value.message
    assert '"default-runtime" (flag --default-runtime)' in err.value.message
    assert "systemctl edit docker" in err.value.hint


@pytest.mark.parametrize("default", ["nvidia", "io.containerd.runc.v2"])
def test_a_default_runtime_the_file_does_not_define_is_refused(tmp_path, default):
    # dockerd 20.10 refuses "nvidia" here, and crashes on a reload to io.containerd.runc.v2.
    config = tmp_path / "daemon.json"
    with pytest.raises(BadInput, match=f'"default-runtime" is "{default}"'):
        check_candidate_against(
            None, config, {"runtimes": {}, "default-runtime": default}, config, "20.10.24+dfsg1"
        )


def test_a_containerd_shim_name_is_a_valid_default_from_docker_23(tmp_path):
    config = tmp_path / "daemon.json"
    check_candidate_against(
        None, config, {"default-runtime": "io.containerd.runc.v2"}, config, "24.0.7"
    )
    with pytest.raises(BadInput):
        check_candidate_against(None, config, {"default-runtime": "nvidia"}, config, "24.0.7")


def test_runc_and_defined_runtimes_are_fine_as_default(tmp_path):
    config = tmp_path / "daemon.json"
    check_candidate_against(None, config, {"default-runtime": "runc"}, config)
    check_candidate_against(
        _process("--log-level=info"),
        config,
        {"runtimes": {"nvidia": {"path": "/x"}}, "default-runtime": "nvidia"},
        config,
    )


def test_editing_a_file_dockerd_does_not_read_is_refused(tmp_path):
    process = _process("--config-file", "/etc/docker/other.json")
    with pytest.raises(BadInput) as err:
        check_candidate_against(process, tmp_path / "daemon.json", {}, tmp_path / "daemon.json")
    assert "/etc/docker/other.json" in err.value.message
    assert err.value.hint == "pass --config /etc/docker/other.json"


def _fake_proc(
    root: Path, pid: int, comm: str, argv: list[str], exe: str, uid: int = 0
) -> Path:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    os.symlink(exe, d / "exe")
    return root / "proc"


def test_a_pidfile_naming_another_program_is_not_dockerd(tmp_path):
    proc = _fake_proc(tmp_path, 77, "nginx", ["nginx"], "/usr/sbin/nginx")
    assert not is_dockerd(77, proc)
    assert read_process(77, proc) is None
    assert not is_dockerd(78, proc)


def test_dockerd_is_recognised_by_comm_or_by_its_executable(tmp_path):
    proc = _fake_proc(tmp_path, 5, "dockerd", ["/usr/sbin/dockerd", "-D"], "/usr/sbin/dockerd")
    _fake_proc(tmp_path, 6, "exe", ["dockerd"], "/usr/bin/dockerd (deleted)")
    assert is_dockerd(5, proc) and is_dockerd(6, proc)
    process = read_process(5, proc)
    assert process.argv == ("/usr/sbin/dockerd", "-D")
    assert process.flag_keys() == {"debug": "--debug"}


def test_a_dockerd_not_owned_by_root_is_not_trusted(tmp_path):
    """Any user can run a program called dockerd (docs/reference.md §8): root trusts only root's."""
    proc = _fake_proc(tmp_path, 9, "dockerd", ["dockerd"], "/home/u/dockerd", uid=1000)
    _fake_proc(tmp_path, 10, "dockerd", ["dockerd"], "/usr/bin/dockerd")
    (proc / "10" / "status").write_text("Uid:\t0\t1000\t0\t0\n")  # setuid games count too
    assert not is_dockerd(9, proc, euid=0) and read_process(9, proc, euid=0) is None
    assert not is_dockerd(10, proc, euid=0)
    assert is_dockerd(9, proc, euid=1000), "rootless: the invoking user's own dockerd"


@pytest.mark.parametrize("text, pid", [("123\n", 123), ("", None), ("abc", None), ("-4", None)])
def test_pidfile_contents(tmp_path, text, pid):
    (tmp_path / "docker.pid").write_text(text)
    assert read_pidfile(tmp_path / "docker.pid") == pid
    assert read_pidfile(tmp_path / "missing.pid") is None
