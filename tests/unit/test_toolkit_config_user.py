"""The per-user config.toml of rootless engines (reference §3): read over the global file, key
by key, when the runtime or hook runs rootless; refused, with one line, when another user could
have written it (a foreign owner, a symlink to another user's file, group or world write, an
XDG_CONFIG_HOME planted in /tmp)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nvdocker2.toolkit_config import ConfigError, load, user_config_path

NOBODY = 65534
FIXTURE_CLI = Path(__file__).parent.parent / "fixtures" / "nvidia-container-cli"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

GLOBAL = """\
[nvidia-container-runtime]
log-level = "debug"
runtimes = ["runc"]
[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
no-cgroups = false
"""


def _user_file(config_home: Path, text: str, mode: int = 0o644) -> Path:
    f = config_home / "nvidia-container-runtime" / "config.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    f.chmod(mode)
    return f


@pytest.fixture
def files(tmp_path):
    g = tmp_path / "global.toml"
    g.write_text(GLOBAL)
    home = tmp_path / "home"
    home.mkdir()
    return g, home


def test_user_keys_override_the_global_file_key_by_key(files):
    g, home = files
    f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n"
                   "[nvidia-container-runtime]\nlog-level = \"error\"\n")
    cfg = load(str(g), {"HOME": str(home)}, user=True)
    assert cfg.cli.no_cgroups is True and cfg.runtime.log_level == "error"
    # What the per-user file does not name stays the global file's.
    assert cfg.cli.ldconfig == "@/sbin/ldconfig.real" and cfg.runtime.runtimes == ("runc",)
    assert (cfg.source, cfg.user_source) == (str(g), str(f))
    # Root on the host (user=False) never reads it.
    root = load(str(g), {"HOME": str(home)}, user=False)
    assert root.cli.no_cgroups is False and root.user_source is None


def test_xdg_config_home_wins_over_home_and_a_relative_one_is_ignored(files, tmp_path):
    g, home = files
    _user_file(home / ".config", "[nvidia-container-cli]\nldconfig = \"@/from-home\"\n")
    xdg = tmp_path / "xdg"
    f = _user_file(xdg, "[nvidia-container-cli]\nldconfig = \"@/from-xdg\"\n")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    assert load(str(g), env, user=True).cli.ldconfig == "@/from-xdg"
    assert user_config_path(env) == str(f)
    env["XDG_CONFIG_HOME"] = "relative/dir"
    assert load(str(g), env, user=True).cli.ldconfig == "@/from-home"
    assert user_config_path({}) is None


def test_without_a_global_file_the_user_file_alone_is_read(tmp_path):
    home = tmp_path / "home"
    _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n")
    cfg = load(str(tmp_path / "absent.toml"), {"HOME": str(home)}, user=True)
    assert cfg.cli.no_cgroups is True and cfg.source is None
    assert cfg.cli.load_kmods is True  # the defaults for the rest


def test_missing_user_file_changes_nothing(files):
    g, home = files
    assert load(str(g), {"HOME": str(home)}, user=True) == load(str(g), user=False)


def test_a_broken_user_file_is_one_line_naming_it_and_the_key(files):
    g, home = files
    f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = \"yes\"\n")
    with pytest.raises(ConfigError) as e:
        load(str(g), {"HOME": str(home)}, user=True)
    assert str(e.value) == (f"{f}: key 'nvidia-container-cli.no-cgroups' must be true or false,"
                            " got str 'yes'")


def _refused(g: Path, env: dict, path: Path, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(str(g), env, user=True)
    msg = str(e.value)
    assert msg.startswith(f"{path}: refusing this per-user config.toml: {why} ")
    assert "\n" not in msg


@needs_root
def test_a_user_file_of_another_owner_is_refused(files):
    g, home = files
    f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n")
    os.chown(f, NOBODY, NOBODY)
    _refused(g, {"HOME": str(home)}, f, f"{f} belongs to uid {NOBODY}")


@needs_root
@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_group_or_world_writable_user_file_is_refused(files, mode):
    g, home = files
    f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n", mode)
    os.chown(f, os.geteuid(), 4242)  # a group other than root's
    _refused(g, {"HOME": str(home)}, f, f"{f} is writable by other users")


def test_a_group_writable_file_of_roots_group_is_refused_too(files):
    g, home = files
    f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n", 0o664)
    os.chown(f, os.geteuid(), 0)
    _refused(g, {"HOME": str(home)}, f, f"{f} is writable by its group or others (mode 0664)")


@needs_root
def test_a_symlink_to_another_users_file_is_refused_and_to_ones_own_is_read(files, tmp_path):
    g, home = files
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    target = theirs / "config.toml"
    target.write_text("[nvidia-container-cli]\nno-cgroups = true\n")
    os.chown(target, NOBODY, NOBODY)
    link = home / ".config" / "nvidia-container-runtime" / "config.toml"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    _refused(g, {"HOME": str(home)}, link, f"{theirs} belongs to uid {NOBODY}")
    os.chown(theirs, 0, 0)  # the directory is safe now, the file still is not theirs to give
    _refused(g, {"HOME": str(home)}, link, f"{target} belongs to uid {NOBODY}")
    os.chown(target, 0, 0)
    assert load(str(g), {"HOME": str(home)}, user=True).cli.no_cgroups is True


@needs_root
def test_an_xdg_config_home_planted_in_tmp_by_another_user_is_refused(files):
    g, _ = files
    planted = Path(tempfile.mkdtemp(prefix="nvd2-planted-", dir="/tmp"))
    try:
        f = _user_file(planted, "[nvidia-container-cli]\nno-cgroups = true\n")
        for p in (planted, f.parent, f):
            os.chown(p, NOBODY, NOBODY)
        _refused(g, {"XDG_CONFIG_HOME": str(planted)}, f, "/tmp is writable by other users")
    finally:
        shutil.rmtree(planted)


# --- the hook, started as runc starts it, by a user and by root --------------------------------


def _hook(user: int | None, config: Path, state: dict, home: Path):
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "nvdocker2.hook", "--config", str(config), "prestart"],
        input=json.dumps(state), capture_output=True, text=True, timeout=60, cwd="/",
        env={"PATH": os.environ["PATH"], "HOME": str(home)}, check=False)


@needs_root
def test_the_hook_of_a_user_reads_its_file_and_roots_hook_does_not(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="nvd2-user-config-", dir="/tmp"))
    try:
        base.chmod(0o755)
        cli = base / "cli" / "nvidia-container-cli"
        cli.parent.mkdir()
        shutil.copy(FIXTURE_CLI, cli)
        record = base / "record"
        record.mkdir()
        os.chown(record, NOBODY, NOBODY)
        config = base / "config.toml"
        config.write_text(f'[nvidia-container-cli]\npath = "{cli}"\n'
                          f'environment = ["FIXTURE_RECORD_DIR={record}"]\n')
        bundle = base / "bundle"
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=all"]}}))
        state = {"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": os.getpid(),
                 "bundle": str(bundle)}
        home = base / "home"
        home.mkdir()
        f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n")
        for p in (home, home / ".config", f.parent, f):
            os.chown(p, NOBODY, NOBODY)

        _hook(NOBODY, config, state, home)  # the cli records, then cannot reach root's pid
        assert "--no-cgroups" in (record / "argv").read_text().splitlines()
        (record / "argv").unlink()
        _hook(None, config, state, home)  # root on the host: the global file alone
        assert "--no-cgroups" not in (record / "argv").read_text().splitlines()
        (record / "argv").unlink()

        f.chmod(0o666)  # anyone may now write the user's settings
        proc = _hook(NOBODY, config, state, home)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            f"nvidia-container-runtime-hook: error: {f}: refusing this per-user config.toml: "
            f"{f} is writable by other users (only a file of yours or root's, that no one else "
            "can write, is read; fix it with chown/chmod go-w, or remove it)"]
        assert not (record / "argv").exists()
    finally:
        shutil.rmtree(base)


@needs_root
def test_a_rootless_pass_through_runs_the_low_level_runtime_the_users_file_names():
    base = Path(tempfile.mkdtemp(prefix="nvd2-user-passthrough-", dir="/tmp"))
    try:
        base.chmod(0o755)
        bindir = base / "bin"
        bindir.mkdir()
        for name in ("runc", "user-runc"):
            (bindir / name).write_text(f'#!/bin/sh\necho "{name} $*"\n')
            (bindir / name).chmod(0o755)
        home = base / "home"
        f = _user_file(home / ".config", '[nvidia-container-runtime]\nruntimes = ["user-runc"]\n')
        for p in (home, home / ".config", f.parent, f):
            os.chown(p, NOBODY, NOBODY)
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.append({root!r}); from nvdocker2.runtime import main; "
                "sys.exit(main(sys.argv[2:], sys.argv[1]))")

        def state(user):
            prefix = [shutil.which("setpriv") or "setpriv", f"--reuid={user}", f"--regid={user}",
                      "--clear-groups"] if user else []
            return subprocess.run(
                [*prefix, sys.executable, "-I", "-S", "-c", code, str(base / "self"), "state",
                 "ctr"], capture_output=True, text=True, timeout=60, cwd="/", check=False,
                env={"PATH": str(bindir), "HOME": str(home),
                     "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(base / "absent.toml")})

        assert state(NOBODY).stdout == "user-runc state ctr\n"
        assert state(None).stdout == "runc state ctr\n"  # root on the host: the defaults
        f.chmod(0o666)
        proc = state(NOBODY)  # refused: a warning, and the defaults (never the planted ones)
        assert proc.stdout == "runc state ctr\n"
        assert "refusing this per-user config.toml" in proc.stderr
    finally:
        shutil.rmtree(base)


@needs_root
def test_in_a_user_namespace_without_roots_mapping_only_the_users_own_file_is_read():
    """Rootless Docker runs the runtime as the root of such a namespace: there the host's root,
    and every other user, show as the overflow owner; only the namespace's root (the user)
    may own the file."""
    base = Path(tempfile.mkdtemp(prefix="nvd2-user-ns-", dir="/tmp"))
    try:
        base.chmod(0o755)
        home = base / "home"
        f = _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n")
        for p in (home, home / ".config", f.parent, f):
            os.chown(p, NOBODY, NOBODY)
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import os, sys; sys.path.append({root!r})\n"
                "from nvdocker2 import toolkit_config as t\n"
                "print(os.geteuid(), open('/proc/self/uid_map').read().split()[:2])\n"
                "try: print(t.load('/nonexistent/config.toml').cli.no_cgroups)\n"
                "except t.ConfigError as e: print(e)\n")

        def in_userns():
            proc = subprocess.run(
                [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                 "--clear-groups", shutil.which("unshare") or "unshare", "--user",
                 "--map-root-user", sys.executable, "-I", "-S", "-c", code],
                capture_output=True, text=True, timeout=60, cwd="/", check=False,
                env={"PATH": os.environ["PATH"], "HOME": str(home)})
            assert proc.returncode == 0, proc.stderr
            return proc.stdout.splitlines()

        assert in_userns() == ["0 ['0', '65534']", "True"]  # root inside, nobody outside
        os.chown(f, 0, 0)  # the host's root: the overflow owner inside, like any other user
        assert in_userns()[1] == (f"{f}: refusing this per-user config.toml: {f} belongs to "
                                  f"uid {NOBODY} (only a file of yours or root's, that no one "
                                  "else can write, is read; fix it with chown/chmod go-w, or "
                                  "remove it)")
    finally:
        shutil.rmtree(base)
