"""The engine-agnostic transaction (reference §2, §8, §11) with containerd and CRI-O engines and a
service stand-in at the service boundary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvdocker2.engines import transaction as txn
from nvdocker2.engines.base import Request, VerifyFailed
from nvdocker2.engines.base import Service as BaseService
from nvdocker2.engines.containerd import ContainerdEngine
from nvdocker2.engines.crio import MARK, CrioEngine, SystemdCrio, runtimes_from_status
from nvdocker2.errors import BadInput, DockerdRejected, RollbackFailed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RT = "/usr/bin/nvidia-container-runtime"
CFG = b"""version = 2
# site settings
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


class Service(BaseService):
    """Counts restarts; fails verification while `fail` > 0, or every apply when `broken`."""

    strategy = "systemd"
    verifies = True
    log_description = "the test log"

    def __init__(self, fail: int = 0, broken_after: int | None = None) -> None:
        self.fail, self.applied, self.verified, self.broken_after = fail, 0, [], broken_after

    def apply(self) -> None:
        self.applied += 1
        if self.broken_after is not None and self.applied > self.broken_after:
            raise VerifyFailed("containerd did not start")

    def verify(self, expect, timeout) -> None:
        self.verified.append(expect)
        if self.fail:
            self.fail -= 1
            raise VerifyFailed('containerd\'s CRI plugin reports: runtime "nvidia" is missing')


def _engine(tmp_path: Path) -> ContainerdEngine:
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(CFG)
    return ContainerdEngine(cfg, exe="", check=False)


def test_install_writes_backs_up_restarts_once_and_verifies(tmp_path):
    eng, svc = _engine(tmp_path), Service()
    res = txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert res.changed and res.verified and svc.applied == 1
    assert svc.verified == [{"present": {"nvidia": RT}, "absent": [], "default": None}]
    assert eng.config.read_bytes().startswith(CFG)
    again = txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert not again.changed and svc.applied == 1  # nothing written, no restart
    res = txn.run(eng, "uninstall", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert eng.config.read_bytes() == CFG and svc.applied == 2


def test_engine_that_does_not_report_the_runtime_is_rolled_back_exit_4(tmp_path):
    eng, svc = _engine(tmp_path), Service(fail=1)
    with pytest.raises(DockerdRejected) as e:
        txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st",
                timeout=0.1)
    assert e.value.exit_code == 4 and "restored from backup" in e.value.message
    assert eng.config.read_bytes() == CFG
    assert svc.applied == 2  # restarted again on the old bytes
    assert svc.verified[-1]["absent"] == ["nvidia"]  # and the old state verified


def test_rollback_that_fails_too_names_the_backup_exit_5(tmp_path):
    eng, svc = _engine(tmp_path), Service(fail=1, broken_after=1)
    with pytest.raises(RollbackFailed) as e:
        txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert e.value.exit_code == 5 and "backups" in e.value.message
    assert eng.config.read_bytes() == CFG  # the bytes are back even so


def test_file_changed_by_another_writer_is_not_overwritten(tmp_path, monkeypatch):
    """Compare before replace: a write between the read and the rename makes the transaction
    start again from the read, so the other writer's change is kept."""
    eng, svc = _engine(tmp_path), Service()
    real = eng.check_candidate
    calls = []

    def meddle(ctx, plan, staged):
        if not calls:
            eng.config.write_bytes(CFG + b"# added by another tool\n")
        calls.append(1)
        return real(ctx, plan, staged)

    monkeypatch.setattr(eng, "check_candidate", meddle)
    txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert len(calls) == 2
    data = eng.config.read_bytes()
    assert data.startswith(CFG + b"# added by another tool\n") and b"BinaryName" in data


def test_rollback_restores_the_newest_transaction(tmp_path):
    eng, svc = _engine(tmp_path), Service()
    st = tmp_path / "st"
    txn.run(eng, "install", Request("nvidia", RT), service=svc, state=st)
    res = txn.rollback(eng, None, service=svc, state=st)
    assert res.changed and eng.config.read_bytes() == CFG


