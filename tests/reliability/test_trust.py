"""reference §8 against the attacks a security review reproduced: a state directory another user can
write, planted symlinks, crafted backup ids and journals, a program that edits daemon.json
between our read and our rename, a 0600 file recreated by rollback, a bind-mounted daemon.json.

The other user is `nobody`, acting through `setpriv`; the bind mount lives in a private mount
namespace (`unshare -m`). Every test asserts exit codes and the bytes and modes of the files a
user would look at.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from nvdocker2.store.backups import Backups
from nvdocker2.store.journal import Journal

from .conftest import NVDOCKER2, _need, run_cli

RT = "/usr/bin/nvidia-container-runtime"
NONE = ["--reload", "none", "--no-verify", "--runtime-path", RT, "--allow-missing-runtime"]
ORIGINAL = b'{\n    "debug": false\n}\n'
INSTALLED = (
    b'{\n    "debug": false,\n    "runtimes": {\n        "nvidia": {\n'
    b'            "path": "/usr/bin/nvidia-container-runtime"\n        }\n    }\n}\n'
)
SECRET = b'{"root only": true}\n'  # JSON, as a file the journal code could take for its own
RUN_HOOK = "NVDOCKER2_TEST_RUN_BEFORE_RENAME"  # fault injection: a write right before our rename


@pytest.fixture
def nobody():
    """Run a command as nobody:nogroup with no supplementary groups."""
    _need(os.geteuid() == 0, "needs root to act as another user")
    _need(shutil.which("setpriv") is not None, "needs setpriv (util-linux)")
    pw = pwd.getpwnam("nobody")

    def as_nobody(*cmd: str) -> None:
        r = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                            "--clear-groups", *cmd], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

    as_nobody.uid = pw.pw_uid  # type: ignore[attr-defined]
    return as_nobody


@pytest.fixture
def host():
    """A directory nobody can reach (pytest's own tmp_path is root-only), holding etc/ with a
    root-only secret and daemon.json, and the state directory path (not created)."""
    top = Path(tempfile.mkdtemp(prefix="nvd2-trust-", dir="/tmp"))
    top.chmod(0o755)
    (top / "etc").mkdir(mode=0o755)
    secret = top / "etc" / "shadow-like"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    cfg = top / "etc" / "daemon.json"
    cfg.write_bytes(ORIGINAL)
    try:
        yield top, cfg, secret, top / "state"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def cli(state: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, env={"NVDOCKER2_STATE_DIR": str(state), **(env or {})})


def tree(d: Path) -> dict[str, bytes | str]:
    """Every entry under `d` with its bytes (files) or link target, to show nothing changed."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(d))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


def assert_refused(r: subprocess.CompletedProcess, names: str) -> None:
    assert r.returncode == 3, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0].startswith("error: state directory ") and names in lines[0], r.stderr
    assert "nothing was read from it or written to it" in lines[0]
    assert lines[1].startswith("hint: ")


# --- the state directory (issue: a careless admin, a local user) --------------------------------


def test_world_writable_state_dir_is_refused_and_nothing_is_written(host):
    top, cfg, _, state = host
    state.mkdir(mode=0o700)
    state.chmod(0o777)
    r = cli(state, "install", "--config", str(cfg), *NONE)
    assert_refused(r, f"{state} is writable by its group and others (mode 0777)")
    assert "chmod go-w" in r.stderr.splitlines()[1]
    assert cfg.read_bytes() == ORIGINAL
    assert tree(state) == {}  # not even the lock file


@pytest.mark.parametrize("target", ["root-only file", "new file in a root-only dir"])
def test_journal_symlink_planted_by_another_user_never_makes_root_write_a_file(host, nobody,
                                                                                target):
    top, cfg, secret, state = host
    made = top / "etc" / "cron-like"
    link_to = secret if target == "root-only file" else made
    state.mkdir(mode=0o700)
    (state / "journal").mkdir(mode=0o700)
    for d in (state, state / "journal"):
        d.chmod(0o777)  # the careless admin
    journal = Journal(state, cfg).path
    nobody("ln", "-s", str(link_to), str(journal))
    r = cli(state, "install", "--config", str(cfg), *NONE)
    assert_refused(r, str(state))
    # The admin tightens the modes; the link nobody planted is still found.
    for d in (state, state / "journal"):
        d.chmod(0o700)
    r = cli(state, "install", "--config", str(cfg), *NONE)
    assert_refused(r, f"{journal} is a symlink")
    assert secret.read_bytes() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert not made.exists()
    assert cfg.read_bytes() == ORIGINAL


