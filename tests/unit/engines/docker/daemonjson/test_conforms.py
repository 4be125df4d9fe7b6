"""The quick schema check (daemonjson/conforms.py) that spares `install` importing jsonschema
says what jsonschema says: a document it passes has no schema error, one it fails has one, and
it answers for every document read from JSON text. Documents are drawn along the schema's own
shape (every key, every type, both runtime forms and their mixes, numbers at the bounds) and
read with the daemon.json parser, so integers written as 1.0 arrive as they do in a real file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvdocker2.engines.docker.daemonjson import document, validate
from nvdocker2.engines.docker.daemonjson.conforms import conforms

SCHEMA = validate.schema()
FIXTURE = Path(__file__).parents[4] / "fixtures" / "daemon-45-lines.json"


def jsonschema_says_valid(doc) -> bool:
    return not list(validate._validator_class()(SCHEMA).iter_errors(doc))


def read_back(doc) -> object:
    """`doc` as the daemon.json parser reads it from its JSON text."""
    return document.parse(json.dumps(doc).encode()).data


SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4))
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _resolve(s: dict) -> dict:
    ref = s.get("$ref")
    return SCHEMA["definitions"][ref.rsplit("/", 1)[1]] if ref else s


def _mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """`good` seven times in eight, else `bad`."""
    return st.integers(0, 7).flatmap(lambda i: bad if i == 0 else good)


def shaped(s: dict, depth: int = 0) -> st.SearchStrategy:
    """Values shaped by schema `s`: mostly of its type and within its bounds, now and then a
    value at or past a bound, of another type, or any JSON value, so both verdicts come up."""
    s = _resolve(s)
    kinds = s.get("type", [])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    good = []
    for kind in kinds:
        if kind == "object" and depth < 4:
            props = {k: shaped(v, depth + 1) for k, v in s.get("properties", {}).items()}
            extra = s.get("additionalProperties", True)
            if isinstance(extra, dict):
                keys = st.text(max_size=4).filter(lambda k, props=props: k not in props)
                good.append(st.dictionaries(keys, shaped(extra, depth + 1), max_size=3))
            good.append(st.fixed_dictionaries({}, optional=props))
        elif kind == "array":
            good.append(st.lists(shaped(s.get("items", {}), depth + 1), max_size=3))
        elif kind == "string":
            good.append(st.sampled_from(s["enum"]) if "enum" in s
                        else st.text(min_size=s.get("minLength", 0), max_size=3))
        elif kind in ("integer", "number"):
            low, high = s.get("minimum", -10), s.get("maximum", 10)
            good.append(st.integers(max(low, -10), min(high, 300)))
            edges = st.sampled_from([low - 1, low, high, high + 1, 1.0, 0.5, -0.0])
            good.append(_mostly(st.integers(max(low, -10), min(high, 300)), edges))
        elif kind == "boolean":
            good.append(st.booleans())
    return _mostly(st.one_of(good), ANY_JSON) if good else ANY_JSON


def _document(keys: list) -> st.SearchStrategy:
    return st.fixed_dictionaries({k: shaped(SCHEMA["properties"][k]) for k in keys})


DOCUMENTS = st.lists(st.sampled_from(sorted(SCHEMA["properties"])), max_size=6,
                     unique=True).flatmap(_document)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
def test_quick_check_agrees_with_jsonschema_on_every_document(doc):
    doc = read_back(doc)
    assert conforms(SCHEMA, doc) == jsonschema_says_valid(doc)


@pytest.mark.parametrize("doc, valid", [
    (json.loads(FIXTURE.read_text()), True),
    ({"runtimes": {"n": {"path": "/x", "runtimeType": "io.x"}}}, False),
    ({"runtimes": {"n": {"runtimeType": "io.x", "options": {"a": 1}}}}, True),
    ({"runtimes": {"n": {"path": "/x", "options": {}}}}, False),
    ({"runtimes": {"n": {}}}, False),
    ({"runtimes": {"n": {"path": ""}}}, False),
    ({"runtimes": {"n": {"path": "x"}}}, True),
    ({"host-gateway-ip": "1.2.3.4", "host-gateway-ips": ["1.2.3.4"]}, False),
    ({"default-address-pools": [{"base": "10.0.0.0/8", "size": 129}]}, False),
    ({"default-address-pools": [{"base": "10.0.0.0/8"}]}, False),
    ({"default-address-pools": [{"base": "a", "size": 0}, {"base": "b", "size": 128}]}, True),
    ({"default-address-pools": [{"base": "10.0.0.0/8", "size": -1}]}, False),
    ({"mtu": True}, False),
    ({"proxies": {"http-proxy": "x", "bogus": "y"}}, False),
    ({"log-format": "json"}, True),
    ({"log-format": "JSON"}, False),
    ({"a-key-no-schema-knows": [1, {"x": None}]}, True),
    ([], False),
])
def test_quick_check_verdicts_on_the_runtime_forms_bounds_and_mixes(doc, valid):
    assert conforms(SCHEMA, doc) is valid
    assert jsonschema_says_valid(doc) is valid


def test_an_integer_written_with_a_fraction_fails_as_dockerd_refuses_it():
    doc = document.parse(b'{"mtu": 1500.0, "max-concurrent-downloads": 3}').data
    assert conforms(SCHEMA, doc) is False
    assert validate.validate(doc)[0] == ["mtu: 1500.0 is not of type integer"]


@pytest.mark.parametrize("schema, instance", [
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 5),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, -5),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 0.5),
    ({"anyOf": [{"type": "string"}, {"maximum": 3}]}, 4),
    ({"minimum": 3, "maximum": 3}, 3),
    ({"minimum": 3}, 2.999),
    ({"minimum": 3}, "2"),
    ({"minLength": 2}, "ab"),
    ({"minLength": 2}, "a"),
    ({"minLength": 2}, 1),
    ({"required": ["a"], "properties": {"a": {"type": "null"}}}, {"a": None}),
    ({"required": ["a"]}, ["a"]),
    ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1}),
    ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1, "b": 2}),
    ({"additionalProperties": {"type": "boolean"}}, {"a": True, "b": 0}),
    ({"items": {"type": "integer"}}, [1, True]),
    ({"items": False}, []),
    ({"items": False}, [1]),
    ({"not": {"type": ["string", "array"]}}, []),
    ({"type": "number"}, True),
    ({"type": "integer"}, 2**70),
    ({"$ref": "#/definitions/d", "definitions": {"d": {"type": "string"}}}, "s"),
    ({"$ref": "#/definitions/d", "definitions": {"d": {"type": "string"}}}, 1),
])
def test_quick_check_agrees_with_jsonschema_keyword_by_keyword(schema, instance):
    errors = list(validate._validator_class()(schema).iter_errors(instance))
    assert conforms(schema, instance) is (not errors)


@pytest.mark.parametrize("schema, instance", [
    ({"pattern": "^a"}, "b"),                      # a keyword it does not know
    ({"items": [{"type": "string"}]}, [1]),        # the tuple form of items
    ({"$ref": "http://example.com/s.json"}, 1),    # a reference outside the schema
    ({"type": "number"}, complex(1, 1)),           # a value JSON cannot hold
    ({"enum": [1, "a"]}, True),                    # an enum of other than strings
])
def test_quick_check_leaves_what_it_does_not_know_to_jsonschema(schema, instance):
    assert conforms(schema, instance) is None
