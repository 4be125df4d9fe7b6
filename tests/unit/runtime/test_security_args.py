"""The shim reads a runc command line the way runc 1.1 itself does (docs/reference.md §3).

Each argv is given to the REAL runc, in a directory where every candidate bundle's config.json
names a missing rootfs `rootfs-<BUNDLE>`: runc's "invalid rootfs: stat …/rootfs-X" error tells
which bundle it would have created the container from, or that it would not create at all
(usage error, help, version). The shim's `parse_args` must agree wherever runc creates, and
must not claim a `create` that runc only prints help or its version for.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

from nvdocker2.runtime.args import parse_args

RUNC = shutil.which("runc")

CASES = [
    "create --bundle A c1", "create c1 --bundle A", "create --bundle create c1",
    "--log /dev/null create --bundle B c1", "--log create state c1", "create -- c1",
    "-- create -b B c1", "-debug create -b B c1", "--debug=false create -b B c1",
    "--systemd-cgroup create -b B c1", "--rootless true create -b B c1",
    "create --bundle=A --bundle B c1", "create --pid-file -b c1", "create --pid-file=-b -b A c1",
    "--criu x create -b A c1", "create --console-socket=/x --bundle A c1",
    "create --no-pivot=true -b A c1", "create --preserve-fds 0 -b A c1", "create -bundle=B c1",
    "create --bundle= c1", "create -b '' c1", "--log-format json create -b A c1",
    "--log-format=json create -b B c1", "- create -b A c1", "create - -b A",
    "--root create create -b B c1", "create --bundle A --bundle=B c1 --bundle create",
    "create c1 --", "help create", "delete create", "state create", "-b A create c1",
    "--debug create --bundle=B c1",
    # help and version: runc prints them and creates nothing
    "--help create -b A c1", "-h create -b A c1", "--version create -b A c1",
    "-v create -b A c1", "create --help -b A c1", "create -h c1", "create -b A c1 --help",
    "--help=false create -b A c1", "-version=0 create -b B c1",
    "--log --help create -b B c1", "create --pid-file --help -b A c1",
]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    if RUNC is None:
        if os.environ.get("CI") == "true":
            pytest.fail("runc is not installed")
        pytest.skip("runc is not installed")
    root = tmp_path_factory.mktemp("runc-argv")
    for name in ("A", "B", "create", "."):
        (root / name).mkdir(exist_ok=True)
        label = "CWD" if name == "." else name
        (root / name / "config.json").write_text(json.dumps({
            "ociVersion": "1.0.2", "process": {"args": ["true"], "cwd": "/"},
            "root": {"path": f"rootfs-{label}"}}))
    return root


def _runc_bundle(root, argv: list[str]) -> str | None:
    proc = subprocess.run([RUNC, "--root", str(root / "state"), *argv], cwd=root,
                          capture_output=True, text=True, timeout=30)
    found = re.search(r"invalid rootfs: stat \S*/rootfs-(\w+)", proc.stdout + proc.stderr)
    return found.group(1) if found else None


@pytest.mark.parametrize("line", CASES)
def test_shim_and_real_runc_agree_on_create_and_bundle(bundles, line):
    argv = shlex.split(line)
    runc = _runc_bundle(bundles, argv)
    is_create, bundle = parse_args(["nvidia-container-runtime", *argv], cwd=str(bundles))
    if runc is not None:
        label = "CWD" if bundle == str(bundles) else os.path.basename(bundle or "")
        assert (is_create, label) == (True, runc)
    elif re.search(r"(^|\s)(-h|--help|-v|--version)(\s|$)", line):
        assert is_create is False, "runc prints help/version here and creates nothing"
