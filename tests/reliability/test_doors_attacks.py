"""The doors to the host (nvdocker2/host) against the attacks a second security review
reproduced as root with an unprivileged local user, `nobody`, on the other side:

- programs planted in a PATH entry nobody owns (systemctl, journalctl, service, dockerd, the
  runtime): `install --dry-run` and `install --mode cdi --dry-run` must run none of them, and
  no config may be given nobody's runtime path;
- a Python package planted in the working directory: doctor's runtime-version probe must not
  import it;
- umask 000: `cdi generate` and `install --mode direct` must not make world-writable
  directories;
- a fake Engine API nobody serves on a unix socket: CDI mode must not believe its /info;
- test-only variables in an operator's environment: without the test suite's switch they
  must steer nothing.

Every planted program or module writes a marker when it runs as root; each test asserts the
marker is absent, plus the exit code and the bytes a user would look at.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fixtures.fake_driver import build_fake_driver

import nvdocker2
from nvdocker2 import locations
from nvdocker2.doctor.context import Context, program_version
from nvdocker2.host import run as door

from .conftest import NVDOCKER2, _need, run_cli

RT = "/usr/bin/nvidia-container-runtime"
ORIGINAL = b'{\n    "debug": false\n}\n'
PLANTED = ("systemctl", "journalctl", "service", "dockerd", "containerd", "ctr", "crictl",
           "crio", "nvidia-container-runtime")


@pytest.fixture
def nobody() -> pwd.struct_passwd:
    _need(os.geteuid() == 0, "needs root to act as another user")
    _need(shutil.which("setpriv") is not None, "needs setpriv (util-linux)")
    return pwd.getpwnam("nobody")


@pytest.fixture
def top():
    """A root-owned 0755 directory under /tmp (nobody can reach it, unlike pytest's tmp)."""
    d = Path(tempfile.mkdtemp(prefix="nvd2-doors-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def nobodys_dir(top: Path, nobody: pwd.struct_passwd, name: str) -> Path:
    d = top / name
    d.mkdir(mode=0o755)
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    return d


def plant_programs(d: Path, nobody: pwd.struct_passwd, marker: Path) -> None:
    """nobody's programs under the names nvdocker2 runs; each records that it ran."""
    for name in PLANTED:
        p = d / name
        p.write_text(f'#!/bin/sh\necho "{name} $*" >> {marker}\n'
                     'echo "Docker version 28.2.0, build planted"\n')
        p.chmod(0o755)
        os.chown(p, nobody.pw_uid, nobody.pw_gid)


def ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def fake_toolkit(top: Path) -> Path:
    """A config.toml whose driver root is the TEST FIXTURE fake driver (for CDI mode)."""
    driver = build_fake_driver(top / "driver")
    toml = top / "config.toml"
    toml.write_text(f'[nvidia-container-runtime]\ndriver-root = "{driver.root}"\n')
    return toml


# --- finding 6: programs from PATH entries other users can write ---------------------------


def planted_host(top: Path, nobody: pwd.struct_passwd) -> tuple[Path, Path, dict]:
    """(the marker, daemon.json, an environment whose PATH starts with nobody's programs)."""
    marker = top / "ran"
    evil = nobodys_dir(top, nobody, "evil")
    plant_programs(evil, nobody, marker)
    cfg = top / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    env = {"PATH": f"{evil}:{os.environ['PATH']}", "NVDOCKER2_STATE_DIR": str(top / "state")}
    return marker, cfg, env


def test_install_dry_run_runs_no_program_planted_on_path(top, nobody):
    marker, cfg, env = planted_host(top, nobody)
    r = run_cli("install", "--dry-run", "--config", str(cfg), "--runtime-path", RT,
                "--allow-missing-runtime",
                "--docker-host", f"unix://{top}/no.sock", "--no-verify", env=env)
    assert ran(marker) == "", "root ran nobody's programs: " + ran(marker)
    assert r.returncode == 0, r.stderr
    assert cfg.read_bytes() == ORIGINAL


def test_install_cdi_dry_run_runs_no_dockerd_planted_on_path(top, nobody):
    marker, cfg, env = planted_host(top, nobody)
    r = run_cli("install", "--mode", "cdi", "--cdi-spec-dir", "/etc/cdi", "--dry-run",
                "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime", "--json",
                "--reload", "none",
                "--docker-host", f"unix://{top}/no.sock",
                env=dict(env, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(fake_toolkit(top))))
    assert ran(marker) == "", "root ran nobody's programs: " + ran(marker)
    # What the planted dockerd would have said (28.2) decided nothing: the dockerd asked is
    # root's, when there is one.
    trusted = door.find("dockerd", locations.DOCKERD_PLACES)
    if trusted is not None and r.returncode == 2:
        assert f"(from {trusted} --version)" in r.stderr.splitlines()[0], r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["docker_version"] in (None, *(
            [] if trusted is None else [_version_of(trusted)]))
    assert cfg.read_bytes() == ORIGINAL


def _version_of(dockerd: str) -> str:
    out = subprocess.run([dockerd, "--version"], capture_output=True, text=True).stdout
    return out.split()[2].rstrip(",")


def test_the_runtime_path_written_into_configs_is_never_one_another_user_placed(
        top, nobody, monkeypatch):
    marker = top / "ran"
    evil = nobodys_dir(top, nobody, "evil")
    plant_programs(evil, nobody, marker)
    empty = top / "bin"  # where this nvdocker2 "is": no runtime beside it
    empty.mkdir(mode=0o755)
    monkeypatch.setattr(sys, "argv", [str(empty / "nvdocker2")])
    monkeypatch.setattr(sys, "executable", str(empty / "python3"))
    monkeypatch.setenv("PATH", f"{evil}:/nonexistent")
    path, exists = locations.default_runtime_path()
    assert not path.startswith(str(evil)), path
    assert (path, exists) == ("/usr/bin/nvidia-container-runtime", False)


# --- finding 7: doctor imports another user's Python as root --------------------------------


def test_doctor_runtime_probe_does_not_import_a_package_planted_in_the_cwd(top, nobody,
                                                                           monkeypatch):
    marker = top / "ran"
    cwd = nobodys_dir(top, nobody, "cwd")
    plant = cwd / "nvdocker2"
    plant.mkdir()
    (plant / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported')\n__version__ = '6.6.6'\n")
    os.chown(plant, nobody.pw_uid, nobody.pw_gid)
    os.chown(plant / "__init__.py", nobody.pw_uid, nobody.pw_gid)
    # A pip console script: doctor asks its interpreter which nvdocker2 it imports.
    script = top / "nvidia-container-runtime"
    script.write_text(f"#!{sys.executable}\nfrom nvdocker2.runtime import main\nmain()\n")
    script.chmod(0o755)
    monkeypatch.chdir(cwd)
    version, how = program_version(Context(), script)
    assert ran(marker) == "", "root imported nobody's module"
    assert version == nvdocker2.__version__, how


# --- finding 9: directories made under umask 000 ------------------------------------------


def _under_umask_000(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **env), preexec_fn=lambda: os.umask(0))


def _modes(top: Path, d: Path) -> dict[str, str]:
    out = {}
    while d != top:
        out[str(d)] = oct(stat.S_IMODE(d.stat().st_mode))
        d = d.parent
    return out


def test_cdi_generate_under_umask_000_makes_no_world_writable_directory(top):
    toml = fake_toolkit(top)
    out = top / "etc" / "cdi" / "nvidia.yaml"
    r = _under_umask_000("cdi", "generate", "--output", str(out),
                         env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml)})
    assert r.returncode == 0, r.stderr
    assert _modes(top, out.parent) == {str(top / "etc"): "0o755", str(out.parent): "0o755"}
    assert oct(stat.S_IMODE(out.stat().st_mode)) == "0o644"


def test_install_mode_direct_under_umask_000_makes_no_world_writable_directory(top):
    toml = top / "etc" / "nvidia-container-runtime" / "config.toml"
    r = _under_umask_000("install", "--mode", "direct", "--config", str(top / "daemon.json"),
                         "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none",
                         "--no-verify",
                         env={"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(toml),
                              "NVDOCKER2_STATE_DIR": str(top / "state")})
    assert r.returncode == 0, r.stderr
    assert 'mode = "direct"' in toml.read_text()
    assert _modes(top, toml.parent) == {str(top / "etc"): "0o755",
                                        str(toml.parent): "0o755"}


# --- finding 10: an Engine API another user serves -----------------------------------------

FAKE_DOCKER = r"""
import json, os, socketserver, sys
from http.server import BaseHTTPRequestHandler
INFO = {"ServerVersion": "28.2.0", "CDISpecDirs": ["/etc/cdi"], "Runtimes": {},
        "DefaultRuntime": "runc", "DiscoveredDevices": []}
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"OK" if self.path == "/_ping" else json.dumps(INFO).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
    def address_string(self): return "x"
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
s = S(sys.argv[1], H); os.chmod(sys.argv[1], 0o777); s.serve_forever()
"""


def test_cdi_mode_does_not_believe_an_engine_api_another_user_serves(top, nobody):
    home = nobodys_dir(top, nobody, "sock")
    sock = home / "docker.sock"
    server = subprocess.Popen(
        ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
         os.path.realpath(sys.executable), "-I", "-c", FAKE_DOCKER, str(sock)])
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert time.monotonic() < deadline and server.poll() is None, "no fake server"
            time.sleep(0.05)
        cfg = top / "daemon.json"
        cfg.write_bytes(ORIGINAL)
        r = run_cli("install", "--mode", "cdi", "--cdi-spec-dir", "/etc/cdi", "--dry-run",
                    "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
                    "--reload", "none",
                    "--docker-host", f"unix://{sock}",
                    env={"NVDOCKER2_STATE_DIR": str(top / "state"),
                         "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(fake_toolkit(top))})
    finally:
        server.kill()
        server.wait()
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0] == (f"error: {sock} is served by a process nvdocker2 does not trust (pid "
                        f"{server.pid} belongs to uid {nobody.pw_uid}, not root); nothing was "
                        "changed"), r.stderr
    assert lines[1].startswith("hint: point --docker-host at the socket of root's dockerd")
    assert cfg.read_bytes() == ORIGINAL


# --- finding 11: test-only variables in an operator's environment -------------------------


def test_without_the_test_switch_no_test_variable_runs_anything(top):
    """The packaged nvdocker2 runs on the system interpreter, outside any venv: the test
    suite's switch cannot be on, whatever the environment says."""
    _need(os.geteuid() == 0, "runs a root install")
    marker = top / "ran"
    planted = top / "dockerd"
    planted.write_text(f"#!/bin/sh\necho dockerd >> {marker}\n")
    planted.chmod(0o755)
    cfg = top / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    repo = Path(nvdocker2.__file__).resolve().parent.parent
    main = f"import sys; sys.path.insert(0, {str(repo)!r}); from nvdocker2.cli import main; main()"
    r = subprocess.run(
        ["/usr/bin/python3", "-c", main, "install", "--config", str(cfg), "--runtime-path", RT,
         "--allow-missing-runtime",
         "--reload", "none", "--no-verify"],
        capture_output=True, text=True, timeout=60, cwd="/",
        env=dict(os.environ, NVDOCKER2_STATE_DIR=str(top / "state"),
                 NVDOCKER2_TEST_RUN_BEFORE_RENAME=f"echo shell >> {marker}",
                 NVDOCKER2_TEST_PAUSE_BEFORE_RENAME="1",
                 NVDOCKER2_DOCKERD=str(planted)))
    assert ran(marker) == "", "an environment variable made root run: " + ran(marker)
    assert r.returncode == 0, r.stderr
    assert "test hook" not in r.stderr
    assert b'"nvidia"' in cfg.read_bytes()
