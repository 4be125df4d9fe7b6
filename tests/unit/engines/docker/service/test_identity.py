"""Which dockerd is trusted (reference §8): the peer of the API socket, its owner, and whether a
program is safe to run (no directory on its way that another user can write)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nvdocker2.engines.peer import socket_peer, untrusted_owner
from nvdocker2.host.run import unsafe_to_run
from nvdocker2.doctor.host import run_command

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _script(path, marker):
    path.write_text(f"#!/bin/sh\ntouch {marker}\necho ran\n")
    path.chmod(0o755)
    return path


def test_the_socket_peer_is_the_process_that_listens(tmp_path):
    path = tmp_path / "api.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        peer = socket_peer(path)
    finally:
        server.close()
    assert peer is not None and (peer.pid, peer.uid) == (os.getpid(), os.geteuid())
    assert socket_peer(tmp_path / "missing.sock") is None
    assert socket_peer(path) is None  # closed: nobody serves it


def test_owner_must_be_root_or_the_rootless_user(tmp_path):
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "status").write_text("Name:\tdockerd\nUid:\t1000\t1000\t1000\t1000\n")
    assert untrusted_owner(7, proc, euid=0) == "pid 7 belongs to uid 1000, not root"
    assert untrusted_owner(7, proc, euid=1000) is None
    assert untrusted_owner(8, proc, euid=0) == "the owner of pid 8 cannot be read"
    assert untrusted_owner(8, proc, euid=0, uid=0) is None  # known from SO_PEERCRED


@needs_root
def test_a_program_another_user_could_replace_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may replace what is in it
    prog = _script(shared / "docker-runc", marker)
    res = run_command([str(prog), "--version"], 5)
    assert res.rc is None and res.error == f"not run: {shared} is writable by other users"
    assert not marker.exists()

    shared.chmod(0o1777)  # sticky, like /tmp: a root-owned entry cannot be replaced
    assert unsafe_to_run(prog) is None
    assert run_command([str(prog)], 5).stdout == "ran\n" and marker.exists()
    marker.unlink()

    os.chown(prog, NOBODY, NOBODY)  # but nobody's own file there can be anything
    assert unsafe_to_run(prog) == f"{shared} is writable by other users"
    assert run_command([str(prog)], 5).error.startswith("not run:")
    assert not marker.exists()


@needs_root
def test_a_symlink_is_followed_and_its_target_checked(tmp_path):
    marker = tmp_path / "ran"
    safe = tmp_path / "safe"
    safe.mkdir()
    evil = tmp_path / "evil"
    evil.mkdir()
    os.chown(evil, NOBODY, NOBODY)
    target = _script(evil / "runc", marker)
    (safe / "runc").symlink_to(target)
    assert unsafe_to_run(safe / "runc") == f"{evil} belongs to uid {NOBODY}"
    os.chown(evil, 0, 0)
    target.chmod(0o757)
    assert unsafe_to_run(safe / "runc") == f"{target} is writable by other users"
    target.chmod(0o755)
    assert unsafe_to_run(safe / "runc") is None
    assert stat.S_ISLNK(os.lstat(safe / "runc").st_mode)


def _listening_dockerd(d, user=None):
    """A process whose comm is `dockerd` (a link to this Python) serving a unix socket."""
    d.chmod(0o755)
    link = d / "dockerd"
    link.symlink_to(os.path.realpath(sys.executable))
    sock = d / "api.sock"
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n"
        "print('ready', flush=True)\n"
        "while True: s.accept()[0].close()\n"
    )
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    if user:
        os.chown(d, NOBODY, NOBODY)
    proc = subprocess.Popen([*prefix, str(link), "-c", code, str(sock)], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc, sock


@needs_root
def test_identify_takes_the_socket_peer_and_refuses_a_hint_or_owner_that_disagrees(tmp_path):
    from nvdocker2.engines.docker.service.api import parse_docker_host
    from nvdocker2.engines.docker.service.process import identify
    from nvdocker2.errors import EnvironmentProblem

    procs = []
    shared = Path(tempfile.mkdtemp(prefix="nvd2-user-", dir="/tmp"))  # where nobody can reach
    try:
        served, sock = _listening_dockerd(tmp_path)
        procs.append(served)
        host = parse_docker_host(f"unix://{sock}", {})
        found = identify(host, None, "the pidfile")
        assert found.by_socket and found.process.pid == served.pid
        assert identify(host, served.pid, "the pidfile").process.pid == served.pid
        with pytest.raises(EnvironmentProblem) as err:
            identify(host, os.getpid(), "/run/docker.pid")
        assert err.value.exit_code == 3
        assert err.value.message.startswith(
            f"/run/docker.pid names pid {os.getpid()}, but the dockerd serving {sock} is pid "
            f"{served.pid}"
        )
        users, user_sock = _listening_dockerd(shared, user=str(NOBODY))
        procs.append(users)
        with pytest.raises(EnvironmentProblem) as err:
            identify(parse_docker_host(f"unix://{user_sock}", {}), None, "the pidfile")
        assert f"belongs to uid {NOBODY}, not root" in err.value.message
        assert err.value.hint
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(shared, ignore_errors=True)


@needs_root
def test_dockerd_validate_never_runs_a_dockerd_another_user_could_have_planted(
    tmp_path, monkeypatch
):
    from nvdocker2.engines.docker.daemonjson import validate

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    marker = tmp_path / "ran"
    _script(shared / "dockerd", marker)
    monkeypatch.setenv("PATH", f"{shared}:/usr/bin:/usr/sbin:/bin:/sbin")
    found = validate.find_dockerd()
    assert found != str(shared / "dockerd")
    validate.dockerd_validate(tmp_path / "daemon.json")
    assert not marker.exists()
