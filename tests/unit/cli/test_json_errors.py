"""`--json` answers one object whatever happens, with at least the keys reference §2 names:
a failed run too, with `config` and `backup` null only where they do not apply."""

from __future__ import annotations

import json

from ..cli_run import cli

RT = "/usr/bin/nvidia-container-runtime"
PROMISED = {"changed", "config", "backup", "reload", "verified", "warnings", "notes", "changes",
            "dry_run", "before", "after", "error", "hint", "exit_code"}


def test_a_refused_file_answers_every_promised_key(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(b'{"debug": true,}')
    code, out, err = cli("install", "--config", str(cfg), "--runtime-path", RT,
                         "--allow-missing-runtime", "--reload", "none", "--json")
    obj = json.loads(out)
    assert code == 2 and PROMISED <= set(obj)
    assert (obj["changed"], obj["config"], obj["backup"], obj["exit_code"]) == (
        False, str(cfg), None, 2)
    assert "trailing comma" in obj["error"] and err.startswith("error: ")


def test_an_unknown_backup_answers_every_promised_key(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_bytes(b"{}\n")
    code, out, _ = cli("rollback", "--config", str(cfg), "--reload", "none", "--json")
    obj = json.loads(out)
    assert code == 2 and PROMISED <= set(obj) and obj["backup"] is None
