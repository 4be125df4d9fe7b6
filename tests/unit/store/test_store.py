"""The one atomic-write helper, the lock, backups and the journal."""

from __future__ import annotations

import os
import re

import pytest
from filelock import FileLock

from nvdocker2.store.atomic import (
    TMP_MARK,
    AsRead,
    ChangedMeanwhile,
    atomic_write,
    check_unchanged,
    clean_stale_temps,
    make_dirs,
    stage,
)
from nvdocker2.store.backups import Backups, sha256
from nvdocker2.store.journal import Journal, slot, unslot
from nvdocker2.store.lock import (
    UntrustedState,
    check_state_dir,
    clean_state_temps,
    ensure_state_dir,
    locked,
    read_state_file,
)
from nvdocker2.engines.docker.daemonjson.edit import ABSENT
from nvdocker2.errors import BadInput, EnvironmentProblem


def test_atomic_write_leaves_exactly_the_file_with_its_mode_and_owner(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"old")
    os.chmod(p, 0o640)
    os.chown(p, 1234, 4321)
    atomic_write(p, b"new")
    assert p.read_bytes() == b"new"
    st = p.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, 1234, 4321)
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_new_file_gets_0644(tmp_path):
    p = tmp_path / "daemon.json"
    atomic_write(p, b"{}")
    assert p.stat().st_mode & 0o777 == 0o644


def test_symlink_is_written_through_and_stays_a_symlink(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    (real_dir / "conf.json").write_bytes(b"old")
    link = tmp_path / "daemon.json"
    link.symlink_to(real_dir / "conf.json")
    atomic_write(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(real_dir / "conf.json")
    assert (real_dir / "conf.json").read_bytes() == b"new"
    assert os.listdir(real_dir) == ["conf.json"]


def test_staged_file_is_complete_before_commit_and_gone_after_discard(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"old")
    with stage(p, b"candidate") as s:
        assert re.fullmatch(r"\.daemon\.json\.nvdocker2-tmp-\d+-[0-9a-f]{8}", s.path.name)
        assert s.path.read_bytes() == b"candidate" and p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_failed_rename_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"old")

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(EnvironmentProblem, match="no space left"):
        atomic_write(p, b"new")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["daemon.json"]


def test_stale_temps_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"{}")
    dead = tmp_path / f".daemon.json{TMP_MARK}999999999-deadbeef"
    live = tmp_path / f".daemon.json{TMP_MARK}1-cafecafe"  # pid 1 is alive
    other = tmp_path / ".daemon.json.swp"
    for f in (dead, live, other):
        f.write_bytes(b"x")
    assert clean_stale_temps(p) == [dead]
    assert sorted(os.listdir(tmp_path)) == sorted(["daemon.json", live.name, other.name])