def test_file_planted_by_another_user_is_refused_even_in_a_tightened_dir(host, nobody):
    top, cfg, _, state = host
    (state / "backups").mkdir(parents=True, mode=0o700)
    (state / "backups").chmod(0o777)
    planted = state / "backups" / "20200101T000000Z-abcdef.meta.json"
    nobody("sh", "-c", f"echo '{{}}' > {planted}; chmod 600 {planted}")
    (state / "backups").chmod(0o700)
    r = cli(state, "backups", "--config", str(cfg))
    assert_refused(r, f"{planted} is owned by uid {nobody.uid}, not by you (uid 0)")
    assert f"rm -r {planted}" in r.stderr.splitlines()[1]


def test_planted_journal_never_makes_uninstall_write_the_attackers_runtime(host, nobody):
    top, cfg, _, state = host
    cfg.write_bytes(INSTALLED)
    (state / "journal").mkdir(parents=True, mode=0o700)
    for d in (state, state / "journal"):
        d.chmod(0o777)
    evil = {"config": str(cfg), "runtimes": {"nvidia": {
        "previous": {"present": True, "value": {"path": "/tmp/evil-runtime"}},
        "installed": {"path": RT}}}}
    journal = Journal(state, cfg).path
    nobody("sh", "-c", f"printf '%s' '{json.dumps(evil)}' > {journal}")
    r = cli(state, "uninstall", "--config", str(cfg), "--reload", "none", "--no-verify")
    assert_refused(r, str(state))
    assert cfg.read_bytes() == INSTALLED
    assert b"evil" not in cfg.read_bytes()


def test_state_dir_under_a_directory_another_user_can_write_is_refused(host):
    top, cfg, _, _ = host
    shared = top / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename the state dir away and plant one
    state = shared / "state"
    state.mkdir(mode=0o700)
    r = cli(state, "install", "--config", str(cfg), *NONE)
    assert_refused(r, f"{shared} (a directory above it) is writable by its group and others")
    assert cfg.read_bytes() == ORIGINAL and tree(state) == {}


def test_crafted_backup_ids_never_make_prune_unlink_outside_the_state_dir(host):
    top, cfg, secret, state = host
    (state / "backups").mkdir(parents=True, mode=0o700)
    victim = top / "victim.json"
    victim.write_bytes(b"keep me\n")
    for i, bid in enumerate(["../../victim", "/tmp/../" + str(victim)[1:-5], "x/../../victim"]):
        meta = {"id": bid, "time": f"1970-01-01T00:00:0{i}Z", "reason": "r", "sha256": None,
                "config": str(cfg), "existed": False, "size": 0}
        (state / "backups" / f"crafted{i}.meta.json").write_text(json.dumps(meta))
    before = tree(top)
    removed = Backups(state).prune(cfg, keep=0)
    assert removed == []
    assert victim.read_bytes() == b"keep me\n" and secret.read_bytes() == SECRET
    assert tree(top) == before  # nothing anywhere was unlinked
    r = cli(state, "rollback", "../../victim", "--config", str(cfg), *NONE[:3])
    assert r.returncode == 2 and "not a backup id" in r.stderr, r.stderr
    assert victim.exists() and cfg.read_bytes() == ORIGINAL


# --- compare before replace (another program writes daemon.json meanwhile) ----------------------


def test_a_concurrent_edit_between_read_and_rename_is_kept_and_backed_up(host):
    top, cfg, _, state = host
    flag = top / "wrote"
    theirs = b'{\n    "debug": true\n}\n'
    writer = f"[ -e {flag} ] || {{ touch {flag}; printf '%s' '{theirs.decode()}' > {cfg}; }}"
    r = cli(state, "install", "--config", str(cfg), *NONE,
            env={RUN_HOOK: writer})
    assert r.returncode == 0, r.stderr
    assert flag.exists()  # the other program did write between our read and our rename
    assert cfg.read_bytes() == INSTALLED.replace(b"false", b"true")  # their change is kept
    assert "was changed by another program meanwhile" in r.stdout
    saved = [b for b in Backups(state).all(cfg)]
    assert [Backups(state).read(b) for b in saved] == [theirs]


def test_a_file_that_keeps_changing_exits_3_with_nothing_written(host):
    top, cfg, _, state = host
    count = top / "count"
    writer = f"echo x >> {count}; printf '{{\"n\": %s}}\\n' $(wc -l < {count}) > {cfg}"
    r = cli(state, "install", "--config", str(cfg), *NONE, env={RUN_HOOK: writer})
    assert r.returncode == 3, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == (f"error: {cfg} was changed by another program 3 times while nvdocker2 "
                        "was editing it (its size, time or inode changed); gave up, nothing was "
                        "written") or "its bytes changed" in lines[0], r.stderr
    assert lines[1].startswith("hint: run again when the other program is done")
    assert cfg.read_bytes() == b'{"n": 3}\n'  # the other program's last write, not ours
    assert Backups(state).all(cfg) == []  # no backup of bytes we never replaced
    assert [p.name for p in cfg.parent.iterdir() if ".nvdocker2-tmp-" in p.name] == []


