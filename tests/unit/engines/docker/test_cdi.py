"""`install --mode cdi`, `uninstall --mode cdi` and `cdi refresh` (reference §9), run as a user runs
them, against the TEST FIXTURE fake driver tree and a fake Engine API that reports the Docker
version and CDI state a test needs (tests/unit/fake_engine.py). Restarting a real dockerd and
`docker run --device` are in tests/e2e/test_cdi_e2e.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from fixtures.fake_driver import build_fake_driver
from ...direct.test_cdi import read_block_yaml as _read_block_yaml

SCHEMA = json.loads((Path(__file__).parents[3] / "fixtures/cdi_schema.json").read_text())
RUNTIME = "/usr/bin/nvidia-container-runtime"
GPU = "nvidia.com/gpu"


def read_block_yaml(text: str):
    """The spec's YAML; it starts with a comment line saying who wrote it."""
    first, _, rest = text.partition("\n")
    assert first.startswith("# Written by nvdocker2 (CDI mode)")
    return _read_block_yaml(rest)


class Host:
    """A daemon.json, a spec directory dockerd reads (named in cdi-spec-dirs), a config.toml
    pointing at the fake driver, and a fake Engine API."""

    def __init__(self, tmp_path: Path, engine) -> None:
        self.tmp = tmp_path
        self.engine = engine
        self.driver = build_fake_driver(tmp_path / "driver")
        self.spec_dir = tmp_path / "cdi"
        self.spec = self.spec_dir / "nvidia.yaml"
        self.config = tmp_path / "daemon.json"
        self.toml = tmp_path / "config.toml"
        self.toml.write_text(f'[nvidia-container-runtime]\ndriver-root = "{self.driver.root}"\n')
        self.state = tmp_path / "state"

    def docker(self, version: str, cdi_on: bool, devices: tuple[str, ...] = ()) -> None:
        self.engine.info["ServerVersion"] = version
        self.engine.info["CDISpecDirs"] = ["/etc/cdi", str(self.spec_dir)] if cdi_on else []
        if devices:
            self.engine.info["DiscoveredDevices"] = [{"Source": "cdi", "ID": d} for d in devices]

    def write_config(self, text: str) -> bytes:
        text = text.replace("SPECDIR", str(self.spec_dir))
        self.config.write_text(text)
        return self.config.read_bytes()

    def run(self, *args: str, mode: bool = True):
        argv = [sys.executable, "-m", "nvdocker2", *args, "--config", str(self.config)]
        if mode:
            argv += ["--mode", "cdi", "--cdi-spec-dir", str(self.spec_dir), "--reload", "none",
                     "--docker-host", f"unix://{self.engine.socket_path}", "--json"]
        env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(self.toml),
                   NVDOCKER2_STATE_DIR=str(self.state))
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    def install(self, *extra: str):
        return self.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", *extra)

    def uninstall(self, *extra: str):
        return self.run("uninstall", *extra)

    def backups(self) -> list[str]:
        d = self.state / "backups"
        return sorted(p.name for p in d.glob("*.meta.json")) if d.exists() else []


DIRS = '"cdi-spec-dirs": ["/etc/cdi", "SPECDIR"]'


def test_docker_26_gets_cdi_true_beside_buildkit_and_is_told_to_restart(host):
    host.docker("26.1.5", cdi_on=False)
    host.write_config('{\n  "features": {"buildkit": true},\n  ' + DIRS + '\n}\n')
    r = host.install()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert host.config.read_text() == (
        '{\n  "features": {"buildkit": true, "cdi": true},\n  "cdi-spec-dirs": '
        f'["/etc/cdi", "{host.spec_dir}"]\n}}\n'
    )
    assert out["restart_needed"] is True
    assert out["mode"] == "cdi" and out["changed"] is True and out["verified"] is False
    assert out["devices"] == [f"{GPU}=0", f"{GPU}={host.driver.gpus[0].uuid}", f"{GPU}=1",
                              f"{GPU}={host.driver.gpus[1].uuid}", f"{GPU}=all"]
    assert any("restart it to apply this" in n or "restart" in n for n in out["notes"])
    spec = read_block_yaml(host.spec.read_text())
    jsonschema.validate(spec, SCHEMA)
    assert spec["kind"] == GPU
    # Text output names the command to run.
    host.config.write_text('{"features": {"buildkit": true}, ' + DIRS.replace(
        "SPECDIR", str(host.spec_dir)) + "}")
    host.spec.unlink()
    (host.state / "journal").exists() and [p.unlink() for p in (host.state / "journal").iterdir()]
    r = host.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", "--mode", "cdi",
                 "--cdi-spec-dir",
                 str(host.spec_dir), "--reload", "none", "--docker-host",
                 f"unix://{host.engine.socket_path}", mode=False)
    assert r.returncode == 0, r.stderr
    assert "restart needed: yes" in r.stdout
    assert "restart the dockerd that reads this file" in r.stdout


