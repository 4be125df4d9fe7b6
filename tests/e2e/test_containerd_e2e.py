"""install / uninstall on a private containerd through the CLI (docs/reference.md §11).

Three releases: this machine's containerd 1.6 (Debian 12), and containerd 1.7 and 2.1 taken
from the Debian 13 and sid trees of tests/platforms (their binaries link only libc, so they run
here directly, with this machine's runc). $NVD2_CONTAINERD_BINS (colon-separated containerd
executables) replaces the list. containerd is restarted by the `systemctl` stand-in, as systemd
would.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from privatecontainerd import (  # noqa: E402
    BINS,
    IMAGE,
    PrivateContainerd,
    missing_prerequisites,
    tree_binaries,
)

from nvdocker2.engines.containerd import service  # noqa: E402
from nvdocker2.engines.containerd.document import tomllib  # noqa: E402

NVDOCKER2 = [sys.executable, "-m", "nvdocker2"]


def _require(exe: str) -> None:
    missing = missing_prerequisites(exe)
    if missing:
        msg = "private containerd needs: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


@pytest.fixture(params=BINS, scope="module")
def containerd(request, tmp_path_factory):
    exe = request.param
    _require("containerd" if exe in ("trixie", "sid") else exe)
    if exe in ("trixie", "sid"):
        exe = tree_binaries(exe)
    c = PrivateContainerd(exe)
    try:
        c.start()
        c.import_busybox()
        yield c
    finally:
        c.cleanup()


def _run(c: PrivateContainerd, state: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = NVDOCKER2 + [*args, "--engine", "containerd", "--config", str(c.config),
                       "--containerd-address", c.address, "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=c.env(NVDOCKER2_STATE_DIR=str(state), **env))


def _cri_runtimes(c: PrivateContainerd, since: float) -> dict:
    text = subprocess.run(["journalctl", "-u", "containerd", "-o", "cat", "--since",
                           f"@{int(since)}"], capture_output=True, text=True,
                          env=c.env()).stdout
    found = service.runtimes_from_log(text)
    assert found is not None, c.log_tail()
    return found[0]


def test_install_restart_keeps_container_and_uninstall_restores_bytes(containerd, tmp_path):
    c = containerd
    state = tmp_path / "state"
    before = c.config.read_bytes()
    c.ctr("run", "-d", IMAGE, "keeper", "sleep", "3000")
    task = c.task_pid("keeper")
    assert task
    pid0 = c.pid()

    t0 = time.time()
    p = _run(c, state, "install")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["changed"] and out["verified"] and out["reload"] == "systemd"
    assert c.pid() != pid0  # containerd was restarted
    dump = service.config_dump(c.exe, c.config)
    rt = dump["plugins"][service.dump_cri(dump)[1]]["containerd"]["runtimes"]["nvidia"]
    assert rt["runtime_type"] == "io.containerd.runc.v2"
    assert rt["options"]["SystemdCgroup"] is True
    assert rt["options"]["BinaryName"].endswith("nvidia-container-runtime")
    assert "nvidia" in _cri_runtimes(c, t0)  # the restarted containerd reports it
    assert c.task_pid("keeper") == task  # the running container survived the restart
    doc = subprocess.run(NVDOCKER2 + ["doctor", "--engine", "containerd", "--config",
                                      str(c.config), "--containerd-address", c.address,
                                      "--json"], capture_output=True, text=True, env=c.env())
    checks = {r["id"]: r["status"] for r in json.loads(doc.stdout)["checks"]}
    assert doc.returncode == 0 and set(checks.values()) == {"ok"}, doc.stdout
    installed = c.config.read_bytes()
    dropin = c.dir / "conf.d" / "99-nvidia.toml"
    if service.major_version(c.exe) >= 2:
        # containerd 2.x: our own drop-in, and the root gains only the import line.
        assert dropin.read_bytes().startswith(b"# Written by nvdocker2")
        line = f'imports = ["{c.dir}/conf.d/*.toml"]\n'.encode()
        assert installed.replace(line, b"", 1) == before
    else:
        assert not dropin.exists()
        assert installed.startswith(before)  # everything before the runtime kept byte for byte

    pid1 = c.pid()
    p = _run(c, state, "install")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["changed"] is False
    assert c.pid() == pid1  # nothing written, no restart
    assert c.config.read_bytes() == installed

    t1 = time.time()
    p = _run(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True
    assert c.config.read_bytes() == before
    assert not dropin.exists()
    if service.major_version(c.exe) >= 2:
        assert not dropin.parent.exists()  # the directory install made goes with the drop-in
    assert "nvidia" not in _cri_runtimes(c, t1)
    assert c.task_pid("keeper") == task
    c.remove_container("keeper")


def test_refused_candidate_leaves_file_and_containerd_alone(containerd, tmp_path):
    c = containerd
    state = tmp_path / "state"
    good = c.config.read_bytes()
    bad_dir = c.dir / "imports-bad"
    bad_dir.mkdir(exist_ok=True)
    # An import that sorts after our drop-in and sets another BinaryName for "nvidia":
    # containerd would not run our runtime (≤ 1.7 replaces the section, 2.x merges over it).
    (bad_dir / "zz-other.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '  BinaryName = "/opt/other/runtime"\n')
    c.config.write_bytes(good.replace(b"version = 2\n",
                                      f'version = 2\nimports = ["{bad_dir}/*.toml"]\n'.encode()))
    cfg = c.config.read_bytes()
    pid = c.pid()
    try:
        p = _run(c, state, "install")
        assert p.returncode == 2, p.stderr
        # 1.x runs the import's whole CRI section, which install names; 2.x merges it over ours.
        assert ("effective configuration would be wrong" if service.major_version(c.exe) >= 2
                else f"{bad_dir}/zz-other.toml replaces") in p.stderr
        assert p.stderr.startswith("error: ") and "hint: " in p.stderr
        assert c.config.read_bytes() == cfg
        assert not (bad_dir / "99-nvidia.toml").exists()
        assert c.pid() == pid
    finally:
        c.config.write_bytes(good)


def test_containerd_that_does_not_come_back_is_rolled_back_exit_4(containerd, tmp_path):
    c = containerd
    state = tmp_path / "state"
    before = c.config.read_bytes()
    # Start without the drop-in directory (a test that stopped midway may have left it), so
    # that this install makes it and the rollback must take it away again.
    with contextlib.suppress(OSError):
        (c.dir / "conf.d").rmdir()
    c.ctr("run", "-d", IMAGE, "survivor", "sleep", "3000")
    task = c.task_pid("survivor")
    (c.dir / "fail-restarts").unlink(missing_ok=True)
    p = _run(c, state, "install", NVD2_FAKE_FAIL_RESTARTS="1")
    (c.dir / "fail-restarts").unlink(missing_ok=True)
    assert p.returncode == 4, p.stderr
    assert "restored from backup" in p.stderr and "hint: " in p.stderr
    assert c.config.read_bytes() == before
    assert not (c.dir / "conf.d").exists()  # nor the drop-in directory a 2.x install made
    assert c.pid() is not None  # restarted on the previous files
    assert c.task_pid("survivor") == task
    c.remove_container("survivor")


def test_set_default_is_what_the_restarted_cri_plugin_runs(containerd, tmp_path):
    c = containerd
    state = tmp_path / "state"
    before = c.config.read_bytes()
    t0 = time.time()
    p = _run(c, state, "install", "--set-default")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True
    text = subprocess.run(["journalctl", "-u", "containerd", "-o", "cat", "--since",
                           f"@{int(t0)}"], capture_output=True, text=True, env=c.env()).stdout
    runtimes, default = service.runtimes_from_log(text)
    assert default == "nvidia" and "nvidia" in runtimes
    p = _run(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before


RUNC_BLOCK = (
    '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    '        runtime_type = "io.containerd.runc.v2"\n'
    '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
    '          SystemdCgroup = true\n')


def test_a_config_without_runtimes_keeps_containerds_builtin_runc(containerd, tmp_path):
    """Debian's own config.toml names no runtime: containerd runs its built-in runc. On
    containerd ≤ 1.7 a file that writes a runtimes table replaces that built-in map, so
    install spells runc out beside nvidia (what the effective configuration showed), and the
    restarted CRI plugin runs both; uninstall gives back the bytes."""
    c = containerd
    state = tmp_path / "state"
    original = c.config.read_bytes()
    stock = original.replace(RUNC_BLOCK.encode(), b"")
    assert stock != original
    c.config.write_bytes(stock)
    c.systemctl("restart", "containerd")
    try:
        before = service.config_dump(c.exe, c.config)
        runc_before = before["plugins"][service.dump_cri(before)[1]]["containerd"]["runtimes"][
            "runc"]
        t0 = time.time()
        p = _run(c, state, "install")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["verified"] is True
        dump = service.config_dump(c.exe, c.config)
        rts = dump["plugins"][service.dump_cri(dump)[1]]["containerd"]["runtimes"]
        for key in ("runtime_type", "sandbox_mode"):
            assert rts["runc"].get(key) == runc_before.get(key), key
        rt_path = rts["nvidia"]["options"]["BinaryName"]
        assert rt_path.endswith("/nvidia-container-runtime")
        running = _cri_runtimes(c, t0)
        assert "runc" in running and running.get("nvidia") == rt_path
        t1 = time.time()
        p = _run(c, state, "uninstall")
        assert p.returncode == 0, p.stderr
        assert c.config.read_bytes() == stock
        running = _cri_runtimes(c, t1)
        assert "runc" in running and "nvidia" not in running
    finally:
        c.config.write_bytes(original)
        c.systemctl("restart", "containerd")


SECRET = "hunter2-registry-password"
CRI = 'plugins."io.containerd.grpc.v1.cri"'


def _with_dropin_dir_and_password(c: PrivateContainerd) -> bytes:
    """The private config, importing a drop-in directory and holding a registry password:
    config.toml is 0600, as such a file should be."""
    text = c.config.read_text().replace(
        "version = 2\n", f'version = 2\nimports = ["{c.dir}/conf.d/*.toml"]\n', 1)
    text += (f'  [{CRI}.registry.configs."registry.example".auth]\n'
             f'    username = "ci"\n    password = "{SECRET}"\n')
    (c.dir / "conf.d").mkdir(exist_ok=True)
    c.config.write_text(text)
    c.config.chmod(0o600)
    return c.config.read_bytes()


def _sandbox_image(c: PrivateContainerd) -> str:
    dump = service.config_dump(c.exe, c.config)
    if dump.get("version") == 3:  # containerd 2.x shows a version 2 file migrated
        return dump["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
    return dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]


def _files_holding(c: PrivateContainerd, needle: str) -> list[Path]:
    """The files of the private containerd's directory (not its root, state, log or journal
    stand-in) and of the state directory that hold `needle`."""
    skip = {c.dir / "root", c.dir / "state", c.dir / "opt"}
    return sorted(p for p in c.dir.rglob("*") if p.is_file() and not skip & set(p.parents)
                  and p != c.log and needle.encode() in p.read_bytes())


@pytest.fixture
def password_config(containerd):
    c = containerd
    original = c.config.read_bytes()
    try:
        yield c, _with_dropin_dir_and_password(c)
    finally:
        for f in (c.dir / "conf.d").glob("*"):
            f.unlink()
        c.config.write_bytes(original)
        c.systemctl("restart", "containerd")


def test_a_registry_password_stays_in_config_toml_and_later_edits_take_effect(
        password_config, tmp_path):
    """config.toml importing a drop-in directory: install copies no password out of the 0600
    config.toml, and an edit of config.toml's CRI section after the install is what containerd
    runs (on 1.x a drop-in with a copy of the section would hide it). 1.x: nothing goes into
    the directory; 2.x: the drop-in holds the runtime alone and is 0600 like config.toml."""
    c, before = password_config
    state = tmp_path / "state"
    p = _run(c, state, "install")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True
    assert _files_holding(c, SECRET) == [c.config]
    dropins = list((c.dir / "conf.d").iterdir())
    if service.major_version(c.exe) >= 2:
        assert [d.name for d in dropins] == ["99-nvidia.toml"]
        assert dropins[0].stat().st_mode & 0o777 == 0o600
    else:
        assert dropins == []
    assert c.config.stat().st_mode & 0o777 == 0o600
    assert c.config.read_bytes().startswith(before) or dropins
    assert _sandbox_image(c) == "registry.k8s.io/pause:3.6"
    c.config.write_bytes(c.config.read_bytes().replace(b"pause:3.6", b"pause:3.10", 1))
    assert _sandbox_image(c) == "registry.k8s.io/pause:3.10"
    c.config.write_bytes(c.config.read_bytes().replace(b"pause:3.10", b"pause:3.6", 1))
    p = _run(c, state, "uninstall")
    assert p.returncode == 0, p.stderr
    assert c.config.read_bytes() == before


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_an_older_nvdocker2s_dropin_is_reported_and_removed(password_config, tmp_path, action):
    """What an older nvdocker2 left on containerd 1.x: a drop-in with a copy of the whole CRI
    section. containerd runs the copy, not config.toml's section; doctor says so. install puts
    the runtime into config.toml and removes the drop-in; uninstall removes the drop-in as
    journaled. Either way containerd runs config.toml's section again, and is told so."""
    c, before = password_config
    if service.major_version(c.exe) >= 2:
        pytest.skip("containerd 2.x merges drop-ins key by key")
    state = tmp_path / "state"
    from nvdocker2.store.journal import Journal
    from nvdocker2.engines.containerd import edit

    drop = c.dir / "conf.d" / "99-nvidia.toml"
    rt = "/usr/bin/nvidia-container-runtime"
    drop.write_text(edit.MARK + f'version = 2\n[{CRI}]\nsandbox_image = "registry.k8s.io/'
                    f'pause:3.6"\n[{CRI}.containerd.runtimes.nvidia]\nruntime_type = '
                    f'"io.containerd.runc.v2"\n[{CRI}.containerd.runtimes.nvidia.options]\n'
                    f'BinaryName = "{rt}"\n')
    Journal(state, c.config).write({"config": str(c.config), "runtimes": {"nvidia": {
        "dropin": str(drop), "dropin_existed": False, "file_existed": True,
        "previous": {"present": False}, "installed": rt, "set_default": False}}})
    c.config.write_bytes(before.replace(b"pause:3.6", b"pause:3.10", 1))
    assert _sandbox_image(c) == "registry.k8s.io/pause:3.6"  # config.toml's edit is hidden
    doc = subprocess.run(NVDOCKER2 + ["doctor", "--engine", "containerd", "--config",
                                      str(c.config), "--containerd-address", c.address,
                                      "--json"], capture_output=True, text=True, env=c.env())
    shadow = next(r for r in json.loads(doc.stdout)["checks"] if r["id"] == "containerd-shadow")
    assert doc.returncode == 1 and shadow["status"] == "fail" and str(drop) in shadow["detail"]
    edited = c.config.read_bytes()

    t0 = time.time()
    install = ["--runtime-path", rt, "--allow-missing-runtime"]
    p = _run(c, state, action, *(install if action == "install" else []))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["verified"] is True
    assert {"key": str(drop), "action": "removed"} in [
        {k: v for k, v in ch.items() if k in ("key", "action")} for ch in out["changes"]]
    assert any(str(drop) in w and "sandbox_image" in w for w in out["warnings"]), out
    assert not drop.exists()
    assert _sandbox_image(c) == "registry.k8s.io/pause:3.10"
    if action == "install":
        assert c.config.read_bytes().startswith(edited)
        assert _cri_runtimes(c, t0).get("nvidia") == rt
        p = _run(c, state, "uninstall")
        assert p.returncode == 0, p.stderr
    else:
        assert "nvidia" not in _cri_runtimes(c, t0)
    assert c.config.read_bytes() == edited


