"""`nvdocker2 backups --engine containerd|crio`: the backups of every file of the engine, one
group per transaction, and a rollback hint that names the engine (reference §11). Backups are made
by real engine transactions through the CLI (no containerd or CRI-O is asked: --reload none)."""

from __future__ import annotations

import hashlib
import json

import pytest
from ..cli_run import cli, engine_env

RT = "/usr/bin/nvidia-container-runtime"
V3 = b"version = 3\n# site settings\n"


@pytest.fixture
def env(tmp_path, monkeypatch):
    return engine_env(tmp_path, monkeypatch, V3)


def _ok(*args):
    code, out, err = cli(*args)
    assert code == 0, err
    return out


def _listed(cfg, engine="containerd"):
    return json.loads(_ok("backups", "--engine", engine, "--config", str(cfg), "--json"))


def test_containerd_lists_root_and_dropin_backups_by_transaction(env):
    dropin = env.parent / "conf.d" / "99-nvidia.toml"
    _ok("install", "--engine", "containerd", "--no-verify", "--config", str(env), "--runtime-path",
        RT, "--allow-missing-runtime")
    assert dropin.exists() and b"conf.d" in env.read_bytes()  # both files written
    _ok("install", "--engine", "containerd", "--no-verify", "--config", str(env), "--runtime-path",
        "/opt/bin/nvidia-container-runtime", "--allow-missing-runtime")  # the drop-in alone changes
    out = _listed(env)
    assert out["engine"] == "containerd" and out["config"] == str(env)
    assert out["files"] == [str(env), str(dropin)]
    got = [(b["config"], b["existed"], b["transaction"]) for b in out["backups"]]
    newest, first = got[0][2], got[1][2]
    assert newest != first and got[2][2] == first
    assert got == [(str(dropin), True, newest), (str(dropin), False, first),
                   (str(env), True, first)]
    assert [b["time"] for b in out["backups"]] == sorted((b["time"] for b in out["backups"]),
                                                        reverse=True)

    text = _ok("backups", "--engine", "containerd", "--config", str(env))
    ids = [b["id"] for b in out["backups"]]
    lines = text.splitlines()
    assert lines[0] == "engine: containerd"
    assert lines[2] == f"files: {env}, {dropin}"
    # one group per transaction, newest first; its files in the order the transaction saved them
    head_new = lines.index(f"transaction {newest}: install runtime nvidia (containerd)")
    head_old = lines.index(f"transaction {first}: install runtime nvidia (containerd)")
    assert head_new < head_old
    assert lines[head_new + 1].split()[0] == ids[0] and lines[head_new + 1].endswith(str(dropin))
    assert lines[head_old + 1].split()[0] == ids[2] and lines[head_old + 1].endswith(str(env))
    assert lines[head_old + 2].split()[0] == ids[1] and "(no file)" in lines[head_old + 2]
    assert lines[-1] == (f"restore one with: nvdocker2 rollback ID --engine containerd --config "
                         f"{env} (the other files of its transaction come back too)")

    # the hint is a command that works: the first transaction's backups give the original back
    _ok("rollback", ids[2], "--engine", "containerd", "--no-verify", "--config", str(env))
    assert env.read_bytes() == V3 and not dropin.exists()


def test_listing_survives_a_root_config_that_no_longer_parses(env):
    _ok("install", "--engine", "containerd", "--no-verify", "--config", str(env), "--runtime-path",
        RT, "--allow-missing-runtime")
    env.write_bytes(b"version = 3\n[plugins\n")
    out = _listed(env)
    assert {b["config"] for b in out["backups"]} == {str(env), str(env.parent / "conf.d" /
                                                                    "99-nvidia.toml")}


def test_other_files_backups_are_not_listed(env, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    other = tmp_path / "elsewhere" / "config.toml"  # its own conf.d
    other.write_bytes(V3)
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}\n")
    _ok("install", "--config", str(daemon), "--reload", "none", "--runtime-path", RT,
        "--allow-missing-runtime")
    _ok("install", "--engine", "containerd", "--no-verify", "--config", str(other),
        "--runtime-path", RT, "--allow-missing-runtime")
    out = _listed(env)
    assert out["backups"] == []
    text = _ok("backups", "--engine", "containerd", "--config", str(env))
    assert f"no backups in {tmp_path / 'state' / 'backups'}" in text
    assert "restore one with" not in text


