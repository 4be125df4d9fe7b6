"""Reading runc/crun command lines (docs/reference.md §3): `create` and its bundle, nothing else."""

from __future__ import annotations

import pytest

from nvdocker2.runtime.args import parse_args, subcommand

CWD = "/run/cwd"
SHIM = ["--root", "/run/containerd/runc/moby", "--log", "/run/x/log.json", "--log-format", "json"]


@pytest.mark.parametrize("argv,expected", [
    (["create", "--bundle", "/b", "id"], (True, "/b")),
    (["create", "--bundle=/b", "id"], (True, "/b")),
    (["create", "-b", "/b", "id"], (True, "/b")),
    (["create", "-b=/b", "id"], (True, "/b")),
    (["create", "-bundle", "/b", "id"], (True, "/b")),
    (["create", "id"], (True, CWD)),
    (["create", "--bundle", "rel/b", "id"], (True, "/run/cwd/rel/b")),
    (["create", "--bundle", "create", "id"], (True, "/run/cwd/create")),
    (["create", "--bundle", "/a", "--bundle", "/b", "id"], (True, "/b")),
    ([*SHIM, "create", "--bundle", "/b", "--pid-file", "/p/init.pid", "id"], (True, "/b")),
    ([*SHIM, "create", "--pid-file", "-b", "--bundle", "/b", "id"], (True, "/b")),
    (["--systemd-cgroup", "create", "--console-socket", "/s", "-b", "/b", "id"], (True, "/b")),
    (["--root=/r", "--debug", "create", "--no-pivot", "--bundle", "/b", "id"], (True, "/b")),
    (["-root", "/r", "create", "--bundle", "/b", "id"], (True, "/b")),
    (["--rootless", "false", "create", "--bundle", "/b", "id"], (True, "/b")),
    (["--criu", "create", "state", "id"], (False, None)),
    (["--log", "create", "state", "id"], (False, None)),
    (["--root", "create", "delete", "id"], (False, None)),
    (["--log-format", "create", "start", "create"], (False, None)),
    ([*SHIM, "start", "id"], (False, None)),
    (["state", "create"], (False, None)),
    (["delete", "--force", "create"], (False, None)),
    (["run", "--bundle", "/b", "id"], (False, None)),
    (["--version"], (False, None)),
    ([], (False, None)),
    (["--root"], (False, None)),
])
def test_create_and_bundle(argv, expected):
    assert parse_args(["nvidia-container-runtime", *argv], cwd=CWD) == expected


def test_subcommand_index():
    assert subcommand(["rt", *SHIM, "kill", "id", "9"]) == ("kill", 7)
    assert subcommand(["rt", "--debug"]) == (None, -1)