def test_bad_toml_is_exit_2_and_nothing_written(tmp_path):
    eng = _engine(tmp_path)
    eng.config.write_bytes(b"version = 2\n[plugins\n")
    with pytest.raises(BadInput) as e:
        txn.run(eng, "install", Request("nvidia", RT), service=Service(), state=tmp_path / "st")
    assert e.value.exit_code == 2 and eng.config.read_bytes() == b"version = 2\n[plugins\n"
    assert not (tmp_path / "st" / "backups").exists()


# --- CRI-O --------------------------------------------------------------------------------


def test_crio_dropin_is_ours_alone(tmp_path):
    d = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    d.parent.mkdir()
    eng, svc = CrioEngine(d), Service()
    res = txn.run(eng, "install", Request("nvidia", RT, True), service=svc, state=tmp_path / "s")
    assert res.changed and svc.applied == 1
    data = tomllib.loads(d.read_text())
    assert data["crio"]["runtime"]["runtimes"]["nvidia"] == {"runtime_path": RT,
                                                            "runtime_type": "oci"}
    assert data["crio"]["runtime"]["default_runtime"] == "nvidia"
    assert d.read_text().startswith(MARK)
    assert not txn.run(eng, "install", Request("nvidia", RT, True), service=svc,
                       state=tmp_path / "s").changed
    txn.run(eng, "uninstall", Request("nvidia", RT), service=svc, state=tmp_path / "s")
    assert not d.exists() and svc.applied == 2


def test_crio_refuses_a_dropin_it_did_not_write(tmp_path):
    d = tmp_path / "99-nvidia.conf"
    d.write_text("[crio.runtime]\nlog_level = 'debug'\n")
    with pytest.raises(BadInput) as e:
        txn.run(CrioEngine(d), "install", Request("nvidia", RT), state=tmp_path / "s")
    assert "not written by nvdocker2" in e.value.message
    assert d.read_text() == "[crio.runtime]\nlog_level = 'debug'\n"


def test_crio_verify_reads_crio_status_config():
    text = ('[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\n'
            'runtime_path = "/usr/bin/crun"\n[crio.runtime.runtimes.nvidia]\n'
            f'runtime_path = "{RT}"\n')
    assert runtimes_from_status(text) == ({"crun": "/usr/bin/crun", "nvidia": RT}, "crun")

    class P:
        returncode, stdout, stderr = 0, text, ""

    calls = []
    svc = SystemdCrio(run=lambda argv, **kw: calls.append(argv) or P(), crio="/usr/bin/crio")
    svc.apply()
    svc.verify({"present": {"nvidia": RT}, "absent": [], "default": None}, 1)
    assert calls[0] == ["systemctl", "restart", "crio"]
    assert calls[1] == ["/usr/bin/crio", "status", "--socket", "/var/run/crio/crio.sock", "config"]
    with pytest.raises(VerifyFailed, match="default runtime is crun"):
        svc.verify({"present": {}, "absent": [], "default": "nvidia"}, 0)


def test_docker_runs_through_the_shared_transaction(tmp_path):
    from nvdocker2.engines.docker import DockerEngine

    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(b'{\n  "debug": true\n}\n')
    eng = DockerEngine(cfg)
    res = txn.run(eng, "install", Request("nvidia", RT, True), service=eng.service(),
                  state=tmp_path / "st")
    assert res.changed and eng.files() == [cfg]
    assert cfg.read_bytes() == (b'{\n  "debug": true,\n  "runtimes": {\n    "nvidia": {\n'
                                b'      "path": "/usr/bin/nvidia-container-runtime"\n    }\n'
                                b'  },\n  "default-runtime": "nvidia"\n}\n')
    txn.run(eng, "uninstall", Request("nvidia", RT, own_runtime_paths=(RT,)),
            service=eng.service(), state=tmp_path / "st")
    assert cfg.read_bytes() == b'{\n  "debug": true\n}\n'
    assert eng.rollback(None, state=tmp_path / "st").changed