def test_crio_lists_the_dropin_backups_and_names_crio_in_the_hint(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    drop = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    drop.parent.mkdir()
    for name in ("nvidia", "nvidia-cdi"):
        _ok("install", "--engine", "crio", "--config", str(drop), "--runtime-name", name,
            "--runtime-path", RT, "--allow-missing-runtime", "--reload", "none")
    out = _listed(drop, "crio")
    assert out["engine"] == "crio" and out["files"] == [str(drop)]
    assert [(b["config"], b["existed"]) for b in out["backups"]] == [(str(drop), True),
                                                                      (str(drop), False)]
    assert out["backups"][0]["reason"].startswith("install runtime nvidia-cdi (crio) [")
    text = _ok("backups", "--engine", "crio", "--config", str(drop))
    assert f"rollback ID --engine crio --config {drop} " in text
    _ok("rollback", out["backups"][0]["id"], "--engine", "crio", "--config", str(drop),
        "--reload", "none")
    assert "nvidia-cdi" not in drop.read_text() and 'runtimes.nvidia]' in drop.read_text()


def test_a_backup_keeps_its_files_extension(env, tmp_path):
    """A TOML file's backup ends in .toml, daemon.json's in .json, CRI-O's drop-in's in .conf; each
    holds the exact bytes the change replaced."""
    daemon = tmp_path / "daemon.json"
    daemon.write_bytes(b'{"debug": true}\n')
    drop = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    drop.parent.mkdir()
    _ok("install", "--engine", "containerd", "--config", str(env), "--runtime-path", RT,
        "--allow-missing-runtime",
        "--reload", "none")
    _ok("install", "--config", str(daemon), "--reload", "none", "--runtime-path", RT,
        "--allow-missing-runtime")
    for name in ("nvidia", "nvidia-cdi"):
        _ok("install", "--engine", "crio", "--config", str(drop), "--runtime-path", RT,
            "--allow-missing-runtime",
            "--runtime-name", name, "--reload", "none")
        if name == "nvidia":
            first = drop.read_bytes()
    saved = {}
    for cfg, engine in ((env, "containerd"), (daemon, "docker"), (drop, "crio")):
        for b in _listed(cfg, engine)["backups"]:
            if b["existed"]:
                saved[b["config"]] = b["file"]
    assert saved[str(env)].endswith(".toml") and saved[str(daemon)].endswith(".json")
    assert saved[str(drop)].endswith(".conf")
    assert open(saved[str(env)], "rb").read() == V3
    assert open(saved[str(daemon)], "rb").read() == b'{"debug": true}\n'
    assert open(saved[str(drop)], "rb").read() == first


def test_a_backup_made_before_extensions_is_listed_and_restored(env, tmp_path):
    """Backups of 0.1 saved every file as ID.json, with no "file" in the metadata."""
    bid = "20250101T000000Z-0a1b2c"
    backups = tmp_path / "state" / "backups"
    backups.mkdir(parents=True, mode=0o700)
    (backups / f"{bid}.json").write_bytes(V3)
    meta = {"id": bid, "time": "2025-01-01T00:00:00.000000Z", "reason": "install runtime nvidia",
            "sha256": hashlib.sha256(V3).hexdigest(), "config": str(env), "existed": True,
            "size": len(V3)}
    (backups / f"{bid}.meta.json").write_text(json.dumps(meta))
    for p in backups.iterdir():
        p.chmod(0o600)
    env.write_bytes(b"version = 3\n# changed since\n")
    listed = _listed(env)["backups"]
    assert [(b["id"], b["file"]) for b in listed] == [(bid, str(backups / f"{bid}.json"))]
    _ok("rollback", bid, "--engine", "containerd", "--config", str(env), "--reload", "none")
    assert env.read_bytes() == V3
