"""The pure edits of daemon.json's `features` for CDI mode (docs/reference.md §9), as a table."""

from __future__ import annotations

import pytest

from nvdocker2.engines.docker.daemonjson.edit import ABSENT, ShapeError
from nvdocker2.engines.docker.daemonjson.features import (
    drop_empty_features,
    enable_cdi,
    put_cdi,
    spec_dirs,
    version_tuple,
)


@pytest.mark.parametrize("doc,version,after,action", [
    ({}, (25, 0), {"features": {"cdi": True}}, "added"),
    ({"features": {"buildkit": True}}, (26, 1),
     {"features": {"buildkit": True, "cdi": True}}, "added"),
    ({"features": {"cdi": False, "x": True}}, (28, 1), {"features": {"cdi": True, "x": True}},
     "replaced"),
    ({"features": {"cdi": True}}, (26, 1), {"features": {"cdi": True}}, "unchanged"),
    ({}, (28, 2), {}, "unchanged"),
    ({"features": {"buildkit": False}}, (28, 5), {"features": {"buildkit": False}}, "unchanged"),
    ({"features": {"cdi": False}}, (28, 5), {"features": {"cdi": True}}, "replaced"),
    ({"debug": True}, None, {"debug": True, "features": {"cdi": True}}, "added"),
])
def test_enable_cdi(doc, version, after, action):
    new, change = enable_cdi(doc, version)
    assert new == after and list(new) == list(after)
    assert change.key == "features.cdi" and change.action == action


def test_enable_cdi_keeps_key_order_and_leaves_the_input_alone():
    doc = {"a": 1, "features": {"z": True, "b": False}, "c": 2}
    new, _ = enable_cdi(doc, (26, 1))
    assert list(new) == ["a", "features", "c"]
    assert list(new["features"]) == ["z", "b", "cdi"]
    assert doc == {"a": 1, "features": {"z": True, "b": False}, "c": 2}


@pytest.mark.parametrize("doc,key", [
    ({"features": []}, "features"),
    ({"features": "cdi"}, "features"),
    ({"features": {"cdi": "true"}}, "features.cdi"),
    ({"features": {"cdi": 1}}, "features.cdi"),
])
def test_wrong_types_are_shape_errors_naming_the_key(doc, key):
    with pytest.raises(ShapeError) as err:
        enable_cdi(doc, (26, 1))
    assert err.value.key == key


def test_put_back_and_drop_what_install_created():
    new, _ = enable_cdi({}, (26, 1))
    back, change = put_cdi(new, ABSENT)
    assert back == {"features": {}} and change.action == "removed"
    assert drop_empty_features(back)[0] == {}
    assert put_cdi({"features": {"cdi": True}}, False)[0] == {"features": {"cdi": False}}


def test_versions_and_spec_dirs():
    assert version_tuple("26.1.5+dfsg1") == (26, 1)
    assert version_tuple("28.5.2") == (28, 5)
    assert version_tuple("") is None and version_tuple(None) is None
    assert spec_dirs({}) == ("/etc/cdi", "/var/run/cdi")
    assert spec_dirs({"cdi-spec-dirs": ["/x"]}) == ("/x",)
