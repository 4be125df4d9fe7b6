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
def test_an_xdg_config_home_planted_in_tmp_by_another_user_is_refused(files, shared):
    g, _ = files
    planted = shared / "planted"  # as if made in /tmp: a sticky directory anyone may write
    planted.mkdir()
    shared.chmod(0o1777)
    f = _user_file(planted, "[nvidia-container-cli]\nno-cgroups = true\n")
    for p in (planted, f.parent, f):
        os.chown(p, NOBODY, NOBODY)
    _refused(g, {"XDG_CONFIG_HOME": str(planted)}, f, f"{shared} is writable by other users")


# --- the runtime and the hook, started by a user and by root ----------------------------------

REPO = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def shared():
    """A directory of root's in /tmp (0755: nobody may enter it), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="nvd2-user-config-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def _nobodys_home(base: Path, text: str) -> tuple[Path, Path]:
    """(nobody's HOME under `base`, its per-user config.toml holding `text`)."""
    home = base / "home"
    f = _user_file(home / ".config", text)
    for p in (home, home / ".config", f.parent, f):
        os.chown(p, NOBODY, NOBODY)
    return home, f


def _run_as(user: int | None, argv: list, env: dict, stdin: str | None = None):
    """`argv` as `user` (None: root), from `/`, with nothing but `env`."""
    prefix = [shutil.which("setpriv") or "setpriv", f"--reuid={user}", f"--regid={user}",
              "--clear-groups"] if user else []
    return subprocess.run([*prefix, *argv], input=stdin, capture_output=True, text=True,
                          timeout=60, cwd="/", env=env, check=False)


@needs_root
def test_the_hook_of_a_user_reads_its_file_and_roots_hook_does_not(shared):
    cli = shared / "cli" / "nvidia-container-cli"
    cli.parent.mkdir()
    shutil.copy(FIXTURE_CLI, cli)
    record = shared / "record"
    record.mkdir()
    os.chown(record, NOBODY, NOBODY)
    config = shared / "config.toml"
    config.write_text(f'[nvidia-container-cli]\npath = "{cli}"\n'
                      f'environment = ["FIXTURE_RECORD_DIR={record}"]\n')
    bundle = shared / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=all"]}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "status": "creating",
                        "pid": os.getpid(), "bundle": str(bundle)})
    home, f = _nobodys_home(shared, "[nvidia-container-cli]\nno-cgroups = true\n")
    argv = [sys.executable, "-m", "nvdocker2.hook", "--config", str(config), "prestart"]
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}

    _run_as(NOBODY, argv, env, state)  # the cli records, then cannot reach root's pid
    assert "--no-cgroups" in (record / "argv").read_text().splitlines()
    (record / "argv").unlink()
    _run_as(None, argv, env, state)  # root on the host: the global file alone
    assert "--no-cgroups" not in (record / "argv").read_text().splitlines()
    (record / "argv").unlink()

    f.chmod(0o666)  # anyone may now write the user's settings
    proc = _run_as(NOBODY, argv, env, state)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"nvidia-container-runtime-hook: error: {f}: refusing this per-user config.toml: "
        f"{f} is writable by other users (only a file of yours or root's, that no one else "
        "can write, is read; fix it with chown/chmod go-w, or remove it)"]
    assert not (record / "argv").exists()


@needs_root
def test_a_rootless_pass_through_runs_the_low_level_runtime_the_users_file_names(shared):
    bindir = shared / "bin"
    bindir.mkdir()
    for name in ("runc", "user-runc"):
        (bindir / name).write_text(f'#!/bin/sh\necho "{name} $*"\n')
        (bindir / name).chmod(0o755)
    home, f = _nobodys_home(shared, '[nvidia-container-runtime]\nruntimes = ["user-runc"]\n')
    code = (f"import sys; sys.path.append({REPO!r}); from nvdocker2.runtime import main; "
            "sys.exit(main(sys.argv[2:], sys.argv[1]))")
    argv = [sys.executable, "-I", "-S", "-c", code, str(shared / "self"), "state", "ctr"]
    env = {"PATH": str(bindir), "HOME": str(home),
           "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(shared / "absent.toml")}

    assert _run_as(NOBODY, argv, env).stdout == "user-runc state ctr\n"
    assert _run_as(None, argv, env).stdout == "runc state ctr\n"  # root on the host
    f.chmod(0o666)
    proc = _run_as(NOBODY, argv, env)  # refused: a warning, and the defaults, never its own
    assert proc.stdout == "runc state ctr\n"
    assert "refusing this per-user config.toml" in proc.stderr


@needs_root
def test_in_a_user_namespace_without_roots_mapping_only_the_users_own_file_is_read(shared):
    """Rootless Docker runs the runtime as the root of such a namespace: there the host's root,
    and every other user, show as the overflow owner; only the namespace's root (the user)
    may own the file."""
    home, f = _nobodys_home(shared, "[nvidia-container-cli]\nno-cgroups = true\n")
    code = (f"import os, sys; sys.path.append({REPO!r})\n"
            "from nvdocker2 import toolkit_config as t\n"
            "print(os.geteuid(), open('/proc/self/uid_map').read().split()[:2])\n"
            "try: print(t.load('/nonexistent/config.toml').cli.no_cgroups)\n"
            "except t.ConfigError as e: print(e)\n")
    argv = [shutil.which("unshare") or "unshare", "--user", "--map-root-user",
            sys.executable, "-I", "-S", "-c", code]
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}

    proc = _run_as(NOBODY, argv, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["0 ['0', '65534']", "True"]  # root inside, nobody out
    os.chown(f, 0, 0)  # the host's root: the overflow owner inside, like any other user
    assert _run_as(NOBODY, argv, env).stdout.splitlines()[1] == (
        f"{f}: refusing this per-user config.toml: {f} belongs to uid {NOBODY} (only a file of "
        "yours or root's, that no one else can write, is read; fix it with chown/chmod go-w, "
        "or remove it)")


@needs_root
def test_root_on_the_host_never_reads_a_per_user_file(files):
    """Without `user=`, whether to read it is whether this process runs rootless: root on the
    host (here, the test suite) is not, whatever HOME says."""
    g, home = files
    _user_file(home / ".config", "[nvidia-container-cli]\nno-cgroups = true\n")
    cfg = load(str(g), {"HOME": str(home)})
    assert cfg.cli.no_cgroups is False and cfg.user_source is None
    assert load(str(g), {"HOME": str(home)}, user=True).cli.no_cgroups is True
