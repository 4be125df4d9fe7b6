"""`make deb` and `make rpm` as an operator runs them on a fresh Debian 12: root, a copy of the
sources, none of the build tools or build dependencies installed (the Makefile installs them
with apt), then the .deb installed with apt and run.

The tree is a fresh copy of the cached bookworm tree (debootstrap minbase with Docker and
nvdocker2's run-time libraries; no dpkg-dev, debhelper, equivs, devscripts, rpm or pip). Apt in
it reaches the Debian mirror; its package lists and downloaded .debs live in
/var/cache/nvdocker2-tests/apt-bookworm (bind-mounted into the tree's /var/lib/apt/lists and
/var/cache/apt/archives), so a warm run downloads nothing but the lists' changes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest
import trees
from pkgtest import NOT_RELOADED_LINE, installed_line, script_lines

from nvdocker2 import __version__

REPO = Path(__file__).resolve().parents[2]
APT_CACHE = trees.CACHE / "apt-bookworm"
BUILD_TOOLS = ("dpkg-dev", "debhelper", "dh-python", "equivs", "devscripts", "rpm",
               "python3-pip", "python3-setuptools", "make")
SOURCE = "/root/src/nvdocker2"


@pytest.fixture
def bookworm(tmp_path):
    """A fresh bookworm tree with the apt cache mounted (one user of that cache at a time)."""
    tree = trees.open_tree("bookworm")
    trees.CACHE.mkdir(parents=True, exist_ok=True)
    with open(trees.CACHE / ".apt-bookworm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for inside, cached in (("/var/lib/apt/lists", APT_CACHE / "lists"),
                                   ("/var/cache/apt/archives", APT_CACHE / "archives")):
                (cached / "partial").mkdir(parents=True, exist_ok=True)
                mount = subprocess.run(
                    tree.namespace_argv(["mount", "--bind", str(cached), str(tree.path(inside))]),
                    capture_output=True, text=True, check=False)
                assert mount.returncode == 0, mount.stderr
            yield tree
        finally:
            tree.close()


def _copy_sources(tree: trees.Tree) -> None:
    """The checkout's tracked and new files (not ignored ones: no .venv, no dist)."""
    target = tree.path(SOURCE)
    target.mkdir(parents=True)
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True).stdout
    present = b"\0".join(f for f in files.split(b"\0") if f and (REPO / os.fsdecode(f)).exists())
    packed = subprocess.run(["tar", "-C", str(REPO), "--null", "-T", "-", "-cf", "-"],
                            input=present, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-C", str(target), "-xf", "-"], input=packed, check=True)


def _installed(tree: trees.Tree, package: str) -> bool:
    status = tree.sh(f"dpkg-query -W -f='${{db:Status-Status}}' {package} 2>/dev/null").stdout
    return status == "installed"


def _as_operator(tree: trees.Tree, command: str, timeout: float) -> str:
    """command in a root shell of the tree, without the test's DEBIAN_FRONTEND or a terminal;
    asserts exit 0 and returns what it printed (stdout and stderr)."""
    proc = tree.sh(f"cd {SOURCE} && env -u DEBIAN_FRONTEND {command} </dev/null 2>&1",
                   timeout=timeout)
    assert proc.returncode == 0, f"{command} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
    return proc.stdout


def test_make_deb_and_rpm_install_their_build_dependencies_on_a_fresh_debian_12(bookworm):
    tree = bookworm
    already = [p for p in BUILD_TOOLS if _installed(tree, p)]
    assert already == [], f"the tree is not fresh: {already} installed"
    _copy_sources(tree)
    # What a fresh machine has before anything: package lists, and make to run the Makefile.
    tree.ok("apt-get update -q", timeout=900)
    tree.ok(f"{trees.APT} install make", timeout=900)

    _as_operator(tree, "make deb", timeout=1800)
    _as_operator(tree, "make rpm", timeout=1200)
    for tool in ("dpkg-dev", "debhelper", "equivs", "devscripts", "rpm", "python3-pip"):
        assert _installed(tree, tool), f"make did not install {tool}"
    # mk-build-deps' metapackage holds the build dependencies (apt purge it to drop them).
    assert _installed(tree, "nvdocker2-build-deps")
    dist = tree.path(f"{SOURCE}/dist")
    assert sorted(p.name for p in dist.iterdir()) == [
        f"nvdocker2-{__version__}-1.noarch.rpm", f"nvdocker2_{__version__}_all.deb"]

    existed = tree.path("/etc/docker/daemon.json").exists()
    out = tree.ok(f"cd {SOURCE} && {trees.APT} install ./dist/nvdocker2_{__version__}_all.deb "
                  "2>&1", timeout=600)
    listing = json.loads(tree.ok("nvdocker2 backups --json 2>/dev/null"))
    (backup,) = [b["id"] for b in listing["backups"]]
    installed = installed_line(backup)
    if not existed:
        installed = installed.replace(f"/var/lib/nvdocker2/backups/{backup}.json",
                                      "the file did not exist before")
    # The postinst's lines, one per outcome, and never its JSON result.
    assert script_lines(out) == [installed, NOT_RELOADED_LINE], out
    assert '"changed"' not in out
    assert tree.ok("nvdocker2 --version").strip().endswith(__version__)
