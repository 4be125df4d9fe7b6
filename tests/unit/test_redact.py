"""Credentials in URLs are masked in what nvdocker2 prints about a file (redact.py)."""

from __future__ import annotations

import pytest

from nvdocker2.redact import mask_credentials, masked_text


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
    assert masked_text('{"x": "http://a:b@c"}\r\n'.encode()) == '{"x": "http://xxxxx:xxxxx@c"}\r\n'
