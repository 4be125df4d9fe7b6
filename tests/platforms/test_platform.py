"""The platform matrix: the .deb built once, installed in a Debian 12, 13 and sid tree, and
driven on that tree's own live dockerd (Docker 20.10, 26.1, 28.5; see trees.py).

The platform's tree gets the .deb (daemon.json left alone by the package), the TEST FIXTURE
nvidia-container-cli (tests/fixtures) as the config.toml's cli, and a dockerd started on a
user's hand-written daemon.json. Every test starts from that state (`fresh`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trees
from fixtures.fake_driver import build_fake_driver

from nvdocker2 import __version__

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNTIME = "/usr/bin/nvidia-container-runtime"
CLI = "/usr/local/bin/nvidia-container-cli"
RECORD = "/tmp/nvd2-record"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
LEGACY_CONFIG = (
    f'[nvidia-container-cli]\npath = "{CLI}"\nenvironment = ["FIXTURE_RECORD_DIR={RECORD}"]\n'
)
DRIVER_ROOT = "/nvd2-driver"
MARKER = "configured by the test fixture nvidia-container-cli for pid "
# A hand-written daemon.json every dockerd of the matrix runs with; install must keep each
# snippet byte for byte and uninstall must give back exactly these bytes.
USER_SNIPPETS = [
    '"log-level":  "info"',
    '"labels": ["owner=Zo\u00eb", "rack=\u03b2-7"]',
    '"shutdown-timeout": 15',
]
USER_JSON = ("{\n    " + ",\n    ".join(USER_SNIPPETS) + "\n}\n").encode()
# A user's later edit a dockerd of any release refuses (config validation of labels), while
# the packaged schema, which checks types only, lets it through.
REFUSED_JSON = USER_JSON.replace(b'"rack=\xce\xb2-7"', b'"no-equals-sign"')


def nv(tree: trees.Tree, args: str, env: dict | None = None):
    return tree.sh(f"nvdocker2 {args}", env=env, timeout=180)


def runtimes(daemon: trees.TreeDockerd) -> dict:
    return daemon.info().get("Runtimes", {})


def reloads(daemon: trees.TreeDockerd) -> int:
    return daemon.log_file.read_text(errors="replace").count("Got signal to reload configuration")


def backups(tree: trees.Tree) -> list[str]:
    listing = json.loads(tree.ok("nvdocker2 backups --json 2>/dev/null"))
    return [b["id"] for b in listing["backups"]]


@pytest.fixture(scope="module")
def daemon(tree_with_deb):
    tree = tree_with_deb
    shutil.copy(FIXTURES / "nvidia-container-cli", tree.path(CLI))
    tree.path(CLI).chmod(0o755)
    tree.path(RECORD).mkdir()
    tree.path(TOOLKIT_CONFIG).write_text(LEGACY_CONFIG)
    tree.path("/etc/docker").mkdir(exist_ok=True)
    tree.path("/etc/docker/daemon.json").write_bytes(USER_JSON)
    started = trees.start_dockerd(tree)
    yield started
    started.stop()


@pytest.fixture
def fresh(daemon):
    """The module's dockerd, running without extra flags on USER_JSON, no nvidia runtime."""
    tree = daemon.tree
    for entry in tree.path(RECORD).iterdir():
        entry.unlink()
    tree.path(TOOLKIT_CONFIG).write_text(LEGACY_CONFIG)
    if (not daemon.running() or daemon.extra_args or daemon.daemon_json.read_bytes() != USER_JSON
            or "nvidia" in runtimes(daemon)):
        daemon.daemon_json.write_bytes(USER_JSON)
        daemon.extra_args = []
        daemon.restart()
    ids = daemon.docker("ps", "-aq").stdout.split()
    if ids:
        daemon.docker("rm", "-f", *ids)
    return daemon


@pytest.fixture
def installed(fresh):
    out = nv(fresh.tree, "install --json")
    assert out.returncode == 0, out.stderr
    return fresh


def test_the_tree_is_the_platform_and_the_deb_installs(tree_with_deb, platform):
    tree, suite = tree_with_deb, trees.SUITES[platform]
    assert f"version {suite.docker}." in tree.ok("dockerd --version")
    assert f" {suite.containerd}." in tree.ok("containerd --version")
    assert f"version {suite.runc}." in tree.ok("runc --version")
    assert tree.ok("python3 --version").startswith(f"Python {suite.python}.")
    assert tree.ok("nvdocker2 --version").split() == ["nvdocker2", __version__]
    assert tree.ok("dpkg-query -W -f='${Version}' nvdocker2") == __version__
    typer = tree.ok("dpkg-query -W -f='${Version}' python3-typer")
    print(f"{suite.platform}: python3-typer {typer}")


def test_install_is_verified_and_uninstall_restores_the_bytes(fresh):
    tree, count = fresh.tree, reloads(fresh)
    out = nv(tree, "install --json")
    assert out.returncode == 0, out.stderr
    assert reloads(fresh) == count + 1  # what the refusal tests count is seen here
    result = json.loads(out.stdout)
    assert (result["changed"], result["reload"], result["verified"]) == (True, "signal", True)
    assert runtimes(fresh)["nvidia"]["path"] == RUNTIME
    written = fresh.daemon_json.read_bytes().decode()
    for snippet in USER_SNIPPETS:
        assert snippet in written
    assert json.loads(written)["runtimes"]["nvidia"] == {"path": RUNTIME}
    assert nv(tree, "status").returncode == 0

    out = nv(tree, "uninstall --json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verified"] is True
    assert fresh.daemon_json.read_bytes() == USER_JSON
    assert "nvidia" not in fresh.wait_info(lambda i: "nvidia" not in i["Runtimes"])["Runtimes"]


