"""The PCI bus ids and DRI node names graphics discovery accepts, checked without `re` (it
runs in every graphics container's `create`): what the regular expressions they replace
accepted, and nothing else."""

from __future__ import annotations

import re

import pytest

from nvdocker2.direct.graphics import is_bus_id, is_dri_name

# What graphics discovery matched before (Python's `\d` also takes other scripts' digits).
BUS_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
DRI_RE = re.compile(r"(card|renderD)[0-9]{1,4}")


@pytest.mark.parametrize("text, ok", [
    ("0000:0a:00.0", True), ("00000000:3b:1f.7", True), ("0000:0a:00.8", False),
    ("0000:0A:00.0", False), ("000:0a:00.0", False), ("000000000:0a:00.0", False),
    ("0000:0a:00", False), ("0000:0a:00.", False), ("0000:0a:00.00", False),
    ("0000:0a:0.0", False), ("0000:0a:00.0/drm/..", False), ("0000:0a:00:00.0", False),
    ("", False), ("0000:0g:00.0", False),
])
def test_is_bus_id(text, ok):
    assert is_bus_id(text) is ok
    assert bool(BUS_RE.fullmatch(text)) is ok


@pytest.mark.parametrize("name, ok", [
    ("card0", True), ("card1", True), ("renderD128", True), ("renderD1234", True),
    ("renderD12345", False), ("card", False), ("renderD", False), ("card-1", False),
    ("controlD64", False), ("card\u0661", False), ("by-path", False), ("Card0", False),
    ("card0 ", False),
])
def test_is_dri_name(name, ok):
    assert is_dri_name(name) is ok
    assert bool(DRI_RE.fullmatch(name)) is ok