def test_a_second_install_is_unchanged_no_write_no_backup(host):
    host.docker("26.1.5", cdi_on=False)
    host.write_config("{" + DIRS + "}\n")
    assert host.install().returncode == 0
    spec, conf, backups = host.spec.read_bytes(), host.config.read_bytes(), host.backups()
    mtime = host.spec.stat().st_mtime_ns
    r = host.install()
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["changed"] is False
    assert out["restart_needed"] is True  # dockerd still runs without CDI
    assert (host.spec.read_bytes(), host.config.read_bytes(), host.backups()) == (
        spec, conf, backups)
    assert host.spec.stat().st_mtime_ns == mtime


def test_docker_28_5_leaves_daemon_json_alone_and_uninstall_leaves_it_byte_identical(host):
    host.docker("28.5.2", cdi_on=True)
    before = host.write_config('{\r\n\t"debug": true,\r\n\t' + DIRS + "\r\n}")
    r = host.install()
    out = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert out["restart_needed"] is False and out["changed"] is True
    assert host.config.read_bytes() == before
    assert host.spec.exists()
    r = host.uninstall()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is True
    assert not host.spec.exists()
    assert host.config.read_bytes() == before
    assert sorted(os.listdir(host.spec_dir)) == []


def test_docker_28_5_with_cdi_false_is_switched_on_and_uninstall_puts_false_back(host):
    host.docker("28.5.2", cdi_on=False)
    before = host.write_config('{"features": {"cdi": false, "x": true}, ' + DIRS + "}")
    out = json.loads(host.install().stdout)
    assert json.loads(host.config.read_text())["features"] == {"cdi": True, "x": True}
    assert out["restart_needed"] is True
    host.docker("28.5.2", cdi_on=True)  # the operator restarted dockerd
    r = host.uninstall()
    assert r.returncode == 0, r.stderr
    assert host.config.read_bytes() == before
    assert json.loads(r.stdout)["restart_needed"] is True  # to turn CDI off again


def test_uninstall_needs_no_restart_where_dockerd_never_took_cdi(host):
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config("{" + DIRS + "}")
    assert json.loads(host.install().stdout)["restart_needed"] is True
    r = host.uninstall()
    assert host.config.read_bytes() == before
    assert json.loads(r.stdout)["restart_needed"] is False


def test_features_created_by_install_are_removed_by_uninstall(host):
    host.docker("25.0.3", cdi_on=False)
    before = host.write_config('{\n    "debug": true,\n    ' + DIRS + "\n}\n")
    assert host.install().returncode == 0
    assert json.loads(host.config.read_text())["features"] == {"cdi": True}
    assert host.uninstall().returncode == 0
    assert host.config.read_bytes() == before
    assert not host.spec.exists()


def test_docker_20_10_is_refused_with_exit_2_naming_the_versions_that_work(host):
    host.docker("20.10.24", cdi_on=False)
    before = host.write_config("{}\n")
    r = host.install()
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0] == ("error: CDI mode needs Docker 25.0 or later; this dockerd is 20.10.24 "
                        "(from /info)")
    assert lines[1].startswith("hint: CDI works on Docker 25.0 to 28.1")
    assert "28.2 and later" in lines[1]
    assert host.config.read_bytes() == before
    assert not host.spec_dir.exists() and host.backups() == []