# --- backups keep mode, owner and group ---------------------------------------------------------


def test_rollback_recreating_a_deleted_0600_file_gives_back_its_mode_and_owner(host):
    top, cfg, _, state = host
    creds = b'{\n    "proxies": {"http-proxy": "http://user:s3cret@proxy:3128"}\n}\n'
    cfg.write_bytes(creds)
    cfg.chmod(0o600)
    os.chown(cfg, 1234, 4321)
    assert cli(state, "install", "--config", str(cfg), *NONE).returncode == 0
    assert cli(state, "uninstall", "--config", str(cfg), *NONE[:3]).returncode == 0
    assert cfg.read_bytes() == creds
    cfg.unlink()
    r = cli(state, "rollback", "--config", str(cfg), *NONE[:3])
    assert r.returncode == 0, r.stderr
    st = cfg.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 1234, 4321)
    listing = json.loads(cli(state, "backups", "--config", str(cfg), "--json").stdout)
    kept = {(b["mode"], b["uid"], b["gid"]) for b in listing["backups"] if b["file"]}
    assert kept == {("0600", 1234, 4321)}


# --- a daemon.json that cannot be renamed over -------------------------------------------------


def _in_namespace(script: str, state: Path) -> subprocess.CompletedProcess:
    _need(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    _need(probe.returncode == 0, f"cannot make a mount namespace: {probe.stderr.strip()}")
    return subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, NVDOCKER2_STATE_DIR=str(state)))


def test_bind_mounted_daemon_json_is_written_in_place_with_a_warning(host):
    top, cfg, _, state = host
    src = top / "source.json"
    src.write_bytes(ORIGINAL)
    src.chmod(0o640)
    nv = f"{NVDOCKER2}"
    r = _in_namespace(
        f"mount --bind {src} {cfg}\n"
        f"{nv} install --config {cfg} {' '.join(NONE)}\n"
        f"cmp {cfg} {src}\n"
        f"cp {cfg} {top}/after-install\n"
        f"{nv} uninstall --config {cfg} --reload none --no-verify\n", state)
    assert r.returncode == 0, r.stderr
    assert (top / "after-install").read_bytes() == INSTALLED
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert any("cannot be replaced by a rename (Device or resource busy; a bind mount?)" in w
               and "this write is not atomic" in w for w in warning), r.stderr
    assert src.read_bytes() == ORIGINAL  # uninstall, in place too, gave back the exact bytes
    assert stat.S_IMODE(src.stat().st_mode) == 0o640
    assert cfg.read_bytes() == ORIGINAL  # the mount point itself was never touched
    assert sorted(p.name for p in cfg.parent.iterdir()) == ["daemon.json", "shadow-like"]


# --- programs on PATH (the containerd and CRI-O engines) ----------------------------------------

CONTAINERD_CFG = (b'version = 2\n# site\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                  b'  snapshotter = "overlayfs"\n')


def test_programs_another_user_planted_on_path_are_never_run(host, nobody):
    """A directory of nobody's early on root's PATH holding `containerd`, `ctr`, `crictl` and
    `crio`: the containerd and CRI-O engines pass them over (docs/reference.md §8, §11) and use the
    root-owned containerd further down PATH, or say that no safe crio was found."""
    top, _, _, state = host
    _need(os.path.exists("/usr/bin/containerd"), "needs containerd in /usr/bin")
    planted = top / "planted"
    planted.mkdir(mode=0o755)
    os.chown(planted, nobody.uid, -1)
    for name in ("containerd", "ctr", "crictl", "crio"):
        nobody("sh", "-c", f"printf '#!/bin/sh\\ntouch {planted}/ran-{name}\\n"
                           f"echo {name} version 9.9.9\\n' > {planted}/{name} && "
                           f"chmod 755 {planted}/{name}")
    cfg = top / "etc" / "config.toml"
    cfg.write_bytes(CONTAINERD_CFG)
    env = {"PATH": f"{planted}:/usr/sbin:/usr/bin:/sbin:/bin"}
    r = cli(state, "install", "--engine", "containerd", "--config", str(cfg), "--reload",
            "none", "--runtime-path", RT, "--allow-missing-runtime", "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # the candidate was checked by the real containerd, not taken as TOML only
    assert out["changed"] and not any("TOML only" in w for w in out["warnings"])
    drop = cli(state, "doctor", "--engine", "crio", "--config", str(top / "etc" / "99.conf"),
               "--json", env=env)
    assert "no crio on PATH that is safe to run" in drop.stdout, drop.stdout
    r = cli(state, "uninstall", "--engine", "containerd", "--config", str(cfg), "--reload",
            "none", env=env)
    assert r.returncode == 0, r.stderr
    assert cfg.read_bytes() == CONTAINERD_CFG
    assert sorted(p.name for p in planted.iterdir() if p.name.startswith("ran-")) == []
