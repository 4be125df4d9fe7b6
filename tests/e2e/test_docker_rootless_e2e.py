"""`nvdocker2 install` run by a rootless Docker's user, against a real rootless dockerd.

The user (privatepodman.RootlessUser, made inside a private namespace whose /etc is an overlay)
starts Debian's `dockerd-rootless.sh` (rootlesskit, slirp4netns) with its own data root; the
namespace's /dev copy lets the user open /dev/net/tun (0600 on this VM; the machine's node is
not changed). install must find `$XDG_CONFIG_HOME/docker/daemon.json` (or ~/.config/...), reload
that user's dockerd by signal and verify through its socket; nothing is written to /etc.

install also sets `no-cgroups = true` in the user's own config.toml of the runtime
(`$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml`): a GPU container of the rootless
dockerd then reaches the TEST FIXTURE nvidia-container-cli (tests/fixtures) with `--no-cgroups`,
while the same run through a rootful private dockerd, with the same global config.toml and the
user's HOME, does not (root's runtime never reads a user's file).
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
from privatedockerd import PrivateDockerd, busybox_rootfs_tar
from privatepodman import PrivatePodman, RootlessUser, runtime_launcher

REPO = Path(__file__).resolve().parents[2]
ROOTLESS_SH = "/usr/share/docker.io/contrib/dockerd-rootless.sh"
FIXTURE_CLI = REPO / "tests" / "fixtures" / "nvidia-container-cli"
MARKER = "configured by the test fixture nvidia-container-cli for pid "


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
        gpu = _Gpu(root, user.uid)
        env = user.env + f" PYTHONPATH={REPO} NVIDIA_CONTAINER_RUNTIME_CONFIG={gpu.config}"
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
        gpu.env = {"HOME": str(home), **({"XDG_CONFIG_HOME": str(config_home)}
                                        if request.param == "xdg" else {})}
        gpu.user_config = config_home / "nvidia-container-runtime" / "config.toml"
        yield as_user, nvdocker2, runtime, config_home / "docker/daemon.json", sock, root, gpu
    finally:
        if user is not None:
            user.stop()
        pod.cleanup()
        shutil.rmtree(root, ignore_errors=True)


class _Gpu:
    """The test's global config.toml (root's, never edited): the fixture cli, recording its
    argv in a directory the rootless runtime (the user, on the host) can write."""

    def __init__(self, root: Path, uid: int) -> None:
        base = root / "gpu"
        self.cli = base / "cli" / "nvidia-container-cli"
        self.cli.parent.mkdir(parents=True)
        shutil.copy(FIXTURE_CLI, self.cli)
        self.record = base / "record"
        self.record.mkdir()
        os.chown(self.record, uid, -1)
        self.config = base / "config.toml"
        self.text = (f'[nvidia-container-cli]\npath = "{self.cli}"\n'
                     f'environment = ["FIXTURE_RECORD_DIR={self.record}"]\n')
        self.config.write_text(self.text)
        self.image_tar = base / "rootfs.tar"  # where the user can read it
        shutil.copy(busybox_rootfs_tar(), self.image_tar)
        self.image_tar.chmod(0o644)
        self.env: dict[str, str] = {}
        self.user_config = Path()

    def argv(self) -> list[str]:
        f = self.record / "argv"
        argv = f.read_text().splitlines()
        f.unlink()
        return argv


GPU_RUN = ("run --rm --network=none --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0 "
           "nvd2-busybox cat /nvidia-marker")


def test_install_edits_the_users_daemon_json_reloads_its_dockerd_and_uninstall_undoes_it(
    rootless,
):
    as_user, nvdocker2, runtime, config, sock, root, _ = rootless
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


def test_a_rootless_users_gpu_container_gets_no_cgroups_and_a_rootful_ones_does_not(rootless):
    as_user, nvdocker2, runtime, config, sock, root, gpu = rootless
    r = as_user(f"{nvdocker2} install --runtime-path {runtime} --json")
    assert r.returncode == 0, r.stderr
    assert gpu.user_config.read_bytes() == b"[nvidia-container-cli]\nno-cgroups = true\n"
    assert (gpu.user_config.stat().st_uid, gpu.user_config.stat().st_mode & 0o777) == \
        (int(as_user("id -u").stdout), 0o644)
    assert gpu.config.read_text() == gpu.text  # root's global file: never touched

    docker = f"docker -H unix://{sock}"
    assert as_user(f"{docker} import {gpu.image_tar} nvd2-busybox").returncode == 0
    r = as_user(f"{docker} {GPU_RUN}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(MARKER)
    argv = gpu.argv()
    assert argv[:5] == [str(gpu.cli), "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig",
                        "--no-cgroups"]

    # Root's runtime, with the same global file and the user's HOME (and XDG_CONFIG_HOME),
    # reads no per-user file: no --no-cgroups.
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(gpu.config), **gpu.env)
    rootful = PrivateDockerd(config=json.dumps(
        {"runtimes": {"nvidia": {"path": runtime}}}).encode(), env=env)
    try:
        rootful.start()
        proc = rootful.docker(*GPU_RUN.replace("nvd2-busybox", rootful.image).split(),
                              timeout=120)
        assert proc.stdout.startswith(MARKER)
        argv = gpu.argv()
        assert argv[:4] == [str(gpu.cli), "--load-kmods", "configure",
                            "--ldconfig=@/sbin/ldconfig"]
        assert "--no-cgroups" not in argv
    finally:
        rootful.cleanup()

    r = as_user(f"{nvdocker2} uninstall --json")
    assert r.returncode == 0, r.stderr
    assert not gpu.user_config.exists() and not gpu.user_config.parent.exists()
