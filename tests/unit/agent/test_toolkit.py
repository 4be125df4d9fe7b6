"""`nvdocker2 agent --install-toolkit DIR` on real files: the toolkit copied into a host root
(docker engine, daemon.json, `--reload none --no-verify`), the engine pointed at it, all of it
removed on SIGTERM with the host root byte-exact; refusals for a hostile DIR or no python3;
and the launchers written into a directory of this machine run from anywhere.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ..agent_proc import AgentProc  # noqa: E402

import nvdocker2  # noqa: E402
from nvdocker2 import __version__  # noqa: E402
from nvdocker2.agent import toolkit  # noqa: E402

ORIGINAL = b'{\n  "log-level": "warn"\n}\n'
DIR = "/usr/local/nvidia/toolkit"
STATE = "var/lib/nvdocker2"  # the agent's own lock and journal, kept by design


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def host(tmp_path):
    """A node root: daemon.json, /usr/bin/python3 -> python3.11 with its standard library
    (a stand-in file: the agent reads, never runs it, under --no-verify), /var/lib, /usr
    without /usr/local."""
    root = tmp_path / "host"
    (root / "etc" / "docker").mkdir(parents=True)
    (root / "etc" / "docker" / "daemon.json").write_bytes(ORIGINAL)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "var" / "lib").mkdir(parents=True)  # a node has it; the agent's state goes below
    (root / "usr" / "lib" / "python3.11").mkdir(parents=True)
    (root / "usr" / "lib" / "python3.11" / "os.py").write_bytes(b"# os\n")
    py = root / "usr" / "bin" / "python3.11"
    py.write_bytes(b"\x7fELF stand-in\n")
    py.chmod(0o755)
    os.symlink("python3.11", root / "usr" / "bin" / "python3")
    for d in (root, *[p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()]):
        d.chmod(0o755)
    return root


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under `root` (the agent's state directory aside): kind, mode, owner,
    bytes or link target."""
    out: dict[str, tuple] = {}
    for d, subdirs, names in os.walk(root):
        for name in subdirs + names:
            p = Path(d) / name
            rel = str(p.relative_to(root))
            if rel == STATE or rel.startswith(STATE + "/"):
                continue
            st = os.lstat(p)
            body = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                    p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                        st.st_gid, body)
    return out


def _agent(host: Path, tmp_path: Path, *extra: str, name: str = "a") -> AgentProc:
    args = ["--host-root", str(host), "--reload", "none", "--no-verify", "--poll", "0.5",
            "--install-toolkit", DIR, *extra]
    return AgentProc(args, tmp_path / f"{name}.log")


def _agent_refused(host: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nvdocker2", "agent", "--host-root", str(host),
                           "--reload", "none", "--no-verify", "--install-toolkit", DIR, *extra],
                          capture_output=True, text=True, timeout=60)


