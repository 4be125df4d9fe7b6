"""Which dockerd is trusted (SPEC §8): the peer of the API socket, its owner, and whether a
program is safe to run (no directory on its way that another user can write)."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from nvdocker2.dockerd.identity import socket_peer, unsafe_to_run, untrusted_owner
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
