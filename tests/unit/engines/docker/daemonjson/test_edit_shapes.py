"""The daemon.json edits refuse a wrong shape before touching anything, naming the key, the type
found and the type expected, with a hint; names and no-op edits at their edges."""

from __future__ import annotations

import pytest

from nvdocker2.engines.docker.daemonjson import edit
from nvdocker2.engines.docker.daemonjson.edit import ABSENT, ShapeError
from nvdocker2.errors import EXIT_BAD_INPUT, BadInput

RT = "/usr/bin/nvidia-container-runtime"
TYPES = [(True, "a boolean"), ({}, "an object"), ([], "an array"), ("x", "a string"),
         (None, "null"), (1.5, "a number"), (7, "a number")]


# (where, the document around the value, the key named, the message, the hint, the good type)
PLACES = [
    ("top", lambda v: v, "", "the top level is {}, not an object",
     "daemon.json must be a JSON object: {{ ... }}", dict),
    ("runtimes", lambda v: {"runtimes": v}, "runtimes", '"runtimes" is {}, not an object',
     'write it as "runtimes": {{"NAME": {{"path": "/abs/path"}}}}', dict),
    ("entry", lambda v: {"runtimes": {"ok": {}, "kata": v}}, "runtimes.kata",
     '"runtimes" entry "kata" is {}, not an object', 'write it as "kata": {{"path": "/abs/path"}}',
     dict),
    ("default", lambda v: {"default-runtime": v}, "default-runtime",
     '"default-runtime" is {}, not a string',
     'write it as "default-runtime": "runc" (a runtime name), or remove it', str),
]


@pytest.mark.parametrize("value,name", TYPES, ids=[t[1] + "-" + type(t[0]).__name__ for t in TYPES])
@pytest.mark.parametrize("place", PLACES, ids=[p[0] for p in PLACES])
def test_a_wrong_type_is_refused_naming_key_type_found_and_expected(place, value, name):
    _, document, key, message, hint, good = place
    if isinstance(value, good):
        edit.check_shape(document(value))
        return
    with pytest.raises(ShapeError) as raised:
        edit.check_shape(document(value))
    err = raised.value
    assert (err.key, err.message, err.hint, err.exit_code) == (
        key, message.format(name), hint.format(), EXIT_BAD_INPUT)


BAD = {"runtimes": ["nvidia"]}


@pytest.mark.parametrize("call", [
    lambda: edit.put_runtime(BAD, "nvidia", ABSENT),
    lambda: edit.put_runtime(BAD, "nvidia", {"path": RT}),
    lambda: edit.add_runtime(BAD, "", RT),
    lambda: edit.remove_runtime(BAD, ""),
    lambda: edit.drop_empty_runtimes(BAD),
    lambda: edit.set_default(BAD, ""),
    lambda: edit.put_default(BAD, "runc"),
], ids=["put-absent", "put", "add", "remove", "drop-empty", "set-default", "put-default"])
def test_every_edit_checks_the_shape_first(call):
    with pytest.raises(ShapeError, match='^"runtimes" is an array, not an object$'):
        call()


@pytest.mark.parametrize("name", ["", "nv idia", "nv\tidia", "a\x00b", "a\x1bb"])
def test_a_runtime_name_with_whitespace_or_control_characters_is_refused(name):
    for call in (lambda: edit.add_runtime({}, name, RT), lambda: edit.remove_runtime({}, name),
                 lambda: edit.set_default({}, name)):
        with pytest.raises(BadInput) as raised:
            call()
        assert raised.value.message == f"runtime name {name!r} is empty or contains whitespace"
        assert raised.value.hint == "pass --runtime-name NAME, e.g. --runtime-name nvidia"


@pytest.mark.parametrize("name", ["nv!dia", "nvidia-2", "a.b", "ä"])
def test_other_printable_names_are_accepted(name):
    new, change = edit.add_runtime({}, name, RT)
    assert new == {"runtimes": {name: {"path": RT}}} and change.action == "added"


def test_reserved_names_are_refused_for_adding_only():
    with pytest.raises(BadInput) as raised:
        edit.add_runtime({}, "runc", RT)
    assert raised.value.message == 'runtime name "runc" is reserved by dockerd'
    assert raised.value.hint == (
        "choose another --runtime-name (dockerd ignores or refuses an entry with this name)")
    doc = {"runtimes": {"runc": {"path": "/usr/bin/runc"}}}
    new, change = edit.remove_runtime(doc, "runc")
    assert (new, change.action) == ({"runtimes": {}}, "removed")


def test_a_relative_runtime_path_is_refused_with_its_hint():
    with pytest.raises(BadInput) as raised:
        edit.add_runtime({}, "nvidia", "nvidia-container-runtime")
    assert raised.value.hint == ("pass --runtime-path /absolute/path/to/nvidia-container-runtime"
                                 " (dockerd's PATH may not hold it)")


@pytest.mark.parametrize("name", ["runc", "io.containerd.runc.v2"])
def test_dockerds_own_runtimes_can_be_the_default_without_an_entry(name):
    new, change = edit.set_default({}, name)
    assert (new, change.action) == ({"default-runtime": name}, "added")


def test_set_default_to_an_undefined_runtime_says_so():
    with pytest.raises(BadInput, match='^cannot make "kata" the default runtime'):
        edit.set_default({}, "kata")


@pytest.mark.parametrize("doc", [{}, {"debug": True}, {"runtimes": {"kata": {}}}])
def test_drop_empty_runtimes_leaves_a_missing_or_filled_table(doc):
    new, change = edit.drop_empty_runtimes(doc)
    assert new == doc and (change.key, change.action, change.changed) == (
        "runtimes", "unchanged", False)


def test_drop_empty_runtimes_removes_an_empty_table():
    new, change = edit.drop_empty_runtimes({"debug": True, "runtimes": {}})
    assert new == {"debug": True}
    assert (change.action, change.before, change.after) == ("removed", {}, ABSENT)


@pytest.mark.parametrize("doc", [{}, {"debug": True}])
def test_unsetting_a_missing_default_changes_nothing(doc):
    new, change = edit.unset_default(doc)
    assert new == doc and (change.key, change.action, change.changed) == (
        "default-runtime", "unchanged", False)