def _gpu_container(daemon, *flags: str) -> tuple[int, str, list[str]]:
    """Start a container with `flags`; (its pid from docker inspect, what it printed, the
    argv the test cli was called with)."""
    cid = daemon.docker("run", "-d", "--network=none", *flags, daemon.image, "sh", "-c",
                        "cat /nvidia-marker; exec sleep 600").stdout.strip()
    try:
        pid = int(daemon.docker("inspect", "-f", "{{.State.Pid}}", cid).stdout)
        printed = ""
        for _ in range(100):
            printed = daemon.docker("logs", cid).stdout
            if printed:
                break
        argv = daemon.tree.path(f"{RECORD}/argv").read_text().splitlines()
        calls = daemon.tree.path(f"{RECORD}/calls").read_text()
    finally:
        daemon.docker("rm", "-f", cid)
    assert calls == "called\n"
    return pid, printed, argv


def test_runtime_nvidia_reaches_the_cli_with_the_container_pid(installed):
    pid, printed, argv = _gpu_container(
        installed, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    assert argv[0] == CLI and "configure" in argv and "--device=0" in argv
    assert argv[-2] == f"--pid={pid}"
    assert argv[-1].startswith("/var/lib/docker/")
    assert printed == f"{MARKER}{pid}\n"


def test_gpus_flag_reaches_the_cli_with_the_container_pid(installed):
    assert installed.info()["DefaultRuntime"] == "runc"
    pid, printed, argv = _gpu_container(installed, "--gpus", "all")
    assert "--device=all" in argv and argv[-2] == f"--pid={pid}"
    assert printed == f"{MARKER}{pid}\n"


def test_direct_mode_gives_the_container_its_device_nodes(installed):
    tree = installed.tree
    if not tree.path(DRIVER_ROOT).exists():
        build_fake_driver(tree.path(DRIVER_ROOT))
    tree.path(TOOLKIT_CONFIG).write_text(
        f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{DRIVER_ROOT}"\n'
        '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    probe = ("for n in nvidia0 nvidia1 nvidiactl; do if [ -c /dev/$n ]; then"
             " echo \"$n $(stat -c '%t:%T' /dev/$n)\"; else echo \"$n absent\"; fi; done")
    out = installed.docker("run", "--rm", "--network=none", "--runtime=nvidia",
                           "-e", "NVIDIA_VISIBLE_DEVICES=1", installed.image, "sh", "-c", probe)
    assert out.stdout.splitlines() == ["nvidia0 absent", "nvidia1 c3:1", "nvidiactl c3:ff"]
    assert not tree.path(f"{RECORD}/calls").exists()


def test_a_flag_conflict_is_refused_before_writing(fresh):
    fresh.extra_args = ["--default-runtime=runc"]
    fresh.restart()
    count = reloads(fresh)
    out = nv(fresh.tree, "install --set-default")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith('error: /etc/docker/daemon.json: "default-runtime" (flag')
    assert fresh.daemon_json.read_bytes() == USER_JSON
    assert reloads(fresh) == count
    assert "nvidia" not in runtimes(fresh)


def _refused_install(daemon) -> tuple:
    """A user's edit dockerd refuses is on disk (dockerd still runs the old file); install.
    `dockerd` on the installer's PATH is a wrapper that logs each call, then runs dockerd."""
    tree = daemon.tree
    wrapper = tree.path("/usr/local/sbin/dockerd")
    wrapper.write_text('#!/bin/sh\necho "$*" >> /tmp/nvd2-dockerd-calls\n'
                       'exec /usr/sbin/dockerd "$@"\n')
    wrapper.chmod(0o755)
    calls = tree.path("/tmp/nvd2-dockerd-calls")
    calls.unlink(missing_ok=True)
    daemon.daemon_json.write_bytes(REFUSED_JSON)
    count, before = reloads(daemon), backups(tree)
    try:
        out = nv(tree, "install --dockerd-log /var/log/dockerd.log")
    finally:
        wrapper.unlink()
    probes = calls.read_text().splitlines() if calls.exists() else []
    return out, probes, count, before


def test_a_change_dockerd_refuses_leaves_the_file_unchanged(fresh):
    out, _, _, _ = _refused_install(fresh)
    assert out.returncode in (2, 4), out.stdout + out.stderr
    assert "no-equals-sign" in out.stderr
    assert fresh.daemon_json.read_bytes() == REFUSED_JSON
    assert fresh.docker("version").returncode == 0
    assert "nvidia" not in runtimes(fresh)


def test_dockerd_validate_runs_on_the_candidate_from_docker_23_only(fresh):
    out, probes, count, before = _refused_install(fresh)
    validations = [p for p in probes if "--validate" in p]
    if fresh.major >= 23:
        # Refused by `dockerd --validate` on a staged copy, before anything was written.
        assert len(validations) == 1, probes
        assert "--config-file /etc/docker/daemon.json" not in validations[0]
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.startswith(
            "error: /etc/docker/daemon.json: dockerd --validate refuses the result: ")
        assert "bad attribute format: no-equals-sign" in out.stderr.splitlines()[0]
        assert reloads(fresh) == count
        assert backups(fresh.tree) == before
    else:
        # No --validate on Docker 20.10: not attempted; dockerd refuses the reload and the
        # installer rolls the file back.
        assert validations == [], probes
        assert out.returncode == 4, out.stdout + out.stderr
        assert "previous file was restored" in out.stderr
        assert reloads(fresh) >= count + 1
    assert fresh.daemon_json.read_bytes() == REFUSED_JSON
