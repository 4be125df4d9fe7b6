"""`nvdocker2 install` run by a rootless Docker's user, against a real rootless dockerd.

The user (privatepodman.RootlessUser, made inside a private namespace whose /etc is an overlay)
starts Debian's `dockerd-rootless.sh` (rootlesskit, slirp4netns) with its own data root; the
namespace's /dev copy lets the user open /dev/net/tun (0600 on this VM; the machine's node is
not changed). install must find `$XDG_CONFIG_HOME/docker/daemon.json` (or ~/.config/...), reload
that user's dockerd by signal and verify through its socket; nothing is written to /etc.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from privatepodman import PrivatePodman, RootlessUser, runtime_launcher

REPO = Path(__file__).resolve().parents[2]
ROOTLESS_SH = "/usr/share/docker.io/contrib/dockerd-rootless.sh"


def _server_up(r) -> bool:
    return r.returncode == 0 and bool(r.stdout.strip())


@pytest.fixture(scope="module", params=["home", "xdg"])
def rootless(request, podman_prerequisites):
    from prereq import require

    require("rootless dockerd", [t for t in ("rootlesskit", "slirp4netns", "newuidmap", "setpriv",
                                             "useradd", "dockerd") if shutil.which(t) is None]
            + ([] if os.path.exists(ROOTLESS_SH) else [f"{ROOTLESS_SH} (docker.io)"]))
    root = Path(tempfile.mkdtemp(prefix="nvd2-rootless-docker-"))
    root.chmod(0o755)
    runtime = runtime_launcher(root)
    pod = PrivatePodman(root / "ns")
    pod.start()
    user = None
    try:
        home = root / "home"
        user = RootlessUser(pod, home, {})
        pod.sh("chmod 0666 /dev/net/tun")  # the namespace's copy
        config_home = home / ("xdg-config" if request.param == "xdg" else ".config")
        env = user.env + f" PYTHONPATH={REPO}"
        if request.param == "xdg":
            env += f" XDG_CONFIG_HOME={config_home}"
        sock = f"/run/user/{user.uid}/docker.sock"

        def as_user(command: str, timeout: float = 120):
            return pod.sh(f"cd / && setpriv --reuid={user.uid} --regid={user.gid} "
                          f"--init-groups env -i {env} {command}", check=False, timeout=timeout)

        as_user(f"sh -c '{ROOTLESS_SH} --data-root {home}/data > {home}/dockerd.log 2>&1 &'")
        deadline = time.monotonic() + 60
        # `docker info --format ok` prints "ok" even when no daemon answers (exit 1): ask for
        # the server's version and require exit 0.
        version = f"docker -H unix://{sock} version --format '{{{{.Server.Version}}}}'"
        while not _server_up(as_user(version)):
            assert time.monotonic() < deadline, (home / "dockerd.log").read_text()[-2000:]
            time.sleep(0.5)
        nvdocker2 = f"{sys.executable} -m nvdocker2"
        yield as_user, nvdocker2, runtime, config_home / "docker/daemon.json", sock, root
    finally:
        if user is not None:
            user.stop()
        pod.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def test_install_edits_the_users_daemon_json_reloads_its_dockerd_and_uninstall_undoes_it(
    rootless,
):
    as_user, nvdocker2, runtime, config, sock, root = rootless
    r = as_user(f"{nvdocker2} install --runtime-path {runtime} --json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"] == str(config)
    assert out["config_reason"] == f"rootless Docker: you are not root and {sock} exists"
    assert out["verified"] is True and out["reload"] == "signal"
    assert json.loads(config.read_text()) == {"runtimes": {"nvidia": {"path": runtime}}}
    info = as_user(f"docker -H unix://{sock} info --format '{{{{json .Runtimes}}}}'")
    assert json.loads(info.stdout)["nvidia"] == {"path": runtime}
    status = json.loads(as_user(f"{nvdocker2} status --json").stdout)
    assert status["dockerd"]["host"] == f"unix://{sock}"
    assert status["dockerd"]["runtimes"]["nvidia"] == runtime
    assert status["dockerd"]["agrees_with_file"] is True
    # Nothing of it in /etc: the namespace's overlay has no docker/ in its upper layer.
    assert not (root / "ns/ovl/etc/up/docker").exists()

    r = as_user(f"{nvdocker2} uninstall --json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verified"] is True
    assert not config.exists()  # there was no file before install
    info = as_user(f"docker -H unix://{sock} info --format '{{{{json .Runtimes}}}}'")
    assert "nvidia" not in json.loads(info.stdout)