V3 = b"""version = 3
# site settings
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def _v3(tmp_path: Path) -> ContainerdEngine:
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(V3)
    return ContainerdEngine(cfg, exe="", check=False)


def test_uninstall_removes_the_dropin_directory_its_install_made(tmp_path):
    """containerd 2.x: install creates conf.d for its drop-in; the uninstall that removes the
    drop-in takes the directory away too, so the host is as it was."""
    eng, st = _v3(tmp_path), tmp_path / "st"
    res = txn.run(eng, "install", Request("nvidia", RT), service=Service(), state=st)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    assert res.changed and dropin.exists() and b"BinaryName" in dropin.read_bytes()
    assert any("created the directory" in n for n in res.notes)
    txn.run(eng, "uninstall", Request("nvidia", RT), service=Service(), state=st)
    assert eng.config.read_bytes() == V3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "st"]


def test_uninstall_keeps_a_dropin_directory_that_holds_other_files(tmp_path):
    eng, st = _v3(tmp_path), tmp_path / "st"
    txn.run(eng, "install", Request("nvidia", RT), service=Service(), state=st)
    (tmp_path / "conf.d" / "site.toml").write_bytes(b"# the site's own\n")
    txn.run(eng, "uninstall", Request("nvidia", RT), service=Service(), state=st)
    assert eng.config.read_bytes() == V3
    assert sorted(p.name for p in (tmp_path / "conf.d").iterdir()) == ["site.toml"]


def test_uninstall_keeps_a_dropin_directory_that_was_there_before(tmp_path):
    eng, st = _v3(tmp_path), tmp_path / "st"
    (tmp_path / "conf.d").mkdir()
    txn.run(eng, "install", Request("nvidia", RT), service=Service(), state=st)
    txn.run(eng, "uninstall", Request("nvidia", RT), service=Service(), state=st)
    assert eng.config.read_bytes() == V3 and list((tmp_path / "conf.d").iterdir()) == []


def test_a_config_replaced_by_identical_bytes_is_read_again(tmp_path, monkeypatch):
    """Compare before replace checks the file's identity, not only its bytes: another program
    that renamed a copy over the file between the read and the write makes nvdocker2 redo the
    change from a fresh read instead of renaming over a file it did not read."""
    eng, svc = _engine(tmp_path), Service()
    real = eng.check_candidate
    calls = []

    def meddle(ctx, plan, staged):
        if not calls:
            other = tmp_path / "other.toml"
            other.write_bytes(eng.config.read_bytes())
            other.replace(eng.config)
        calls.append(1)
        return real(ctx, plan, staged)

    monkeypatch.setattr(eng, "check_candidate", meddle)
    res = txn.run(eng, "install", Request("nvidia", RT), service=svc, state=tmp_path / "st")
    assert len(calls) == 2 and svc.applied == 1
    assert any("size, time or inode changed" in n for n in res.notes)
    assert b"BinaryName" in eng.config.read_bytes()


def test_a_config_that_cannot_be_renamed_over_is_written_in_place(tmp_path, monkeypatch):
    """A bind-mounted config.toml (rename gives EBUSY) is written in place, with a warning that
    names the backup; uninstall puts the bytes back the same way."""
    import errno

    import os

    eng, st = _engine(tmp_path), tmp_path / "st"
    real_replace = os.replace

    def replace(src, dst, *a, **kw):
        if Path(dst) == eng.config:
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    inode = eng.config.stat().st_ino
    res = txn.run(eng, "install", Request("nvidia", RT), service=Service(), state=st)
    assert any("written in place" in w and res.backup in w for w in res.warnings)
    assert eng.config.stat().st_ino == inode and b"BinaryName" in eng.config.read_bytes()
    txn.run(eng, "uninstall", Request("nvidia", RT), service=Service(), state=st)
    assert eng.config.read_bytes() == CFG and eng.config.stat().st_ino == inode
