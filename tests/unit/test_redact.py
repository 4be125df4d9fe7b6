"""Credentials in URLs are masked in what nvdocker2 prints (redact.py): diffs, results,
messages and JSON, through the real CLI too, while daemon.json and its backups keep them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2.redact import MaskingStream, mask_credentials, masked_text

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
RT = "/usr/bin/nvidia-container-runtime"
SECRET = "s3cr3t-Pa55"
PROXIED = (
    '{\n    "proxies": {\n'
    f'        "http-proxy": "http://alice:{SECRET}@proxy.example:3128",\n'
    f'        "https-proxy": "https://bob:{SECRET}@proxy.example:3129"\n'
    '    },\n    "log-level": "warn"\n}\n'
).encode()


@pytest.mark.parametrize(
    "text, shown",
    [
        ('"http-proxy": "http://alice:s3cret@proxy:3128"',
         '"http-proxy": "http://xxxxx:xxxxx@proxy:3128"'),
        ('"https-proxy": "https://token@proxy.example.com/"',
         '"https-proxy": "https://xxxxx:xxxxx@proxy.example.com/"'),
        ("socks5://u:p%40ss@h:1080 and ftp://x:y@z",
         "socks5://xxxxx:xxxxx@h:1080 and ftp://xxxxx:xxxxx@z"),
        # No credentials: unchanged (an @ after the host's path is not userinfo).
        ('"hosts": ["unix:///var/run/docker.sock", "tcp://10.0.0.1:2376"]',
         '"hosts": ["unix:///var/run/docker.sock", "tcp://10.0.0.1:2376"]'),
        ('"registry-mirrors": ["https://mirror.example.com/a@b"]',
         '"registry-mirrors": ["https://mirror.example.com/a@b"]'),
        ('"no-proxy": "user@example.com"', '"no-proxy": "user@example.com"'),
    ],
)
def test_mask_credentials(text, shown):
    assert mask_credentials(text) == shown


def test_masked_text_keeps_no_file_apart_from_an_empty_one():
    assert masked_text(None) is None
    assert masked_text(b"") == ""
    assert masked_text(b'{"x": "http://a:b@c"}\r\n') == '{"x": "http://xxxxx:xxxxx@c"}\r\n'


def nvdocker2(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NVDOCKER2_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([str(NVDOCKER2), *args], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    path = tmp_path / "daemon.json"
    path.write_bytes(PROXIED)
    return path


def test_dry_run_diff_masks_the_proxy_passwords_of_neighbouring_lines(tmp_path, cfg):
    r = nvdocker2(tmp_path, "install", "--config", str(cfg), "--runtime-path", RT,
                  "--allow-missing-runtime", "--dry-run",
                  "--reload", "none")
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    assert ' "https-proxy": "https://xxxxx:xxxxx@proxy.example:3129"\n' in r.stdout
    assert '+    "runtimes": {\n' in r.stdout
    assert cfg.read_bytes() == PROXIED

    j = nvdocker2(tmp_path, "install", "--config", str(cfg), "--runtime-path", RT,
                  "--allow-missing-runtime", "--dry-run",
                  "--reload", "none", "--json")
    assert j.returncode == 0, j.stderr
    assert SECRET not in j.stdout + j.stderr
    assert "http://xxxxx:xxxxx@proxy.example:3128" in json.loads(j.stdout)["diff"]


def test_the_file_and_the_backup_keep_the_password_the_output_does_not(tmp_path, cfg):
    r = nvdocker2(tmp_path, "install", "--config", str(cfg), "--runtime-path", RT,
                  "--allow-missing-runtime",
                  "--runtime-arg", f"--proxy=http://carol:{SECRET}@p:1", "--reload", "none")
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    assert '"runtimeArgs": ["--proxy=http://xxxxx:xxxxx@p:1"]' in r.stdout
    assert cfg.read_bytes().count(SECRET.encode()) == 3
    (backup,) = [p for p in (tmp_path / "state" / "backups").glob("*.json")
                 if not p.name.endswith(".meta.json")]
    assert backup.read_bytes() == PROXIED

    for args in (["status"], ["status", "--json"], ["backups"]):
        s = nvdocker2(tmp_path, *args, "--config", str(cfg), "--docker-host",
                      f"tcp://dave:{SECRET}@127.0.0.1:9")
        assert SECRET not in s.stdout + s.stderr, args
    rollback = nvdocker2(tmp_path, "rollback", "--config", str(cfg), "--reload", "none",
                         "--dry-run")
    assert rollback.returncode == 0, rollback.stderr
    assert SECRET not in rollback.stdout + rollback.stderr
    assert "xxxxx:xxxxx@p:1" in rollback.stdout


def test_an_error_message_masks_the_password_too(tmp_path, cfg):
    r = nvdocker2(tmp_path, "install", "--config", str(cfg), "--runtime-path", RT,
                  "--allow-missing-runtime",
                  "--docker-host", f"https://erin:{SECRET}@127.0.0.1:2376")
    assert r.returncode in (2, 3), r.stderr
    assert r.stderr.startswith("error: ") and "xxxxx:xxxxx@" in r.stderr
    assert SECRET not in r.stdout + r.stderr
    assert cfg.read_bytes() == PROXIED


def test_the_masking_stream_passes_everything_else_through():
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    inner = Terminal()
    stream = MaskingStream(inner)
    assert stream.write("proxy http://u:pw@h\n") == len("proxy http://u:pw@h\n")
    stream.writelines(["a https://x:y@z ", "b\n"])
    assert inner.getvalue() == "proxy http://xxxxx:xxxxx@h\na https://xxxxx:xxxxx@z b\n"
    assert stream.isatty()