def test_lock_held_elsewhere_times_out_with_exit_3(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    holder = FileLock(str(state / "lock"))
    holder.acquire()
    try:
        with pytest.raises(EnvironmentProblem) as ei:
            with locked(state, 0.2):
                pass
        assert ei.value.exit_code == 3 and "gave up after 0.2 s" in ei.value.message
    finally:
        holder.release()
    with locked(state, 0.2) as path:
        assert path == state / "lock"


def test_backup_ids_sort_by_time_and_carry_sha256(tmp_path):
    b = Backups(tmp_path)
    first = b.create(tmp_path / "daemon.json", b"one", "install runtime nvidia")
    second = b.create(tmp_path / "daemon.json", None, "install runtime x")
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", first.id)
    assert first.sha256 == sha256(b"one") and first.file.read_bytes() == b"one"
    assert [x.id for x in b.all(tmp_path / "daemon.json")] == [second.id, first.id]
    assert b.read(second) is None and not second.existed
    assert b.all(tmp_path / "other.json") == []
    oct_mode = first.file.stat().st_mode & 0o777
    assert oct_mode == 0o600


def test_damaged_backup_is_refused(tmp_path):
    b = Backups(tmp_path)
    x = b.create(tmp_path / "daemon.json", b"one", "r")
    x.file.write_bytes(b"two")
    with pytest.raises(EnvironmentProblem, match="damaged"):
        b.read(x)
    with pytest.raises(BadInput, match="no backup"):
        b.get("nope")


def test_journal_round_trip_keeps_absent_and_exact_values(tmp_path):
    from nvdocker2.engines.docker.daemonjson.document import parse

    j = Journal(tmp_path, tmp_path / "daemon.json")
    assert j.load() == {} and j.read_bytes() is None
    prev = parse(b'{"path": "x", "n": 1.50}').data
    rec = {
        "config": str(tmp_path / "daemon.json"),
        "runtimes": {"nvidia": {"previous": slot(prev), "installed": {"path": "/y"}}},
        "default_runtime": {"previous": slot(ABSENT), "installed": "nvidia"},
    }
    j.write(rec)
    back = j.load()
    assert unslot(back["default_runtime"]["previous"]) is ABSENT
    assert back["runtimes"]["nvidia"]["previous"]["value"]["n"].text == "1.50"
    saved = j.read_bytes()
    j.write(None)
    assert not j.path.exists()
    j.restore(saved)
    assert j.read_bytes() == saved
    # Another config path has its own journal.
    assert Journal(tmp_path, tmp_path / "other.json").load() == {}


def test_stale_temps_in_backups_and_journal_are_removed(tmp_path):
    for sub in ("backups", "journal"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / f".x.json{TMP_MARK}999999999-ab12").write_bytes(b"partial")
        (tmp_path / sub / f".y.json{TMP_MARK}1-ab12").write_bytes(b"live writer")
        (tmp_path / sub / "keep.json").write_bytes(b"{}")
    removed = clean_state_temps(tmp_path)
    assert sorted(p.parent.name for p in removed) == ["backups", "journal"]
    for sub in ("backups", "journal"):
        assert sorted(os.listdir(tmp_path / sub)) == sorted(
            [f".y.json{TMP_MARK}1-ab12", "keep.json"]
        )


def test_make_dirs_creates_the_missing_levels_with_the_mode(tmp_path):
    make_dirs(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "f" / "x")


# --- reference §8: trust in the state directory, compare before replace, in-place writes ----------


def _state(tmp_path):
    state = tmp_path / "state"
    ensure_state_dir(state)
    return state


def test_a_fresh_state_dir_is_0700_and_trusted(tmp_path):
    state = _state(tmp_path)
    assert state.stat().st_mode & 0o777 == 0o700
    with locked(state, 5):
        assert (state / "lock").stat().st_mode & 0o777 == 0o600
    check_state_dir(state)


@pytest.mark.parametrize("mode, who", [(0o770, "its group"), (0o703, "others")])
def test_a_state_file_writable_by_others_is_refused(tmp_path, mode, who):
    state = _state(tmp_path)
    b = Backups(state)
    made = b.create(tmp_path / "daemon.json", b"{}", "r")
    os.chmod(made.file, mode)
    with pytest.raises(UntrustedState, match=f"{re.escape(str(made.file))} is writable "
                       f"by {who}") as ei:
        b.all()
    assert ei.value.exit_code == 3 and f"chmod go-w {made.file}" in ei.value.hint


def test_a_symlink_in_the_state_dir_is_refused_and_never_read(tmp_path):
    state = _state(tmp_path)
    (state / "journal").mkdir()
    j = Journal(state, tmp_path / "daemon.json")
    outside = tmp_path / "outside.json"
    outside.write_bytes(b'{"config": "x"}')
    j.path.symlink_to(outside)
    with pytest.raises(UntrustedState, match="is a symlink"):
        j.read_bytes()
    with pytest.raises(EnvironmentProblem, match="is a symlink; nothing was read"):
        read_state_file(j.path, "journal")


def test_state_files_are_replaced_not_written_through_a_symlink(tmp_path):
    state = _state(tmp_path)
    (state / "journal").mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = state / "journal" / "x.json"
    link.symlink_to(victim)
    atomic_write(link, b"ours", 0o600, follow=False)
    assert victim.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"ours"


def test_backup_id_that_does_not_match_its_file_is_ignored(tmp_path):
    state = _state(tmp_path)
    b = Backups(state)
    real = b.create(tmp_path / "daemon.json", b"{}", "r")
    meta = (b.dir / f"{real.id}.meta.json").read_text()
    (b.dir / "20990101T000000Z-aaaaaa.meta.json").write_text(meta)  # names another backup
    assert [x.id for x in b.all()] == [real.id]


def test_check_unchanged_sees_new_bytes_a_new_inode_and_a_removal(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"{}")
    with open(p, "rb") as f:
        read = AsRead(f.read(), os.fstat(f.fileno()))
    check_unchanged(p, read)
    p.write_bytes(b"[]")  # same size, maybe the same mtime: the bytes tell
    with pytest.raises(ChangedMeanwhile, match="changed"):
        check_unchanged(p, AsRead(b"{}"))
    p.unlink()
    with pytest.raises(ChangedMeanwhile, match="it was removed"):
        check_unchanged(p, read)
    check_unchanged(p, AsRead(None))
    p.write_bytes(b"{}")
    with pytest.raises(ChangedMeanwhile, match="it was created"):
        check_unchanged(p, AsRead(None))


@pytest.mark.parametrize("code", [16, 18])  # EBUSY, EXDEV
def test_a_file_that_cannot_be_renamed_over_is_written_in_place(tmp_path, monkeypatch, code):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"a much longer old content\n")
    os.chmod(p, 0o600)
    ino = p.stat().st_ino

    def refuse(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", refuse)
    assert atomic_write(p, b"new\n") == os.strerror(code)
    assert p.read_bytes() == b"new\n"
    assert (p.stat().st_ino, p.stat().st_mode & 0o777) == (ino, 0o600)
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_other_rename_errors_have_a_hint(tmp_path, monkeypatch):
    p = tmp_path / "daemon.json"
    p.write_bytes(b"old")

    def refuse(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(EnvironmentProblem) as ei:
        atomic_write(p, b"new")
    assert ei.value.hint and p.read_bytes() == b"old" and os.listdir(tmp_path) == ["daemon.json"]
