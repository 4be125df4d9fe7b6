"""The validators of what a container may name beside GPU ids (nvdocker2.device_ids): CDI
device names, which reach the runtime's edits, and IMEX channel numbers, which become device
nodes. Exact results and exact refusals: these strings decide what a container gets."""

from __future__ import annotations

import pytest

from nvdocker2.device_ids import (
    RequestError,
    is_kind,
    parse_cdi_name,
    parse_imex_channels,
)

SRC = "NVIDIA_IMEX_CHANNELS"


def imex_refusal(value: str) -> str:
    with pytest.raises(RequestError) as e:
        parse_imex_channels(value, SRC)
    return e.value.message


@pytest.mark.parametrize("value, want", [
    ("all", "all"),
    (" none ", "none"),
    ("0", ("0",)),
    ("3, 1,03,1", ("3", "1")),
    ("1048575", ("1048575",)),
])
def test_imex_channels_parse_to_these_channels(value, want):
    assert parse_imex_channels(value, SRC) == want


@pytest.mark.parametrize("item", ["1048576", "2097151", "", "x", "-1", "\u0663", "all", "0x1"])
def test_an_imex_channel_that_is_no_number_up_to_2_20_minus_1_is_refused(item):
    value = f"1,{item}"
    assert imex_refusal(value) == (
        f"{SRC}: invalid IMEX channel {item!r:.40} (expected all, none, or channel numbers 0 to"
        " 1048575 separated by commas)")


def test_the_imex_list_may_be_8192_characters_long_and_no_more():
    longest = "0," * 4095 + "00"
    assert len(longest) == 8192 and parse_imex_channels(longest, SRC) == ("0",)
    assert imex_refusal(longest + "0") == f"{SRC}: channel list too long (8193 characters)"


CDI_MESSAGE = ("(expected vendor/class=name: vendor of letters, digits, '.' and '-', class of"
               " letters, digits, '_' and '-', name of letters, digits, '_', '.', ':' and '-')")


@pytest.mark.parametrize("name", [
    "nvidia.com/gpu=0",
    "example-1.com/my_class-b=dev_1.a:b-c",
    "a.b/c=d",
    "nvidia.com/gpu=" + "a" * (256 - len("nvidia.com/gpu=")),
])
def test_cdi_names_of_the_grammar_pass_unchanged(name):
    assert parse_cdi_name(name, "X") == name


@pytest.mark.parametrize("name", [
    "nvidia.com/gpu=" + "a" * (257 - len("nvidia.com/gpu=")),
    "nvidia.com/gpu",            # no =name
    "nvidia.com=0",              # no class
    "nvidia.com/gpu=-0",         # a name that starts like an option
    "nvidia.com/gpu=0;rm",       # a separator
    "nvidia.com/gpu=0/../x",     # a path
    "nvidia.com/-gpu=0",
    "nvidia.com/g.pu=0",         # '.' is not a class character
    "nvidia_com/gpu=0",          # '_' is not a vendor character
    "-nvidia.com/gpu=0",
    "/gpu=0",
    "nvidia.com/=0",
    "nvidia.com/gpu=",
    "nvidia.com/gpu=0\n",
    "nvidia.com/gpu=\u0663",
])
def test_other_cdi_names_are_refused_with_the_grammar(name):
    with pytest.raises(RequestError) as e:
        parse_cdi_name(name, "NVIDIA_VISIBLE_DEVICES")
    assert e.value.message == (
        f"NVIDIA_VISIBLE_DEVICES: invalid CDI device name {name!r:.80} {CDI_MESSAGE}")


@pytest.mark.parametrize("kind, ok", [
    ("nvidia.com/gpu", True), ("a/b", True), ("x.y/gpu_all-1", True),
    ("nvidia.com", False), ("nvidia.com/", False), ("/gpu", False), ("nvidia.com/g=pu", False),
    ("nvidia.com/gpu/x", False), (".nvidia/gpu", False),
])
def test_kinds(kind, ok):
    assert is_kind(kind) is ok
