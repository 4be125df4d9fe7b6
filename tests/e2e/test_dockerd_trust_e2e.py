"""Which dockerd is trusted (docs/reference.md §8), attacked for real.

An unprivileged local user (nobody, through setpriv) plants processes that look like dockerd:
one with argv[0] `dockerd`, `-H unix://SOCK` and a PATH of its own directory holding a
`docker-runc`; one whose comm is `dockerd`, named by a stale pidfile, whose executable is
replaced after it started. Every planted program leaves a marker file when run: root must
never run one. The last tests drive a private dockerd through the systemctl stand-in without
a MainPID and without a journal, where only the dockerd behind the socket can prove anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from dockerd_cli import RUNTIME, make_stand_ins, nvdocker2, systemd_env, tcp_host

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
NOBODY = 65534


@pytest.fixture
def user_dir(e2e_prerequisites):
    """A directory of the unprivileged user's own (in /tmp, where nobody can reach it)."""
    if shutil.which("setpriv") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("setpriv (util-linux) is needed", pytrace=False)
        pytest.skip("setpriv (util-linux) is needed")
    d = Path(tempfile.mkdtemp(prefix="nvd2-user-", dir="/tmp"))
    os.chown(d, NOBODY, NOBODY)
    d.chmod(0o755)
    started: list[subprocess.Popen] = []
    yield d, started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    shutil.rmtree(d, ignore_errors=True)


def _planted_program(path: Path, marker: Path, output: str) -> Path:
    """A script of the user's that leaves `marker` when someone runs it."""
    path.write_text(f"#!/bin/sh\ntouch {marker}\necho '{output}'\n")
    path.chmod(0o755)
    os.chown(path, NOBODY, NOBODY)
    return path


def _wait_for(predicate, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


SERVE = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.bind(sys.argv[-1][len('unix://'):])\n"
    "s.listen(8)\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    c.close()\n"
)


def test_doctor_as_root_runs_nothing_from_a_user_process_posing_as_dockerd(user_dir, tmp_path):
    """Issue 12 (high): argv[0] `dockerd`, `-H unix://SOCK`, PATH = the user's bin with a
    docker-runc; root runs `nvdocker2 doctor --docker-host unix://SOCK`. Without the fix,
    doctor took it for dockerd and ran the user's docker-runc --version as root."""
    d, started = user_dir
    userbin = d / "bin"
    userbin.mkdir()
    os.chown(userbin, NOBODY, NOBODY)
    marker = tmp_path / "planted-program-ran"
    _planted_program(userbin / "docker-runc", marker, "runc version 1.1.5")
    sock = d / "docker.sock"
    started.append(
        subprocess.Popen(
            [*AS_NOBODY, "/usr/bin/env", "-i", f"PATH={userbin}", "/bin/bash", "-c",
             'exec -a dockerd /usr/bin/python3 -c "$0" -H "$1"', SERVE, f"unix://{sock}"],
            stdin=subprocess.DEVNULL,
        )
    )
    _wait_for(sock.exists, "the planted socket")

    proc = nvdocker2(None, "doctor", "--docker-host", f"unix://{sock}", "--json")

    assert not marker.exists(), "doctor ran a program the user planted"
    assert proc.returncode == 1, proc.stderr
    results = {r["id"]: r for r in json.loads(proc.stdout)["checks"]}
    trusted = results["dockerd.trusted"]
    assert trusted["status"] == "fail"
    assert f"belongs to uid {NOBODY}, not root" in trusted["detail"]
    assert trusted["hint"]
    assert str(d) not in results["runtime.low-level"]["detail"]


