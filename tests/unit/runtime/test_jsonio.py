"""jsonio must read and write exactly what json does (it only skips json's import cost)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvdocker2.runtime import jsonio

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from(["", " ", "\n\t "]))
def test_same_as_json(value, pad):
    text = json.dumps(value)
    assert jsonio.loads(pad + text + pad) == json.loads(text)
    assert jsonio.loads((pad + text).encode()) == json.loads(text)
    assert jsonio.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("text", ["", " ", "{", "[1,]", "{} x", "[1] [2]", "nul", "'a'",
                                  '{"a" 1}', "[" * 100000])
def test_invalid_json_raises_like_json(text):
    with pytest.raises((ValueError, RecursionError)):
        json.loads(text)
    with pytest.raises((ValueError, RecursionError)):
        jsonio.loads(text)


def test_constants_and_big_integers_and_non_ascii():
    assert jsonio.loads('{"n": 12345678901234567890, "u": "ü\\u00fc"}') == {
        "n": 12345678901234567890, "u": "üü"}
    assert jsonio.dumps({"u": "ü", "n": 10**20}) == '{"u":"ü","n":100000000000000000000}'
    with pytest.raises(TypeError):
        jsonio.dumps({"s": {1, 2}})
