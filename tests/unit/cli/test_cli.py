"""install / uninstall / rollback / backups / status through the CLI, with byte-exact files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2 import __version__
from ..cli_run import cli

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
RT = "/usr/bin/nvidia-container-runtime"
NONE = ["--reload", "none", "--no-verify"]



@pytest.fixture
def cfg(tmp_path):
    d = tmp_path / "etc"
    d.mkdir()
    return d / "daemon.json"


TWO_SPACE = (
    '{\n  "storage-driver": "overlay2",\n  "labels": ["zone=Zürich", "owner=山田"],\n'
    '  "max-concurrent-downloads": 9223372036854775807,\n  "default-shm-size": "64M",\n'
    '  "features": {"buildkit": true},\n  "shutdown-timeout": 15\n}\n'
).encode()
TWO_SPACE_INSTALLED = (
    '{\n  "storage-driver": "overlay2",\n  "labels": ["zone=Zürich", "owner=山田"],\n'
    '  "max-concurrent-downloads": 9223372036854775807,\n  "default-shm-size": "64M",\n'
    '  "features": {"buildkit": true},\n  "shutdown-timeout": 15,\n  "runtimes": {\n'
    '    "nvidia": {\n      "path": "/usr/bin/nvidia-container-runtime"\n    }\n  }\n}\n'
).encode()


def test_install_and_uninstall_byte_exact_two_space_file(cfg):
    cfg.write_bytes(TWO_SPACE)
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == TWO_SPACE_INSTALLED
    assert f"config: {cfg} (given with --config)" in out
    assert 'added runtimes.nvidia: {"path": "/usr/bin/nvidia-container-runtime"}' in out
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == TWO_SPACE
    assert "removed runtimes.nvidia" in out


@pytest.mark.parametrize("engine,name", [("docker", "daemon.json"), ("crio", "99-nvidia.conf")])
@pytest.mark.parametrize("kind,says", [("missing", "does not exist"), ("dir", "is a directory"),
                                       ("plain", "is not executable")])
def test_a_runtime_path_no_container_could_start_is_refused(tmp_path, engine, name, kind, says):
    cfg = tmp_path / "etc" / name
    cfg.parent.mkdir()
    path = tmp_path / "rt"
    if kind == "dir":
        path.mkdir()
    elif kind == "plain":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    args = ("install", "--engine", engine, "--config", str(cfg), "--runtime-path", str(path),
            "--reload", "none", "--no-verify")
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: --runtime-path {path} {says}: every GPU container would fail to start",
        "hint: pass the path of an installed nvidia-container-runtime, or add "
        "--allow-missing-runtime when a package will put it there"]
    assert not cfg.exists() and not (tmp_path / "state").exists()
    code, out, err = cli(*args, "--allow-missing-runtime")
    assert code == 0, err
    assert str(path) in cfg.read_text() and "not an executable file (yet)" in err


def test_tab_crlf_no_final_newline_with_args_and_default(cfg):
    original = (
        b'{\r\n\t"debug": true,\r\n\t"big": 1.0e400,\r\n\t"runtimes": {\r\n\t\t"crun": {\r\n'
        b'\t\t\t"path": "/usr/bin/crun"\r\n\t\t}\r\n\t}\r\n}'
    )
    cfg.write_bytes(original)
    code, _, err = cli(
        "install",
        "--config",
        str(cfg),
        "--runtime-path",
        RT, "--allow-missing-runtime",
        "--runtime-arg",
        "--debug",
        "--runtime-arg",
        "--log=/var/log/nv.log",
        "--set-default",
        *NONE,
    )
    assert code == 0, err
    assert cfg.read_bytes() == (
        b'{\r\n\t"debug": true,\r\n\t"big": 1.0e400,\r\n\t"runtimes": {\r\n\t\t"crun": {\r\n'
        b'\t\t\t"path": "/usr/bin/crun"\r\n\t\t},\r\n\t\t"nvidia": {\r\n'
        b'\t\t\t"path": "/usr/bin/nvidia-container-runtime",\r\n\t\t\t"runtimeArgs": [\r\n'
        b'\t\t\t\t"--debug",\r\n\t\t\t\t"--log=/var/log/nv.log"\r\n\t\t\t]\r\n\t\t}\r\n\t},\r\n'
        b'\t"default-runtime": "nvidia"\r\n}'
    )
    code, _, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == original


def test_second_install_says_unchanged_and_writes_nothing(cfg, tmp_path):
    cfg.write_bytes(b"{}\n")
    assert cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
               *NONE)[0] == 0
    stat1 = cfg.stat()
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", *NONE)
    assert code == 0 and "unchanged:" in out
    assert cfg.stat().st_mtime_ns == stat1.st_mtime_ns and cfg.stat().st_ino == stat1.st_ino
    code, out, _ = cli("backups", "--config", str(cfg), "--json")
    assert len(json.loads(out)["backups"]) == 1


def test_dry_run_prints_a_diff_and_touches_nothing(cfg, tmp_path):
    cfg.write_bytes(b'{\n    "debug": true\n}\n')
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--dry-run", *NONE)
    assert code == 0
    assert f"--- a{cfg}\n+++ b{cfg}\n" in out
    assert '-    "debug": true\n+    "debug": true,\n+    "runtimes": {\n' in out
    assert "dry run:" in out
    assert cfg.read_bytes() == b'{\n    "debug": true\n}\n'
    assert not (tmp_path / "state").exists()
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--dry-run", "--json",
                       *NONE)
    obj = json.loads(out)
    assert obj["dry_run"] is True and obj["changed"] is True and '+    "runtimes"' in obj["diff"]
    assert obj["before"] == '{\n    "debug": true\n}\n'
    # `after` is exactly what the apply then writes.
    assert cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
               *NONE)[0] == 0
    assert obj["after"] == cfg.read_text()


def test_dry_run_without_dockerd_shows_the_diff_and_what_it_could_not_check(cfg, tmp_path):
    """No dockerd: the apply exits 3 and writes nothing; its dry run shows the diff, lists the
    flag check as unchecked and exits 0; --require-daemon makes the dry run fail as the apply."""
    cfg.write_bytes(b"{}\n")
    args = ("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
            "--pidfile",
            str(tmp_path / "none.pid"), "--docker-host", f"unix://{tmp_path}/none.sock")
    dry_code, dry_out, dry_err = cli(*args, "--dry-run")
    assert dry_code == 0 and "error" not in dry_err, dry_err
    added = "".join(line for line in dry_out.splitlines() if line.startswith("+"))
    assert dry_out.count(f"--- a{cfg}") == 1 and '"nvidia"' in added and RT in added
    unchecked = [line for line in dry_out.splitlines() if line.startswith("unchecked: ")]
    assert unchecked == ["unchecked: the running dockerd's flags (dockerd refuses a key also "
                         "given as a flag): no running dockerd found: systemd does not run "
                         f"docker.service and {tmp_path / 'none.pid'} is missing"]
    obj = json.loads(cli(*args, "--dry-run", "--json")[1])
    assert obj["dry_run"] and obj["changed"] and obj["unchecked"] == [unchecked[0][11:]]
    assert cfg.read_bytes() == b"{}\n" and not (tmp_path / "state").exists()
    code, _, err = cli(*args)
    assert code == 3 and err.startswith("error: no running dockerd found")
    assert cli(*args, "--dry-run", "--require-daemon") == (code, "", err)
    assert cfg.read_bytes() == b"{}\n"


def test_dry_run_without_dockerd_still_runs_the_file_checks(cfg, tmp_path):
    """What needs no dockerd is still checked: a default runtime the file does not define."""
    cfg.write_bytes(b'{"default-runtime": "ghost"}\n')
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", "--dry-run",
                         "--pidfile", str(tmp_path / "none.pid"))
    assert code == 2 and '"default-runtime" is "ghost"' in err and out == ""


def test_diff_and_json_text_mask_credentials_in_urls(cfg):
    proxy = '{\n    "proxies": {"http-proxy": "http://alice:s3cret@proxy:3128"}\n}\n'
    cfg.write_text(proxy)
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--dry-run", *NONE)
    assert code == 0 and "s3cret" not in out and "alice" not in out
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--json", *NONE)
    obj = json.loads(out)
    assert "s3cret" not in out and "http://xxxxx:xxxxx@proxy:3128" in obj["before"]
    assert "http://xxxxx:xxxxx@proxy:3128" in obj["after"]
    assert "http://alice:s3cret@proxy:3128" in cfg.read_text()  # the file keeps them


def test_json_result_has_the_fields_scripts_rely_on(cfg):
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--json", *NONE)
    assert code == 0
    obj = json.loads(out)
    assert obj["changed"] is True and obj["config"] == str(cfg) and obj["reload"] == "none"
    assert obj["verified"] is False and isinstance(obj["warnings"], list)
    assert obj["backup"] and obj["backup_file"] is None  # the file did not exist before
    assert obj["changes"] == [{"key": "runtimes.nvidia", "action": "added", "after": {"path": RT}}]
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--json", *NONE)
    obj = json.loads(out)
    assert obj["changed"] is False and obj["backup"] is None


def test_reload_auto_without_dockerd_needs_no_verify_and_says_what_to_run(
        cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no systemctl: never the host's dockerd
    where = ["--pidfile", str(tmp_path / "none.pid"), "--docker-host", f"unix://{tmp_path}/none.sock"]
    code, _, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", *where)
    assert code == 3 and "error: no running dockerd found" in err
    assert not cfg.exists()
    code, out, _ = cli("install", "--config", str(cfg), "--runtime-path", RT,
                       "--allow-missing-runtime", "--no-verify", *where)
    assert code == 0
    assert "note: reload mode none: no running dockerd found" in out
    assert "note: dockerd was not reloaded; to apply the change run:" in out
    assert json.loads(cfg.read_bytes()) == {"runtimes": {"nvidia": {"path": RT}}}


def test_backups_rollback_cycle(cfg):
    cfg.write_bytes(b'{"debug": true}')
    cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime", *NONE)
    cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
        "--set-default", *NONE)
    with_default = cfg.read_bytes()
    code, out, _ = cli("backups", "--config", str(cfg), "--json")
    listed = json.loads(out)["backups"]
    assert [b["reason"] for b in listed] == ["install runtime nvidia"] * 2
    first_id = listed[-1]["id"]
    assert listed[-1]["sha256"] == __import__("hashlib").sha256(b'{"debug": true}').hexdigest()
    code, out, _ = cli("backups", "--config", str(cfg))
    assert first_id in out and "install runtime nvidia" in out
    # Newest backup: the state before --set-default.
    code, out, err = cli("rollback", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert json.loads(cfg.read_bytes()) == {"debug": True, "runtimes": {"nvidia": {"path": RT}}}
    # By id: the very first state; works without --config.
    code, out, err = cli("rollback", first_id, *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == b'{"debug": true}'
    assert f"restored {cfg} from backup {first_id}" in out
    # The rollback itself was backed up, so it can be undone.
    code, out, _ = cli("backups", "--config", str(cfg), "--json")
    assert json.loads(out)["backups"][0]["reason"] == f"rollback to {first_id}"
    cli("rollback", "--config", str(cfg), *NONE)
    assert json.loads(cfg.read_bytes()) == {"debug": True, "runtimes": {"nvidia": {"path": RT}}}
    assert cfg.read_bytes() != with_default


def test_rollback_with_nothing_to_restore(cfg):
    code, _, err = cli("rollback", "--config", str(cfg), *NONE)
    assert code == 2 and "no backups of" in err


def test_status_text_and_json(cfg):
    cfg.write_bytes(b'{"runtimes": {"crun": {"path": "/usr/bin/crun"}}}')
    cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
        "--set-default", *NONE)
    code, out, _ = cli("status", "--config", str(cfg))
    assert code == 0
    assert 'runtime: nvidia -> {"path": "/usr/bin/nvidia-container-runtime"}' in out
    assert "default-runtime: nvidia" in out and "installed by nvdocker2: nvidia" in out
    code, out, _ = cli("status", "--config", str(cfg), "--json")
    obj = json.loads(out)
    assert obj["runtimes"]["nvidia"] == {"path": RT} and obj["default_runtime"] == "nvidia"
    assert obj["installed"] is True and obj["backups"] == 1 and obj["errors"] == []


def test_version_and_help():
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"nvdocker2 {__version__}"
    code, out, _ = cli("install", "--help")
    for flag in (
        "--config",
        "--runtime-name",
        "--runtime-path",
        "--runtime-arg",
        "--allow-missing-runtime",
        "--set-default",
        "--dry-run",
        "--reload",
        "--restart",
        "--no-verify",
        "--docker-host",
        "--pidfile",
        "--timeout",
        "--json",
        "--dockerd-log",
    ):
        assert flag in out
    assert "says what it picked and why" in " ".join(w for w in out.split() if w != "│")


def test_install_completion_names_the_shell(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), SHELL="/bin/bash")
    r = subprocess.run([str(NVDOCKER2), "--install-completion", "bash"], capture_output=True,
                       text=True, env=env, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first.startswith("bash completion installed in "), first
    script = Path(first[len("bash completion installed in "):])
    assert script.is_relative_to(tmp_path) and "_nvdocker2_completion" in script.read_text()
    assert second == "Completion will take effect once you restart the terminal"


def test_default_runtime_path_is_the_one_beside_nvdocker2(cfg):
    r = subprocess.run(
        [str(NVDOCKER2), "install", "--config", str(cfg), *NONE, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    entry = json.loads(cfg.read_bytes())["runtimes"]["nvidia"]
    assert entry == {"path": str(NVDOCKER2.parent / "nvidia-container-runtime")}
    assert os.path.isabs(entry["path"])


def test_missing_default_runtime_gives_a_warning(cfg, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setattr(sys, "argv", [str(bindir / "nvdocker2")])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "py" / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, err = cli("install", "--config", str(cfg), *NONE)
    assert code == 0
    assert json.loads(cfg.read_bytes())["runtimes"]["nvidia"] == {"path": RT}
    if not os.path.exists(RT):
        assert (
            "warning: no nvidia-container-runtime beside nvdocker2 or on PATH; "
            f"the entry points at {RT}" in err
        )
    # Once installed beside nvdocker2, that one is used.
    (bindir / "nvidia-container-runtime").write_text("#!/bin/sh\n")
    (bindir / "nvidia-container-runtime").chmod(0o755)
    code, out, err = cli("install", "--config", str(cfg), *NONE)
    assert code == 0 and "warning" not in err
    assert json.loads(cfg.read_bytes())["runtimes"]["nvidia"] == {
        "path": str(bindir / "nvidia-container-runtime")
    }


def test_status_says_when_dockerd_is_not_reachable(cfg, tmp_path):
    cfg.write_bytes(b"{}")
    sock = f"unix://{tmp_path}/none.sock"
    code, out, _ = cli("status", "--config", str(cfg), "--docker-host", sock)
    assert code == 0 and f"dockerd: not reachable at {sock}" in out
    code, out, _ = cli("status", "--config", str(cfg), "--docker-host", sock, "--json")
    assert json.loads(out)["dockerd"]["reachable"] is False
    code, _, err = cli("status", "--config", str(cfg), "--docker-host", "ssh://host")
    assert code == 2 and "only unix:// and tcp://" in err


def test_status_follows_the_file_after_rollback_and_hand_edits(cfg):
    cfg.write_bytes(b'{"debug": true}\n')
    assert cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
               *NONE)[0] == 0
    assert json.loads(cli("status", "--config", str(cfg), "--json")[1])["installed"] is True
    assert cli("rollback", "--config", str(cfg), *NONE)[0] == 0
    assert cfg.read_bytes() == b'{"debug": true}\n'
    code, out, _ = cli("status", "--config", str(cfg), "--json")
    obj = json.loads(out)
    assert code == 0 and obj["installed"] is False and obj["installed_runtimes"] == []
    assert obj["journal"] is None  # the rollback undid the install: the journal forgets it
    out = cli("status", "--config", str(cfg))[1]
    assert "installed by nvdocker2: nothing recorded" in out
    # Back again by install, then changed by hand: the entry is no longer what install wrote.
    assert cli("install", "--config", str(cfg), "--runtime-path", RT, "--allow-missing-runtime",
               *NONE)[0] == 0
    assert "installed by nvdocker2: nvidia (journal" in cli("status", "--config", str(cfg))[1]
    cfg.write_bytes(b'{"debug": true, "runtimes": {"nvidia": {"path": "/opt/other"}}}\n')
    assert json.loads(cli("status", "--config", str(cfg), "--json")[1])["installed"] is False


@pytest.mark.parametrize("original", [
    b'\xef\xbb\xbf{\r\n    "debug": true\r\n}\r\n',
    b'\xef\xbb\xbf{"runtimes": {"other": {"path": "/opt/other"}}, "debug": true}',
])
def test_uninstall_gives_back_the_byte_order_mark_install_dropped(cfg, original):
    cfg.write_bytes(original)
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", "--set-default",
                         *NONE)
    assert code == 0, err
    assert "UTF-8 byte order mark dropped" in err
    assert not cfg.read_bytes().startswith(b"\xef\xbb\xbf") and RT.encode() in cfg.read_bytes()
    code, out, err = cli("uninstall", "--config", str(cfg), *NONE)
    assert code == 0, err
    assert cfg.read_bytes() == original
    assert "note: put back the UTF-8 byte order mark that install dropped" in out