def _package_files() -> set[str]:
    pkg = Path(nvdocker2.__file__).parent
    return {f"lib/nvdocker2/{p.relative_to(pkg)}" for p in pkg.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_toolkit_copied_engine_pointed_at_it_and_all_removed_on_stop(host, tmp_path):
    before = tree(host)
    a = _agent(host, tmp_path)
    a.wait_for("ready:")
    kit = host / DIR.lstrip("/")
    doc = json.loads((host / "etc" / "docker" / "daemon.json").read_bytes())
    assert doc["runtimes"]["nvidia"]["path"] == f"{DIR}/nvidia-container-runtime", doc

    got = {str(p.relative_to(kit)): stat.S_IMODE(os.lstat(p).st_mode) for p in kit.rglob("*")}
    dirs = {k for k in got if (kit / k).is_dir()}
    programs = {"nvidia-container-runtime", "nvidia-container-runtime-hook"}
    config = ".config/nvidia-container-runtime/config.toml"
    want_files = programs | {config, ".nvdocker2-toolkit.json"} | _package_files()
    assert set(got) - dirs == want_files
    assert all(got[d] == 0o755 for d in dirs)
    assert all(got[f] == (0o755 if f in programs else 0o644) for f in want_files)
    for d in ("usr/local", "usr/local/nvidia", "usr/local/nvidia/toolkit"):
        assert stat.S_IMODE(os.lstat(host / d).st_mode) == 0o755
    src = Path(nvdocker2.__file__).parent / "runtime" / "__init__.py"
    assert (kit / "lib/nvdocker2/runtime/__init__.py").read_bytes() == src.read_bytes()
    runtime = (kit / "nvidia-container-runtime").read_text()
    assert "py=/usr/bin/python3\n" in runtime
    assert f'["{DIR}/lib"]' in runtime
    assert f"NVIDIA_CONTAINER_RUNTIME_CONFIG={DIR}/{config}\n" in runtime
    assert 'mode = "direct"' in (kit / config).read_text()
    assert not (host / "usr/local/nvidia/toolkit.new").exists()

    assert a.stop() == 0, a.lines()
    assert a.events("toolkit removed from")
    assert tree(host) == before


def test_existing_usr_local_kept_and_a_link_inside_the_host_root_followed(host, tmp_path):
    """Fedora CoreOS's /usr/local -> ../var/usrlocal: the toolkit lands in the host root's
    var/usrlocal (never this machine's), which stays, with /usr/local, after the stop."""
    (host / "var" / "usrlocal").mkdir(mode=0o755)
    os.symlink("../var/usrlocal", host / "usr" / "local")
    before = tree(host)
    a = _agent(host, tmp_path)
    a.wait_for("ready:")
    assert (host / "var/usrlocal/nvidia/toolkit/nvidia-container-runtime").is_file()
    assert a.stop() == 0, a.lines()
    assert tree(host) == before


def test_engine_install_failing_removes_the_copied_toolkit(host, tmp_path):
    bad = b'{\n  "log-level": "warn",\n}\n'  # a trailing comma: install refuses it
    (host / "etc" / "docker" / "daemon.json").write_bytes(bad)
    before = tree(host)
    a = _agent(host, tmp_path, "--backoff", "600")
    a.wait_for("install failed:")
    assert a.events("toolkit copied into")
    assert a.events("toolkit removed from")
    assert tree(host) == before
    assert a.stop() == 2, a.lines()  # uninstall refuses the broken file too, and changes nothing
    assert tree(host) == before


def _hostile_link(host: Path) -> str:
    (host / "tmp-nobody").mkdir(mode=0o755)
    os.symlink(str(host / "tmp-nobody"), host / "usr" / "local")
    os.lchown(host / "usr" / "local", _nobody(), -1)
    return "/usr/local on the node belongs to uid"


def _group_writable(host: Path) -> str:
    (host / "usr").chmod(0o775)
    return "/usr on the node is writable by its group or others (mode 0775)"


def _deepest_group_writable(host: Path) -> str:
    """The deepest directory that exists on DIR's way, where the agent would make the rest."""
    (host / "usr" / "local").mkdir()
    (host / "usr" / "local").chmod(0o775)
    return "/usr/local on the node is writable by its group or others (mode 0775)"


def _no_python(host: Path) -> str:
    (host / "usr" / "bin" / "python3").unlink()
    return "the node has no /usr/bin/python3"


def _old_python(host: Path) -> str:
    (host / "usr" / "bin" / "python3").unlink()
    (host / "usr" / "bin" / "python3.11").rename(host / "usr" / "bin" / "python3.8")
    (host / "usr" / "lib" / "python3.11").rename(host / "usr" / "lib" / "python3.8")
    os.symlink("python3.8", host / "usr" / "bin" / "python3")
    return "/usr/bin/python3 on the node is Python 3.8; the runtime needs 3.9 or later"


def _python_of_nobody(host: Path) -> str:
    os.chown(host / "usr" / "bin" / "python3.11", _nobody(), -1)
    return "/usr/bin/python3 on the node belongs to uid"


def _not_ours(host: Path) -> str:
    (host / "usr" / "local" / "nvidia" / "toolkit").mkdir(parents=True)
    for d in ("usr/local", "usr/local/nvidia", "usr/local/nvidia/toolkit"):
        (host / d).chmod(0o755)
    (host / "usr" / "local" / "nvidia" / "toolkit" / "nvidia-container-runtime").write_bytes(
        b"#!/bin/sh\n")
    return f"{DIR} exists and is not a toolkit nvdocker2 installed"


@pytest.mark.parametrize("plant", [_hostile_link, _group_writable, _deepest_group_writable,
                                   _no_python, _old_python, _python_of_nobody, _not_ours])
def test_hostile_dir_or_python_refused_before_anything_changes(host, plant):
    want = plant(host)
    before = tree(host)
    p = _agent_refused(host)
    assert p.returncode == 3, (p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert lines[0].startswith(f"error: --install-toolkit {DIR}: "), p.stderr
    assert want in lines[0], p.stderr
    assert lines[1].startswith("hint: "), p.stderr
    assert tree(host) == before
    assert not (host / STATE).exists()


def test_runtime_path_with_install_toolkit_is_refused(host):
    p = _agent_refused(host, "--runtime-path", "/usr/bin/nvidia-container-runtime")
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: --install-toolkit and --runtime-path"), p.stderr


def test_launchers_run_from_elsewhere_with_a_hostile_path_and_cwd(tmp_path):
    """On this machine as the node (host root /): the runtime launcher runs with the node's
    python3 and the package copied under DIR, whatever PATH holds and whatever the cwd
    plants; the agent's own check (verify) says the same."""
    base = tmp_path / "node"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    t = toolkit.Toolkit(dir=str(base / "toolkit"))
    assert toolkit.install(t).changed
    toolkit.verify(t)
    assert not toolkit.install(t).changed

    evil = tmp_path / "evil"
    (evil / "nvdocker2").mkdir(parents=True)
    marker = tmp_path / "ran"
    planted = f"open({str(marker)!r}, 'w').write('x')\n"
    (evil / "nvdocker2" / "__init__.py").write_text(planted + "__version__ = 'evil'\n")
    for name in ("python3", "sh", "stat", "readlink", "runc"):
        (evil / name).write_text(f"#!/bin/sh\necho planted > {marker}\n")
        (evil / name).chmod(0o777)
    env = {"PATH": str(evil), "PYTHONPATH": str(evil), "NVIDIA_CONTAINER_RUNTIME_CONFIG":
           str(evil / "config.toml")}
    p = subprocess.run([t.runtime, "--version"], cwd=evil, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == \
        f"nvidia-container-runtime version {__version__} (nvdocker2)"
    assert not marker.exists()

    assert toolkit.remove(t)
    assert sorted(os.listdir(base)) == []
