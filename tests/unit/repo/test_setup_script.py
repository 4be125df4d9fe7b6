"""scripts/setup.sh: the demo installs only what the demo needs, the tests everything, and a
person sees what is installed and why while apt works. Run on a copy of the script with
stand-ins for dpkg-query, apt-get and id (this machine's packages are never touched) and a
recording .venv/bin/python."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DEMO_PACKAGES = {
    "docker.io", "containerd", "runc", "busybox-static", "iproute2", "python3", "python3-venv",
    "python3-pip", "python3-setuptools", "python3-typer", "python3-rich", "python3-jsonschema",
    "python3-filelock", "python3-packaging", "python3-tomli", "python3-tomlkit", "python3-yaml",
}
TEST_ONLY = {
    "python3-pytest", "python3-hypothesis", "dpkg-dev", "debhelper", "dh-python",
    "pybuild-plugin-pyproject", "python3-all", "rpm", "lintian", "equivs", "devscripts", "make",
    "git", "podman", "uidmap", "rootlesskit", "slirp4netns", "python3-grpcio", "lxc",
}

FAKE_APT = """#!/bin/sh
echo "$*" >> "$SETUP_LOG/apt-get"
case " $* " in
    *" install "*)
        n=0
        for p in "$@"; do
            case "$p" in -* | install | DPkg::*) continue ;; esac
            n=$((n + 1))
            echo "Get:$n http://deb.debian.org/debian bookworm/main amd64 $p amd64 1.0-1 [12.3 kB]"
        done
        for p in "$@"; do
            case "$p" in -* | install | DPkg::*) continue ;; esac
            echo "Unpacking $p (1.0-1) ..."
            echo "Setting up $p (1.0-1) ..."
        done ;;
esac
"""
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$SETUP_LOG/python"
[ "$*" = "-c import vermin" ] && exit 1
exit 0
"""


def run_setup(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/setup.sh", repo / "scripts/setup.sh")
    # The pinned tool venvs are made by their own scripts (tested by running them on the
    # tests' machine); here they only record that they were asked.
    for script in ("pinned-venv", "ansible-test"):
        fake = repo / f"scripts/{script}.sh"
        fake.write_text(f'#!/bin/sh\necho "$*" >> "$SETUP_LOG/{script}"\n')
        fake.chmod(0o755)
    (repo / ".venv/bin").mkdir(parents=True)
    fakes = {"apt-get": FAKE_APT, "dpkg-query": "#!/bin/sh\nexit 1\n",
             "id": "#!/bin/sh\necho 0\n", ".venv/bin/python": FAKE_PYTHON}
    (tmp_path / "bin").mkdir()
    for name, text in fakes.items():
        path = repo / name if name.startswith(".venv") else tmp_path / "bin" / name
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "log"
    log.mkdir()
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin", SETUP_LOG=str(log))
    proc = subprocess.run(["bash", str(repo / "scripts/setup.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)
    return proc, log


def installed(log: Path) -> set[str]:
    (line,) = [x for x in (log / "apt-get").read_text().splitlines() if " install " in x]
    return {w for w in line.split() if not w.startswith("-") and w != "install"
            and not w.startswith("DPkg::")}


def test_demo_installs_only_what_the_demo_needs_and_says_why(tmp_path):
    proc, log = run_setup(tmp_path, "demo")
    assert proc.returncode == 0, proc.stderr
    assert installed(log) == DEMO_PACKAGES
    out = proc.stdout
    assert ("setup: to install, for a private dockerd and a tiny busybox image to run "
            "containers in: docker.io containerd runc busybox-static iproute2\n") in out
    assert "for nvdocker2's libraries, at the versions the .deb depends on: python3-typer" in out
    assert "  downloaded 1: docker.io [12.3 kB]\n" in out
    assert "  set up python3-tomli\n" in out
    assert "Unpacking" not in out
    assert not any(p in out.split() for p in TEST_ONLY)
    assert "vermin" not in (log / "python").read_text()
    assert "ruff" not in (log / "python").read_text()
    assert not (log / "pinned-venv").exists() and not (log / "ansible-test").exists()
    assert out.splitlines()[-1].startswith("setup: ready for the demo (")


def test_tests_install_everything_the_tests_need(tmp_path):
    proc, log = run_setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert installed(log) == DEMO_PACKAGES | TEST_ONLY
    assert "for the test runner and its property-based tests: python3-pytest" in proc.stdout
    calls = (log / "python").read_text()
    assert "-m pip install -q vermin==1.9.2" in calls
    assert "-m pip install -q ruff==0.17.6" in calls
    assert "-c import nvdocker2, typer, rich, jsonschema, filelock, packaging, pytest, " \
           "hypothesis, vermin, yaml" in calls
    assert (log / "pinned-venv").read_text() == (".venv-mypy mypy 1.19.1\n"
                                                 ".venv-kubernetes kubernetes-validate 1.37.0\n")
    assert (log / "ansible-test").read_text() == "venv\n"  # .venv-ansible: make check uses it


@pytest.mark.parametrize("profile", ["bogus", "--demo"])
def test_an_unknown_profile_is_refused(tmp_path, profile):
    proc, log = run_setup(tmp_path, profile)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: unknown setup profile '{profile}'",
        "hint: scripts/setup.sh demo (what the demo needs) or scripts/setup.sh tests (everything)",
    ]
    assert not (log / "apt-get").exists()