def test_rollback_and_its_dry_run_restore_the_files_containerd_checked(containerd, tmp_path):
    """`rollback --engine containerd` on a host with containerd: the candidate is checked by
    containerd (it crashed there), the dry run prints the diff and writes nothing, the
    rollback gives back the bytes and the restarted containerd runs them."""
    c = containerd
    state = tmp_path / "state"
    before = c.config.read_bytes()
    p = _run(c, state, "install")
    assert p.returncode == 0, p.stderr
    installed = c.config.read_bytes()
    p = _run(c, state, "rollback", "--dry-run")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["dry_run"] and "nvidia" in out["diff"] and c.config.read_bytes() == installed
    t0 = time.time()
    p = _run(c, state, "rollback")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verified"] is True
    assert c.config.read_bytes() == before
    assert not (c.dir / "conf.d" / "99-nvidia.toml").exists()
    assert "nvidia" not in _cri_runtimes(c, t0)
    with contextlib.suppress(OSError):
        (c.dir / "conf.d").rmdir()


OTHER_NVIDIA = (
    '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    '        runtime_type = "io.containerd.runc.v2"\n'
    '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    '          BinaryName = "/opt/other-package/nvidia-runtime"\n')


def test_uninstall_puts_another_packages_runtime_back_and_containerd_runs_it(containerd,
                                                                               tmp_path):
    """config.toml had another package's `nvidia` runtime: install makes it ours (1.x in
    place, 2.x with the drop-in over it), uninstall gives the old one back; containerd's
    check of the candidate and its CRI plugin after the restart both accept that it stays."""
    c = containerd
    state = tmp_path / "state"
    original = c.config.read_bytes()
    other = original + OTHER_NVIDIA.encode()
    c.config.write_bytes(other)
    c.systemctl("restart", "containerd")
    try:
        p = _run(c, state, "install")
        assert p.returncode == 0, p.stderr
        t1 = time.time()
        p = _run(c, state, "uninstall")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["verified"] is True
        assert tomllib.loads(c.config.read_text()) == tomllib.loads(other.decode())
        if service.major_version(c.exe) >= 2:
            assert c.config.read_bytes() == other  # the drop-in went, config.toml as it was
        assert _cri_runtimes(c, t1)["nvidia"] == "/opt/other-package/nvidia-runtime"
    finally:
        for f in (c.dir / "conf.d").glob("*"):
            f.unlink()
        with contextlib.suppress(OSError):
            (c.dir / "conf.d").rmdir()
        c.config.write_bytes(original)
        c.systemctl("restart", "containerd")