def test_a_spec_dir_dockerd_does_not_read_is_refused(host):
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config("{}\n")
    r = host.install()
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == (
        f"error: --cdi-spec-dir {host.spec_dir}: dockerd does not read CDI specs there (it "
        "reads /etc/cdi, /var/run/cdi)")
    assert host.config.read_bytes() == before and not host.spec.exists()


def test_features_of_the_wrong_type_is_exit_2_and_nothing_written(host):
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": ["cdi"], ' + DIRS + "}")
    r = host.install()
    assert r.returncode == 2
    assert '"features" is an array, not an object' in r.stderr
    assert host.config.read_bytes() == before and not host.spec.exists()


def test_dry_run_shows_both_files_and_writes_nothing(host):
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": {"buildkit": true}, ' + DIRS + "}")
    r = host.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", "--mode", "cdi",
                 "--cdi-spec-dir",
                 str(host.spec_dir), "--reload", "none", "--dry-run", "--docker-host",
                 f"unix://{host.engine.socket_path}", mode=False)
    assert r.returncode == 0, r.stderr
    assert f"+++ b{host.spec}" in r.stdout
    assert '+{"features": {"buildkit": true, "cdi": true}' in r.stdout
    assert host.config.read_bytes() == before and not host.spec.exists()


def test_a_gpu_removed_refresh_rewrites_only_then(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    assert host.install().returncode == 0
    r = host.run("cdi", "refresh", "--json", mode=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is False
    n = len(host.backups())
    # The GPU at minor 1 goes away (unplugged, or fallen off the bus).
    gone = host.driver.gpus[1]
    for p in (host.driver.root / "proc/driver/nvidia/gpus" / gone.bus_id).iterdir():
        p.unlink()
    (host.driver.root / "proc/driver/nvidia/gpus" / gone.bus_id).rmdir()
    r = host.run("cdi", "refresh", mode=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"rewrote {host.spec}: {GPU}=0, {GPU}={host.driver.gpus[0].uuid}, "
                               f"{GPU}=all (backup ")
    spec = read_block_yaml(host.spec.read_text())
    assert [d["name"] for d in spec["devices"]] == ["0", host.driver.gpus[0].uuid, "all"]
    assert len(host.backups()) == n + 1
    r = host.run("cdi", "refresh", mode=False)
    assert r.stdout.startswith(f"unchanged: {host.spec}")
    assert len(host.backups()) == n + 1


def test_refresh_without_cdi_mode_installed_writes_nothing(host):
    r = host.run("cdi", "refresh", "--cdi-spec-dir", str(host.spec_dir), mode=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"no CDI spec at {host.spec}: nothing to refresh "
                        "(nvdocker2 install --mode cdi writes one)\n")
    assert not host.spec_dir.exists()


def test_the_spec_hooks_run_this_packages_runtime_only(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    assert host.install().returncode == 0
    spec = read_block_yaml(host.spec.read_text())
    hooks = spec["containerEdits"]["hooks"]
    assert [(h["hookName"], h["path"], h["args"][:3]) for h in hooks] == [
        ("createContainer", RUNTIME, ["nvidia-container-runtime", "direct-hook",
                                      "update-ldcache"])]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert all(m["options"] == ["nosuid", "nodev", "bind", "ro"]
               for m in spec["containerEdits"]["mounts"])


def test_uninstall_without_journal_keeps_a_foreign_spec(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    host.spec_dir.mkdir()
    host.spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n# from nvidia-ctk\n")
    r = host.uninstall()
    assert r.returncode == 0, r.stderr
    assert host.spec.read_text().endswith("# from nvidia-ctk\n")
    assert "left in place" in json.loads(r.stdout)["warnings"][0]


def test_install_over_a_foreign_spec_puts_it_back_on_uninstall(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    host.spec_dir.mkdir()
    foreign = b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
    host.spec.write_bytes(foreign)
    assert host.install().returncode == 0
    assert host.spec.read_bytes() != foreign
    assert host.uninstall().returncode == 0
    assert host.spec.read_bytes() == foreign


class RefusingDaemon:
    """A dockerd that restarts but never reports CDI (the edge a real one will not produce on
    demand); /info comes from the fake Engine API."""

    strategy = "systemd"
    verifies = True

    def __init__(self, client) -> None:
        self.client = client
        self.calls: list[str] = []

    def check_candidate(self, config_path, candidate, candidate_file) -> None:
        self.calls.append("check")

    def reload(self) -> None:
        self.calls.append("restart")

    def verify(self, expect, timeout) -> None:
        from nvdocker2.engines.base import VerifyFailed

        self.calls.append("verify")
        if expect.cdi_spec_dir is not None:
            raise VerifyFailed("CDI is off (CDISpecDirs is empty)")


def test_a_restart_that_does_not_bring_cdi_up_restores_both_files_exit_4(host):
    from nvdocker2.engines.docker import cdi
    from nvdocker2.engines.docker.service.api import EngineClient, parse_docker_host
    from nvdocker2.errors import DockerdRejected

    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": {"buildkit": true}, ' + DIRS + "}")
    os.environ["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = str(host.toml)
    daemon = RefusingDaemon(EngineClient(parse_docker_host(f"unix://{host.engine.socket_path}")))
    run = cdi.Run(daemon, restart=True, timeout=5, state=host.state)
    with pytest.raises(DockerdRejected) as err:
        cdi.install(host.config, spec_dir=str(host.spec_dir), runtime_path=RUNTIME, run=run)
    assert "CDI is off (CDISpecDirs is empty)" in err.value.message
    assert "the previous file was restored" in err.value.message
    assert daemon.calls == ["check", "restart", "verify", "restart", "verify"]
    assert host.config.read_bytes() == before
    assert not host.spec.exists()
    assert sorted(os.listdir(host.spec_dir)) == []
    assert not (host.state / "journal").exists() or os.listdir(host.state / "journal") == []


def doctor(host):
    r = host.run("doctor", "--json", "--docker-host", f"unix://{host.engine.socket_path}",
                 mode=False)
    return {c["id"]: c for c in json.loads(r.stdout)["checks"]}


def test_doctor_warns_when_a_gpu_was_removed_until_refresh(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    out = json.loads(host.install().stdout)
    host.docker("28.5.2", cdi_on=True, devices=tuple(out["devices"]))
    checks = doctor(host)
    assert checks["cdi.spec"]["status"] == "ok"
    assert checks["cdi.dockerd"]["status"] == "ok"
    assert checks["cdi.dockerd"]["detail"] == (
        f"Docker 28.5.2 reads {host.spec_dir} and lists 5 devices")
    # No runtime entry and no nvidia-container-cli are needed in CDI mode.
    assert checks["config.runtime"]["status"] == "skip"
    assert checks["config.runtime"]["detail"].endswith("CDI mode is installed "
                                                       "(docker run --device nvidia.com/gpu=...)")
    assert checks["dockerd.runtimes"]["status"] == "ok"
    assert checks["cli.installed"]["status"] in ("ok", "skip")
    gone = host.driver.gpus[1]
    gpu_dir = host.driver.root / "proc/driver/nvidia/gpus" / gone.bus_id
    for p in gpu_dir.iterdir():
        p.unlink()
    gpu_dir.rmdir()
    spec = doctor(host)["cdi.spec"]
    assert spec["status"] == "warn"
    assert spec["detail"] == (f"{host.spec} differs from the GPUs present (lists {GPU}=1, "
                              f"{GPU}={gone.uuid} no longer present)")
    assert spec["hint"].startswith("regenerate it: nvdocker2 cdi refresh")
    assert host.run("cdi", "refresh", mode=False).returncode == 0
    assert doctor(host)["cdi.spec"]["status"] == "ok"


def test_doctor_fails_when_dockerd_runs_with_cdi_off(host):
    host.docker("26.1.5", cdi_on=False)
    host.write_config("{" + DIRS + "}")
    assert host.install().returncode == 0
    check = doctor(host)["cdi.dockerd"]
    assert check["status"] == "fail"
    assert check["detail"] == "Docker 26.1.5 runs with CDI off (CDISpecDirs is empty)"
    assert check["hint"] == ("turn it on: nvdocker2 install --mode cdi --restart "
                             f"--config {host.config}")


def test_doctor_skips_cdi_checks_where_cdi_mode_is_not_installed(host):
    host.docker("28.5.2", cdi_on=True)
    checks = doctor(host)
    assert checks["cdi.spec"]["status"] == "skip"
    assert checks["cdi.dockerd"]["status"] == "skip"


def test_status_reports_the_mode_and_the_spec(host):
    host.docker("28.5.2", cdi_on=True)
    host.write_config("{" + DIRS + "}")
    r = host.run("status", "--json", "--docker-host", f"unix://{host.engine.socket_path}",
                 mode=False)
    assert json.loads(r.stdout)["mode"] == "none"
    out = json.loads(host.install().stdout)
    r = host.run("status", "--json", "--docker-host", f"unix://{host.engine.socket_path}",
                 mode=False)
    st = json.loads(r.stdout)
    assert st["mode"] == "cdi" and st["modes"] == ["cdi"]
    assert st["cdi"]["spec"] == str(host.spec) and st["cdi"]["present"] is True
    assert st["cdi"]["devices"] == out["devices"]
    r = host.run("status", "--docker-host", f"unix://{host.engine.socket_path}", mode=False)
    assert "mode: cdi\n" in r.stdout
    assert f"CDI spec: {host.spec}: {GPU}=0, " in r.stdout


def test_a_daemon_json_that_cannot_be_replaced_takes_the_new_spec_back_out(host, monkeypatch):
    """The spec is renamed into place first; when daemon.json's rename then fails (no space),
    the spec is put back as it was and the command exits 3 with nothing changed."""
    import errno

    from nvdocker2.engines.docker import cdi
    from nvdocker2.engines.docker.service.api import EngineClient, parse_docker_host
    from nvdocker2.errors import EnvironmentProblem
    from nvdocker2.engines.docker.service import NoDaemon

    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": {"buildkit": true}, ' + DIRS + "}")
    monkeypatch.setenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", str(host.toml))
    real_replace = os.replace

    def replace(src, dst, *a, **kw):
        if Path(dst) == host.config:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    daemon = NoDaemon()
    daemon.client = EngineClient(parse_docker_host(f"unix://{host.engine.socket_path}"))
    with pytest.raises(EnvironmentProblem) as err:
        cdi.install(host.config, spec_dir=str(host.spec_dir), runtime_path=RUNTIME,
                        run=cdi.Run(daemon, state=host.state))
    assert err.value.message == f"{host.config}: no space left on device"
    assert host.config.read_bytes() == before
    assert sorted(os.listdir(host.spec_dir)) == []
    assert sorted(os.listdir(host.tmp)) == sorted(
        ["api.sock", "cdi", "config.toml", "daemon.json", "driver", "state"])
    assert not (host.state / "journal").exists() or os.listdir(host.state / "journal") == []


@pytest.mark.parametrize("flags,named", [
    (("--set-default",), "--set-default"),
    (("--runtime-arg", "--debug"), "--runtime-arg"),
    (("--runtime-name", "gpu"), "--runtime-name"),
])
def test_runtime_flags_with_mode_cdi_are_bad_input(host, flags, named):
    host.docker("28.5.2", cdi_on=True)
    before = host.write_config("{" + DIRS + "}")
    r = host.install(*flags)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-2:] == [
        f"error: {named} has no meaning with --mode cdi (CDI mode adds no runtime entry)",
        f"hint: drop {named}, or drop --mode cdi"]
    assert host.config.read_bytes() == before and not host.spec_dir.exists()


def test_cdi_spec_dir_without_mode_cdi_is_bad_input(host):
    before = host.write_config("{}")
    r = host.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", "--cdi-spec-dir",
                 str(host.spec_dir),
                 "--reload", "none", mode=False)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["error: --cdi-spec-dir needs --mode cdi",
                                     "hint: add --mode cdi, or drop --cdi-spec-dir"]
    assert host.config.read_bytes() == before


def test_uninstall_mode_direct_is_bad_input(host):
    before = host.write_config("{}")
    r = host.run("uninstall", "--mode", "direct", "--reload", "none", mode=False)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: uninstall --mode direct: only --mode cdi has something to undo",
        "hint: drop --mode (uninstall removes the runtime entry)"]
    assert host.config.read_bytes() == before


def _rollback(host, *args: str):
    r = host.run("rollback", "--reload", "none", "--json", *args, mode=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_rollback_of_a_cdi_install_restores_daemon_json_and_the_spec_together(host):
    """install --mode cdi changes two files as one transaction; rollback undoes both: the
    features.cdi edit and the spec it wrote (the spec did not exist before: it is removed)."""
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": {"buildkit": true}, ' + DIRS + "}")
    assert host.install().returncode == 0
    assert host.spec.exists() and host.config.read_bytes() != before
    tags = {m["reason"].rsplit(" ", 1)[-1] for m in
            (json.loads((host.state / "backups" / n).read_text()) for n in host.backups())}
    assert len(tags) == 1 and tags.pop().startswith("[")  # one transaction, one tag
    out = _rollback(host)
    assert out["changed"] is True
    assert sorted(c["key"] for c in out["changes"]) == sorted([str(host.config), str(host.spec)])
    assert host.config.read_bytes() == before and not host.spec.exists()
    again = _rollback(host)  # a rollback is itself undone by the next one
    assert again["changed"] is True and host.spec.exists()


def test_rollback_of_a_spec_only_cdi_install_removes_the_spec_and_leaves_daemon_json(host):
    """Docker 28.5 needs no daemon.json change: the newest change is the spec alone, and
    rollback undoes that instead of restoring an older daemon.json backup."""
    host.docker("28.5.2", cdi_on=True)
    before = host.write_config('{"debug": true, ' + DIRS + "}")
    r = host.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", "--reload",
                 "none", "--json", mode=False)
    assert r.returncode == 0, r.stderr  # an older daemon.json backup exists
    assert host.install().returncode == 0 and host.spec.exists()
    out = _rollback(host)
    assert [c["key"] for c in out["changes"]] == [str(host.spec)]
    assert not host.spec.exists() and b"nvidia" in host.config.read_bytes()
    assert host.config.read_bytes() != before  # the runtime install is not undone


def test_rollback_by_the_spec_backup_id_brings_back_its_whole_transaction(host):
    host.docker("26.1.5", cdi_on=False)
    before = host.write_config('{"features": {"buildkit": true}, ' + DIRS + "}")
    assert host.install().returncode == 0
    metas = [json.loads((host.state / "backups" / n).read_text()) for n in host.backups()]
    spec_id = next(m["id"] for m in metas if m["config"] == str(host.spec))
    r = host.run("rollback", spec_id, "--reload", "none", mode=False)
    assert r.returncode == 0, r.stderr
    assert host.config.read_bytes() == before and not host.spec.exists()


def test_uninstall_removes_the_spec_of_every_spec_dir_install_wrote_to(host):
    """A second install with another --cdi-spec-dir is journaled too: uninstall --mode cdi
    (what prerm runs, without --cdi-spec-dir) leaves no spec of ours behind in either."""
    other = host.tmp / "cdi-b"
    host.docker("28.5.2", cdi_on=True)
    before = host.write_config('{"cdi-spec-dirs": ["/etc/cdi", "SPECDIR", "%s"]}\n' % other)
    assert host.install().returncode == 0
    r = host.run("install", "--runtime-path", RUNTIME, "--allow-missing-runtime", "--mode", "cdi",
                 "--cdi-spec-dir",
                 str(other), "--reload", "none", "--docker-host",
                 f"unix://{host.engine.socket_path}", "--json", mode=False)
    assert r.returncode == 0, r.stderr
    assert (other / "nvidia.yaml").is_file() and host.spec.is_file()
    r = host.run("uninstall", "--mode", "cdi", "--reload", "none", "--docker-host",
                 f"unix://{host.engine.socket_path}", "--json", mode=False)
    assert r.returncode == 0, r.stderr
    assert not host.spec.exists()
    assert not (other / "nvidia.yaml").exists()
    assert host.config.read_bytes() == before
