"""Properties over arbitrary JSON objects (hypothesis): round trips are exact, install is
idempotent, install then uninstall gives back the original bytes."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvdocker2.engines import docker as docker_engine
from nvdocker2.engines.docker.daemonjson import document, edit
from nvdocker2.engines.docker.daemonjson.parser import DocumentError

RT = "/usr/bin/nvidia-container-runtime"

keys = st.text(alphabet=string.ascii_letters + string.digits + '-_.é ü"\\/', min_size=0, max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
objects = st.dictionaries(
    keys.filter(lambda k: k not in ("runtimes", "default-runtime")), values, max_size=6
)
runtimes = st.dictionaries(
    keys.filter(lambda k: k != "nvidia"),
    st.fixed_dictionaries(
        {"path": st.sampled_from(["/usr/bin/crun", "/opt/kata/bin/kata-runtime"])}
    ),
    max_size=3,
)
style_args = st.sampled_from([2, 4, "\t"]), st.booleans(), st.sampled_from(["", "\n"])

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(objects, *style_args)
def test_parse_then_write_is_byte_identical(obj, indent, ascii_only, ending):
    raw = (json.dumps(obj, indent=indent, ensure_ascii=ascii_only) + ending).encode()
    doc = document.parse(raw)
    assert doc.serialize() == raw
    assert document.dumps(doc.data, doc.style).encode() == raw


@FAST
@given(objects, runtimes, st.booleans(), *style_args)
def test_install_then_uninstall_gives_back_the_original(
    obj, rts, with_rts, indent, ascii_only, ending
):
    if with_rts:
        obj = dict(obj, runtimes=rts)
    raw = (json.dumps(obj, indent=indent, ensure_ascii=ascii_only) + ending).encode()
    doc = document.parse(raw)
    installed, ch = edit.add_runtime(doc.data, "nvidia", RT)
    assert ch.changed
    after_install = document.parse(doc.serialize(installed))
    assert after_install.data["runtimes"]["nvidia"] == {"path": RT}
    # Uninstall as the transaction does it with a journal: put back what was there before.
    restored, _ = edit.put_runtime(after_install.data, "nvidia", edit.ABSENT)
    if "runtimes" not in obj:
        restored, _ = edit.drop_empty_runtimes(restored)
    assert after_install.serialize(restored) == raw


@FAST
@given(objects, *style_args)
def test_install_is_idempotent(obj, indent, ascii_only, ending):
    raw = (json.dumps(obj, indent=indent, ensure_ascii=ascii_only) + ending).encode()
    once_doc = document.parse(document.parse(raw).serialize(edit.add_runtime(obj, "nvidia", RT)[0]))
    twice, ch = edit.add_runtime(once_doc.data, "nvidia", RT)
    assert not ch.changed
    assert once_doc.serialize(twice) == once_doc.raw


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200)
    | st.text(alphabet="{}[]\":,0123456789.eE-+ntrufalsNI \n\t\\/'", max_size=60).map(str.encode)
)
def test_arbitrary_bytes_parse_or_fail_with_a_located_error(raw):
    try:
        doc = document.parse(raw)
    except DocumentError as e:
        assert e.exit_code == 2 and e.message
        return
    assert isinstance(doc.data, dict)
    # Anything we accept, the standard library accepts with the same meaning.
    text = raw.decode("utf-8-sig").strip()
    if text:
        assert json.loads(text) == doc.data or _has_nan(json.loads(text))


def _has_nan(v):
    if isinstance(v, float):
        return v != v
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_nan(x) for x in v)
    return False


@FAST
@given(objects, runtimes)
def test_transitional_file_always_has_the_keys_a_reload_needs(obj, rts):
    current = dict(obj, runtimes=dict(rts, nvidia={"path": RT}), **{"default-runtime": "nvidia"})
    trans = docker_engine.transitional(obj, current)
    assert trans is not None
    assert trans["runtimes"] == {} and trans["default-runtime"] == "runc"
    assert {k: v for k, v in trans.items() if k not in ("runtimes", "default-runtime")} == obj


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects, runtimes, st.booleans(), st.booleans(), *style_args)
def test_real_install_then_uninstall_restores_the_file(
    obj, rts, with_rts, set_default, indent, ascii_only, ending
):
    import tempfile
    from pathlib import Path

    from nvdocker2.engines.docker.daemonjson import validate

    obj = {k: v for k, v in obj.items() if k not in validate.known_keys()}
    if with_rts:
        obj = dict(obj, runtimes=rts)
    raw = (json.dumps(obj, indent=indent, ensure_ascii=ascii_only) + ending).encode()
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "daemon.json"
        cfg.write_bytes(raw)
        state = Path(d) / "state"
        res = docker_engine.install(cfg, runtime_path=RT, set_default=set_default, state=state)
        assert res.changed
        again = docker_engine.install(cfg, runtime_path=RT, set_default=set_default, state=state)
        assert not again.changed
        docker_engine.uninstall(cfg, state=state)
        assert cfg.read_bytes() == raw
