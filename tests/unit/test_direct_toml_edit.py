"""`install --mode`: one key of config.toml changes, every other byte stays."""

from __future__ import annotations

import pytest

from nvdocker2.direct import DirectError
from nvdocker2.direct.toml_edit import set_mode

FILE = (
    "# operator's notes\n"
    "disable-require = false\n"
    "\n"
    "[nvidia-container-runtime]\n"
    "# low-level runtimes, first found wins\n"
    'runtimes = ["runc", "crun"]\n'
    'debug = "/var/log/nvidia-container-runtime.log"\n'
    "\n"
    "[nvidia-container-cli]\n"
    'ldconfig = "@/sbin/ldconfig"\n'
    'mode = "not this one"\n'
)


def test_mode_is_added_under_the_table_header_and_nothing_else_moves():
    out = set_mode(FILE, "direct")
    assert out == FILE.replace(
        "[nvidia-container-runtime]\n", '[nvidia-container-runtime]\nmode = "direct"\n')


def test_an_existing_mode_line_is_replaced_in_place_keeping_its_comment():
    text = FILE.replace("[nvidia-container-runtime]\n",
                        "[nvidia-container-runtime]\n  mode = 'direct'   # set by ops\n")
    assert set_mode(text, "legacy") == text.replace("'direct'", '"legacy"')


def test_same_mode_returns_the_same_text():
    text = set_mode(FILE, "direct")
    assert set_mode(text, "direct") is text


@pytest.mark.parametrize(
    "before, after",
    [
        ("", '[nvidia-container-runtime]\nmode = "direct"\n'),
        ("a = 1", 'a = 1\n\n[nvidia-container-runtime]\nmode = "direct"\n'),
        ("a = 1\r\n", 'a = 1\r\n\r\n[nvidia-container-runtime]\r\nmode = "direct"\r\n'),
        ("[nvidia-container-runtime]", '[nvidia-container-runtime]\nmode = "direct"\n'),
    ],
)
def test_missing_table_or_file_and_line_endings(before, after):
    assert set_mode(before, "direct") == after


@pytest.mark.parametrize(
    "text, message",
    [
        ('nvidia-container-runtime.mode = "legacy"\n', "without rewriting other lines"),
        ("nvidia-container-runtime = { mode = \"legacy\" }\n", "without rewriting other lines"),
        ("[broken\n", "config.toml: not valid TOML"),
    ],
)
def test_what_a_line_edit_cannot_do_safely_is_refused(text, message):
    with pytest.raises(DirectError, match=message):
        set_mode(text, "direct")


def test_unknown_mode_is_refused():
    with pytest.raises(DirectError, match="unknown mode 'fast'"):
        set_mode("", "fast")
