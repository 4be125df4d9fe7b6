"""What the packages' maintainer scripts print about daemon.json (nvdocker2/scriptlet.py): one
line per outcome, from the real `nvdocker2 install|uninstall --json` result, handed over the way
the scripts hand it (`printf '%s\\n' "$result" |` under /bin/sh, dash on Debian)."""

from __future__ import annotations

import json
import subprocess
import sys

from .cli_run import cli

# The scripts' hand-over; dash's `echo "$result"` turned the \\ of a JSON string into one \.
HAND_OVER = 'printf \'%s\\n\' "$RESULT" | "$PYTHON" -I -m nvdocker2.scriptlet "$ACTION"'


def said(action: str, result: str) -> list[str]:
    proc = subprocess.run(["/bin/sh", "-c", HAND_OVER], capture_output=True, text=True,
                          env={"RESULT": result, "PYTHON": sys.executable, "ACTION": action,
                               "PATH": "/usr/bin:/bin"}, cwd="/", check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


def _json(*args: str) -> str:
    path = ["--runtime-path", "/bin/sh"] if args[0] == "install" else []
    code, out, err = cli(*args, *path, "--json", "--no-verify", "--reload", "none")
    assert code == 0, err
    return out


def test_install_then_again_then_uninstall_say_one_line_each(tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "daemon.json"
    config.write_text('{\n    "data-root": "C:\\\\docker\\\\data",\n    "labels": ["a\\nb"]\n}\n')
    result = _json("install", "--config", str(config))
    backup = json.loads(result)["backup"]
    assert "\\\\" in result  # what a shell's echo would have broken
    assert said("install", result) == [
        f"nvdocker2: installed the nvidia runtime in {config} "
        f"(backup {backup}: {tmp_path}/state/backups/{backup}.json)",
        "nvdocker2: dockerd was not reloaded (not running, or not allowed here): it uses the "
        "nvidia runtime once it starts; if it is running, run: systemctl reload docker "
        "(or: kill -HUP $(cat /var/run/docker.pid)), then: nvdocker2 status",
    ]
    assert said("install", _json("install", "--config", str(config))) == [
        f"nvdocker2: the nvidia runtime is already in {config}: nothing changed"]

    result = _json("uninstall", "--config", str(config))
    backup = json.loads(result)["backup"]
    assert said("uninstall", result) == [
        f"nvdocker2: removed the nvidia runtime from {config} "
        f"(backup {backup}: {tmp_path}/state/backups/{backup}.json)",
        "nvdocker2: dockerd was not reloaded (not running, or not allowed here): if it is "
        "running, run: systemctl reload docker (or: kill -HUP $(cat /var/run/docker.pid))",
    ]
    assert said("uninstall", _json("uninstall", "--config", str(config))) == [
        f"nvdocker2: the nvidia runtime was not in {config}: nothing changed"]


def test_a_new_file_has_no_backup_file_and_a_cdi_uninstall_with_nothing_to_do_is_quiet(
        tmp_path, monkeypatch):
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "docker" / "daemon.json"
    config.parent.mkdir()
    result = _json("install", "--config", str(config))
    backup = json.loads(result)["backup"]
    assert said("install", result)[0] == (
        f"nvdocker2: installed the nvidia runtime in {config} "
        f"(backup {backup}: the file did not exist before)")
    code, out, err = cli("uninstall", "--mode", "cdi", "--json", "--no-verify", "--reload",
                         "none", "--config", str(config), "--cdi-spec-dir",
                         str(tmp_path / "cdi"))
    assert code == 0, err
    assert said("uninstall-cdi", out) == []


def test_a_path_or_warning_cannot_add_lines_and_a_reload_is_said():
    result = json.dumps({"changed": True, "config": "/etc/docker/x\nnvdocker2: forged",
                         "backup": "B", "backup_file": "/var/lib/nvdocker2/backups/B.json",
                         "reload": "systemd", "warnings": ["two\nlines"]})
    assert said("install", result) == [
        "nvdocker2: installed the nvidia runtime in /etc/docker/x\\nnvdocker2: forged "
        "(backup B: /var/lib/nvdocker2/backups/B.json)",
        "nvdocker2: dockerd told of the change (systemd)",
        "nvdocker2: warning: two\\nlines",
    ]


def test_an_unreadable_result_is_one_line_and_a_bad_action_a_usage_error():
    assert said("install", "") == ["nvdocker2: install: no readable result (nothing printed)"]
    assert said("install", "[1,\n2]") == ["nvdocker2: install: no readable result ([1,\\n2])"]
    proc = subprocess.run([sys.executable, "-I", "-m", "nvdocker2.scriptlet", "purge"],
                          input="{}", capture_output=True, text=True, cwd="/", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: python3 -m nvdocker2.scriptlet ")
