"""install / uninstall / rollback as transactions: order of steps, idempotence, the journal,
the transitional file, and putting everything back when dockerd does not take a change.

`SimulatedDockerd` is a test stand-in at the Daemon boundary (the end-to-end tests use a real
private dockerd): on reload it reads the file the way dockerd 20.10 does on SIGHUP.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdocker2.engines import docker as docker_engine
from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal
from nvdocker2.errors import BadInput, DockerdRejected, EnvironmentProblem, RollbackFailed
from nvdocker2.engines.base import VerifyFailed
from nvdocker2.engines.docker.service import Expectation

RT = "/usr/bin/nvidia-container-runtime"
BUILTIN = {"runc": "runc", "io.containerd.runc.v2": "runc"}


class SimulatedDockerd:
    """Test stand-in for a running dockerd (not a mock of our code): SIGHUP semantics of
    dockerd 20.10 — `runtimes` replaced only when the key is in the file, `default-runtime`
    only when non-empty, an unreadable file or an undefined default keeps the running config."""

    strategy = "signal"
    verifies = True

    def __init__(
        self,
        config: Path,
        refuse_path: str | None = None,
        fail_reload_at: int | None = None,
        refuse_candidate: bool = False,
    ) -> None:
        self.config = config
        self.runtimes: dict[str, str] = dict(BUILTIN)
        self.default = "runc"
        self.reloads: list[bytes | None] = []
        self.refuse_path = refuse_path
        self.fail_reload_at = fail_reload_at
        self.refuse_candidate = refuse_candidate
        self.candidates: list[dict] = []

    def check_candidate(self, config_path, candidate, candidate_file):
        assert Path(candidate_file).parent == Path(config_path).resolve().parent
        assert json.loads(Path(candidate_file).read_bytes()) == json.loads(json.dumps(candidate))
        self.candidates.append(candidate)
        if self.refuse_candidate:
            raise BadInput("dockerd runs with --default-runtime, which conflicts with the file")

    def reload(self):
        n = len(self.reloads) + 1
        try:
            raw = self.config.read_bytes()
        except FileNotFoundError:
            raw = None
        self.reloads.append(raw)
        if self.fail_reload_at == n:
            raise EnvironmentProblem("cannot send SIGHUP: dockerd is gone")
        if raw is None:
            return
        try:
            data = json.loads(raw)
        except ValueError:
            return
        rts = dict(self.runtimes)
        if "runtimes" in data:
            rts = dict(BUILTIN)
            for k, v in data["runtimes"].items():
                if self.refuse_path and v.get("path") == self.refuse_path:
                    return  # "invalid runtime": logged, running config kept
                rts[k] = v.get("path")
        default = data.get("default-runtime") or self.default
        if default not in rts:
            return
        self.runtimes, self.default = rts, default

    def verify(self, expect: Expectation, timeout: float) -> None:
        for name, path in expect.present.items():
            if self.runtimes.get(name) != path:
                raise VerifyFailed(
                    f"dockerd reports runtime {name} as {self.runtimes.get(name)!r}, "
                    f"expected {path!r}"
                )
        for name in expect.absent:
            if name in self.runtimes:
                raise VerifyFailed(f"dockerd still reports runtime {name}")
        if self.default != expect.default_runtime:
            raise VerifyFailed(f"dockerd reports default runtime {self.default!r}")


@pytest.fixture
def cfg(tmp_path):
    return tmp_path / "etc" / "daemon.json"


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def write(p: Path, data: bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


ORIGINAL = b'{\n  "debug": true,\n  "log-opts": {"max-size": "10m"}\n}\n'


def test_install_reloads_verifies_and_reports(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg)
    res = docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state, set_default=True)
    assert res.changed and res.verified and res.reload == "signal" and res.backup
    assert d.runtimes["nvidia"] == RT and d.default == "nvidia"
    assert len(d.reloads) == 1
    assert json.loads(cfg.read_bytes())["runtimes"] == {"nvidia": {"path": RT}}
    assert Backups(state).read(Backups(state).get(res.backup)) == ORIGINAL


def test_second_install_is_unchanged_no_backup_no_reload(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg)
    docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    after = cfg.read_bytes()
    res = docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    assert not res.changed and res.backup is None and res.reload == "none"
    assert len(d.reloads) == 1 and len(Backups(state).all()) == 1
    assert cfg.read_bytes() == after


def test_dockerd_refusing_the_change_restores_the_file_and_exits_4(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg, refuse_path=RT)
    with pytest.raises(DockerdRejected) as ei:
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    assert ei.value.exit_code == 4
    assert "dockerd reports runtime nvidia as None" in ei.value.message
    assert "restored from backup" in ei.value.message
    assert cfg.read_bytes() == ORIGINAL
    assert "nvidia" not in d.runtimes
    assert Journal(state, cfg).load() == {}
    assert len(d.reloads) == 2  # the change, then the previous file


def test_failed_rollback_exits_5_naming_the_backup_file(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg, refuse_path=RT, fail_reload_at=2)
    with pytest.raises(RollbackFailed) as ei:
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    backup = Backups(state).all()[0]
    assert ei.value.exit_code == 5
    assert str(backup.file) in ei.value.message
    assert f"cp {backup.file} {cfg}" in ei.value.hint
    assert backup.file.read_bytes() == ORIGINAL


def test_a_failed_way_back_still_leaves_the_previous_bytes(cfg, state):
    # The way back reloads an in-between file ("runtimes": {}) first; when that reload fails
    # the file must not keep those bytes.
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg, refuse_path=RT, fail_reload_at=2)
    with pytest.raises(RollbackFailed) as ei:
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    assert json.loads(d.reloads[1]) == dict(json.loads(ORIGINAL), runtimes={})
    assert cfg.read_bytes() == ORIGINAL
    assert ei.value.message.endswith("and the file has its previous bytes again")


class DriftedDockerd(SimulatedDockerd):
    """A dockerd running a default runtime that its file no longer names (keys removed by
    hand, then a reload: dockerd keeps both); /info says so."""

    def __init__(self, config: Path, default: str) -> None:
        super().__init__(config)
        self.runtimes[default], self.default = "/usr/bin/other-runtime", default

    def running_default(self) -> str:
        return self.default


def test_install_reloads_the_running_default_away_when_no_file_names_it(cfg, state):
    write(cfg, ORIGINAL)
    d = DriftedDockerd(cfg, "nvidia")
    result = docker_engine.install(cfg, runtime_name="nvc", runtime_path=RT, daemon=d,
                                   state=state)
    assert (d.default, d.runtimes.get("nvc")) == ("runc", RT) and "nvidia" not in d.runtimes
    assert json.loads(d.reloads[0])["default-runtime"] == "runc"
    assert "default-runtime" not in json.loads(cfg.read_bytes())
    assert any('dockerd runs the default runtime "nvidia"' in n for n in result.notes)


def test_reload_impossible_exits_3_with_the_file_unchanged(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg, fail_reload_at=1)
    with pytest.raises(EnvironmentProblem) as ei:
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    assert ei.value.exit_code == 3 and "restored" in ei.value.message
    assert cfg.read_bytes() == ORIGINAL


def test_candidate_refused_before_anything_is_written(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg, refuse_candidate=True)
    with pytest.raises(BadInput):
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state)
    assert cfg.read_bytes() == ORIGINAL
    assert Backups(state).all() == [] and d.reloads == []
    assert sorted(p.name for p in cfg.parent.iterdir()) == ["daemon.json"]


def test_uninstall_on_a_live_daemon_uses_the_transitional_file(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg)
    docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state, set_default=True)
    res = docker_engine.uninstall(cfg, daemon=d, state=state, own_runtime_paths=[RT])
    assert res.changed and res.verified
    trans = json.loads(d.reloads[-1])
    assert trans["runtimes"] == {} and trans["default-runtime"] == "runc"
    assert "nvidia" not in d.runtimes and d.default == "runc"
    assert cfg.read_bytes() == ORIGINAL
    assert Journal(state, cfg).load() == {}


def test_uninstall_with_no_daemon_writes_the_final_file_directly(cfg, state):
    write(cfg, ORIGINAL)
    docker_engine.install(cfg, runtime_path=RT, state=state)
    res = docker_engine.uninstall(cfg, state=state)
    assert res.changed and not res.verified and res.reload == "none"
    assert cfg.read_bytes() == ORIGINAL
    assert any("dockerd was not reloaded" in n for n in res.notes)


def test_uninstall_restores_previous_entry_and_previous_default_runtime(cfg, state):
    original = (
        b'{\n    "default-runtime": "crun",\n    "runtimes": {\n        "crun": {\n'
        b'            "path": "/usr/bin/crun"\n        },\n        "nvidia": {\n'
        b'            "path": "nvidia-container-runtime",\n            "runtimeArgs": []\n'
        b"        }\n    }\n}\n"
    )
    write(cfg, original)
    docker_engine.install(cfg, runtime_path=RT, state=state, set_default=True)
    data = json.loads(cfg.read_bytes())
    assert data["default-runtime"] == "nvidia" and data["runtimes"]["nvidia"] == {"path": RT}
    docker_engine.uninstall(cfg, state=state)
    assert cfg.read_bytes() == original


def test_reinstall_with_a_new_path_keeps_the_first_previous_value(cfg, state):
    write(cfg, b'{"runtimes": {"nvidia": {"path": "/old"}}}')
    docker_engine.install(cfg, runtime_path=RT, state=state)
    docker_engine.install(cfg, runtime_path="/opt/new/nvidia-container-runtime", state=state)
    docker_engine.uninstall(cfg, state=state)
    assert cfg.read_bytes() == b'{"runtimes": {"nvidia": {"path": "/old"}}}'


def test_uninstall_without_journal_removes_only_our_runtime(cfg, state):
    write(cfg, b'{"runtimes": {"nvidia": {"path": "/opt/other/nvidia"}}}')
    res = docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert not res.changed and any("left in place" in w for w in res.warnings)
    write(
        cfg, b'{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "%s"}}}' % RT.encode()
    )
    res = docker_engine.uninstall(cfg, state=state, own_runtime_paths=[RT])
    assert res.changed
    assert cfg.read_bytes() == b'{"runtimes": {}}'


def test_dry_run_touches_nothing(cfg, state):
    write(cfg, ORIGINAL)
    res = docker_engine.install(cfg, runtime_path=RT, state=state, dry_run=True)
    assert res.changed and res.dry_run
    assert f"+++ b{cfg}" in res.diff and '+  "runtimes": {' in res.diff
    assert cfg.read_bytes() == ORIGINAL and not state.exists()


def test_install_creates_a_missing_file_and_uninstall_removes_it(cfg, state):
    cfg.parent.mkdir(parents=True)
    res = docker_engine.install(cfg, runtime_path=RT, state=state)
    assert res.changed and res.backup_file is None
    assert (
        cfg.read_bytes() == b'{\n    "runtimes": {\n        "nvidia": {\n'
        b'            "path": "%s"\n        }\n    }\n}\n' % RT.encode()
    )
    assert oct(cfg.stat().st_mode & 0o777) == "0o644"
    docker_engine.uninstall(cfg, state=state)
    assert not cfg.exists()


def test_empty_file_is_repaired_by_install(cfg, state):
    write(cfg, b"")
    docker_engine.install(cfg, runtime_path=RT, state=state)
    assert json.loads(cfg.read_bytes()) == {"runtimes": {"nvidia": {"path": RT}}}


def test_rollback_restores_newest_backup_and_can_itself_be_undone(cfg, state):
    write(cfg, ORIGINAL)
    docker_engine.install(cfg, runtime_path=RT, state=state)
    installed = cfg.read_bytes()
    res = docker_engine.rollback(cfg, state=state)
    assert res.changed and cfg.read_bytes() == ORIGINAL
    res2 = docker_engine.rollback(cfg, state=state)
    assert res2.changed and cfg.read_bytes() == installed
    assert [b.reason.split()[0] for b in Backups(state).all(cfg)] == [
        "rollback",
        "rollback",
        "install",
    ]


def test_rollback_by_id_and_to_a_file_that_did_not_exist(cfg, state):
    cfg.parent.mkdir(parents=True)
    first = docker_engine.install(cfg, runtime_path=RT, state=state)
    docker_engine.install(cfg, runtime_path=RT, runtime_args=["-v"], state=state)
    d = SimulatedDockerd(cfg)
    d.reload()
    assert d.runtimes["nvidia"] == RT
    res = docker_engine.rollback(None, first.backup, state=state, daemon=d)
    assert res.changed and res.verified and not cfg.exists()
    assert "nvidia" not in d.runtimes
    with pytest.raises(BadInput, match="no backup with id"):
        docker_engine.rollback(None, "20200101T000000Z-000000", state=state)


def test_rollback_without_backups_is_bad_input(cfg, state):
    write(cfg, ORIGINAL)
    with pytest.raises(BadInput, match="no backups"):
        docker_engine.rollback(cfg, state=state)


def test_only_the_newest_20_backups_are_kept(cfg, state):
    write(cfg, b"{}")
    for i in range(23):
        docker_engine.install(cfg, runtime_name=f"rt{i}", runtime_path=RT, state=state)
    backups = Backups(state).all(cfg)
    assert len(backups) == 20
    assert (
        backups[0].reason == "install runtime rt22" and backups[-1].reason == "install runtime rt3"
    )


def test_expectation_checks_only_what_changed():
    before = {"runtimes": {"kata": {"path": "/k"}, "nvidia": {"path": "/a"}}}
    after = {
        "runtimes": {"kata": {"path": "/k"}, "nvidia": {"path": "/b"}},
        "default-runtime": "nvidia",
    }
    assert docker_engine.expectation(after, before) == Expectation({"nvidia": "/b"}, (), "nvidia")
    assert docker_engine.expectation(before, after) == Expectation({"nvidia": "/a"}, (), "runc")
    assert docker_engine.expectation({}, before).absent == ("kata", "nvidia")


def test_exit_4_quotes_what_dockerd_logged(cfg, state, tmp_path):
    write(cfg, ORIGINAL)
    log = tmp_path / "dockerd.log"
    log.write_text('time="t0" level=error msg="an old error, before this change"\n')

    class LoggingDockerd(SimulatedDockerd):
        def reload(self):
            with open(log, "a") as f:
                f.write('time="t1" level=info msg="Got signal to reload configuration"\n')
                if len(self.reloads) == 0:
                    f.write('time="t1" level=error msg="invalid runtime path: no such file"\n')
            super().reload()

    d = LoggingDockerd(cfg, refuse_path=RT)
    with pytest.raises(DockerdRejected) as ei:
        docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state, dockerd_log=log)
    assert (
        ei.value.hint
        == 'dockerd logged: time="t1" level=error msg="invalid runtime path: no such file"'
    )
    assert cfg.read_bytes() == ORIGINAL


def test_missing_config_directory_is_created_one_level_only(tmp_path, state):
    cfg = tmp_path / "etc" / "docker" / "daemon.json"
    (tmp_path / "etc").mkdir()
    res = docker_engine.install(cfg, runtime_path=RT, state=state)
    assert res.changed and f"created the directory {cfg.parent}" in res.notes
    assert oct(cfg.parent.stat().st_mode & 0o777) == "0o755"
    deep = tmp_path / "nope" / "docker" / "daemon.json"
    with pytest.raises(BadInput, match="does not exist"):
        docker_engine.install(deep, runtime_path=RT, state=state)
    assert not (tmp_path / "nope").exists()


def test_uninstall_finishes_one_killed_after_its_transitional_reload(cfg, state):
    write(cfg, ORIGINAL)
    d = SimulatedDockerd(cfg)
    docker_engine.install(cfg, runtime_path=RT, daemon=d, state=state, set_default=True)
    # What a killed uninstall leaves: the transitional file in place, the journal untouched.
    write(cfg, ORIGINAL[:-3] + b',\n  "runtimes": {},\n  "default-runtime": "runc"\n}\n')
    res = docker_engine.uninstall(cfg, state=state)
    assert res.changed and cfg.read_bytes() == ORIGINAL


def test_backup_bytes_without_metadata_are_pruned(cfg, state):
    write(cfg, ORIGINAL)
    orphan = state / "backups" / "20200101T000000Z-abcdef.json"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"{}")
    docker_engine.install(cfg, runtime_path=RT, state=state)
    assert not orphan.exists() and len(Backups(state).all()) == 1