def test_install_neither_runs_nor_signals_a_users_dockerd_named_by_a_stale_pidfile(
    user_dir, tmp_path
):
    """Issue 12 (medium): what postinst runs (`install --json --no-verify --reload auto`)
    with /var/run/docker.pid naming a user's process whose comm is `dockerd`. Without the fix
    it ran /proc/PID/exe --version (the user replaced that file after starting it) and sent
    the process SIGHUP."""
    d, started = user_dir
    marker = tmp_path / "planted-program-ran"
    fake = d / "dockerd"
    shutil.copy("/bin/sleep", fake)
    os.chown(fake, NOBODY, NOBODY)
    user_proc = subprocess.Popen([*AS_NOBODY, str(fake), "1000"], stdin=subprocess.DEVNULL)
    started.append(user_proc)
    comm = Path(f"/proc/{user_proc.pid}/comm")
    _wait_for(lambda: comm.read_text().strip() == "dockerd", "the planted dockerd")
    fake.unlink()  # /proc/PID/exe now reads "… (deleted)"; the name holds the user's script
    _planted_program(fake, marker, "Docker version 99.0.0, build planted")
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(f"{user_proc.pid}\n")
    config = tmp_path / "daemon.json"
    before = b'{\n    "default-runtime": "io.containerd.runc.v2"\n}\n'
    config.write_bytes(before)

    def install(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "nvdocker2", "install", "--json", "--no-verify",
             "--reload", mode, "--config", str(config), "--pidfile", str(pidfile),
             "--runtime-path", RUNTIME, "--allow-missing-runtime"],
            capture_output=True, text=True, timeout=120, check=False,
            env=dict(os.environ, NVDOCKER2_STATE_DIR=str(tmp_path / "state")),
        )

    proc = install("auto")
    assert not marker.exists(), "install ran the user's program"
    assert user_proc.poll() is None, "install signalled the user's process"
    # This host's own dockerd (20.10) refuses a shim name as default-runtime: exit 2.
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith('error: '), proc.stderr
    assert config.read_bytes() == before

    # Asked to signal the pidfile's dockerd, it finds none it may signal: exit 3.
    config.write_bytes(b"{}\n")
    proc = install("signal")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"error: {pidfile} names no running dockerd"), proc.stderr
    assert "hint: " in proc.stderr
    assert not marker.exists() and user_proc.poll() is None
    assert config.read_bytes() == b"{}\n"


@pytest.fixture
def stand_ins(tmp_path):
    return make_stand_ins(tmp_path)


def _refused_reload_setup(make_dockerd, extra_args=()):
    """A dockerd that already runs the nvidia runtime, whose file an admin then edited to
    hold `storage-driver`, also given as a flag: a reload of that file is refused."""
    entry = {"runtimes": {"nvidia": {"path": RUNTIME}}}
    daemon = make_dockerd(extra_args, config=json.dumps(entry).encode())
    assert daemon.info()["Runtimes"]["nvidia"]["path"] == RUNTIME
    daemon.config_file.write_text('{\n    "storage-driver": "vfs"\n}\n')
    return daemon


def test_a_reload_dockerd_would_refuse_is_caught_through_the_socket_without_mainpid(
    make_dockerd, stand_ins
):
    """Issue 12: systemd runs dockerd but shows no MainPID, the journal keeps nothing, and
    /info already shows the runtime. Without the fix the refused reload was `verified: yes`
    and the file left behind stops dockerd at its next start. The dockerd serving the socket
    is found by SO_PEERCRED and its flags refuse the file before anything is written."""
    daemon = _refused_reload_setup(make_dockerd)
    before = daemon.config_file.read_bytes()
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_HIDE_PID="1", NVD2_FAKE_NO_JOURNAL="1")

    proc = nvdocker2(daemon, "install", "--runtime-path", RUNTIME, "--allow-missing-runtime",
                     "--reload", "systemd",
                     "--json", env=env)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and '"storage-driver" (flag --storage-driver)' in lines[0]
    assert lines[1].startswith("hint: ")
    assert daemon.config_file.read_bytes() == before
    assert "Got signal to reload configuration" not in daemon.log_file.read_text()


def test_verified_only_on_evidence(make_dockerd, stand_ins):
    """reference §8 "verified means proven": /info already showed the runtime, systemd shows no
    MainPID and no journal keeps dockerd's words. Through tcp nothing identifies the dockerd,
    so the install is `verified: false` with a warning; through the unix socket the dockerd
    behind it passed the flags check with the file, which is the evidence."""
    flag, tcp = tcp_host()
    daemon = make_dockerd([flag],
                          config=json.dumps({"runtimes": {"nvidia": {"path": RUNTIME}}}).encode())
    env = systemd_env(stand_ins, daemon, NVD2_FAKE_HIDE_PID="1", NVD2_FAKE_NO_JOURNAL="1")

    daemon.config_file.write_text("{}\n")
    proc = nvdocker2(daemon, "install", "--runtime-path", RUNTIME, "--allow-missing-runtime",
                     "--reload", "systemd",
                     "--docker-host", tcp, "--json", env=env,
                     daemon_flags=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["changed"] is True and out["verified"] is False
    assert any("not verified" in w for w in out["warnings"]), out["warnings"]
    assert json.loads(daemon.config_file.read_text())["runtimes"]["nvidia"]["path"] == RUNTIME

    daemon.config_file.write_text("{}\n")
    proc = nvdocker2(daemon, "install", "--runtime-path", RUNTIME, "--allow-missing-runtime",
                     "--reload", "systemd",
                     "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["changed"] is True and out["verified"] is True, out
    assert not any("not verified" in w for w in out["warnings"])

