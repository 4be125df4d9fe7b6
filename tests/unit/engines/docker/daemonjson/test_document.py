"""daemon.json bytes ⇄ document: style kept, values exact, every syntax error named with
line:column, hostile input refused cleanly."""

from __future__ import annotations

import json
import os

import pytest

from nvdocker2.engines.docker.daemonjson import document
from nvdocker2.engines.docker.daemonjson.document import Style, dumps, parse
from nvdocker2.engines.docker.daemonjson.parser import DocumentError, JsonFloat
from nvdocker2.errors import EXIT_BAD_INPUT

SAMPLES = [
    {},
    {"debug": True},
    {
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    },
    {
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "storage-driver": "overlay2",
        "dns": ["8.8.8.8", "1.1.1.1"],
        "labels": [],
    },
    {
        "default-address-pools": [{"base": "172.80.0.0/16", "size": 24}],
        "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536}},
        "builder": {
            "gc": {
                "enabled": True,
                "defaultKeepStorage": "20GB",
                "policy": [{"keepStorage": "10GB", "filter": ["unused-for=2200h"]}],
            }
        },
        "features": {"buildkit": True},
        "mtu": 1450,
        "registry-mirrors": ["https://m.example"],
        "x": None,
        "n": -0,
        "e": {"a": {}, "b": [[]]},
    },
    {"labels": ["zone=é", "ключ=значение", "emoji=🚀"]},
]


@pytest.mark.parametrize("sample", SAMPLES, ids=range(len(SAMPLES)))
@pytest.mark.parametrize("indent", [2, 4, "\t"])
@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("ending", ["", "\n"])
def test_standard_files_write_back_byte_identical(sample, indent, ascii_only, ending):
    text = json.dumps(sample, indent=indent, ensure_ascii=ascii_only) + ending
    raw = text.encode("utf-8")
    doc = parse(raw)
    assert doc.data == sample
    assert doc.serialize() == raw
    # The writer on its own (no original text reused) reproduces the file too.
    assert dumps(doc.data, doc.style).encode("utf-8") == raw


@pytest.mark.parametrize("sample", SAMPLES[1:4], ids=range(3))
def test_crlf_files_write_back_byte_identical_and_stay_crlf(sample):
    raw = (json.dumps(sample, indent=4) + "\n").replace("\n", "\r\n").encode()
    doc = parse(raw)
    assert doc.style.newline == "\r\n"
    assert dumps(doc.data, doc.style).encode() == raw
    new = dict(doc.data, debug=False)
    out = doc.serialize(new)
    assert b"\r\n" in out and b"\n" not in out.replace(b"\r\n", b"")


@pytest.mark.parametrize("sep", [(", ", ": "), (",", ":")])
def test_one_line_files_stay_on_one_line(sep):
    raw = json.dumps({"debug": True, "mtu": 1500}, separators=sep).encode()
    doc = parse(raw)
    assert doc.style.indent is None
    assert dumps(doc.data, doc.style).encode() == raw
    out = doc.serialize(dict(doc.data, runtimes={"nvidia": {"path": "/x"}}))
    assert (
        out
        == json.dumps(
            {"debug": True, "mtu": 1500, "runtimes": {"nvidia": {"path": "/x"}}}, separators=sep
        ).encode()
    )


def test_untouched_values_keep_their_hand_written_layout():
    raw = (
        b'{\n    "dns": ["8.8.8.8", "1.1.1.1"],\n    "log-opts": {"max-size": "10m"},\n'
        b'    "n": 1E3,\n    "s": "\\u00e9t\\u00e9"\n}\n'
    )
    doc = parse(raw)
    out = doc.serialize(dict(doc.data, debug=True))
    assert out == (
        b'{\n    "dns": ["8.8.8.8", "1.1.1.1"],\n    "log-opts": {"max-size": "10m"},\n'
        b'    "n": 1E3,\n    "s": "\\u00e9t\\u00e9",\n    "debug": true\n}\n'
    )


def test_exact_numbers_survive():
    raw = (
        b'{"big": 12345678901234567890, "neg": -98765432109876543210, '
        b'"f": 1.0e400, "g": 0.10, "h": 1E-7}'
    )
    doc = parse(raw)
    assert doc.data["big"] == 12345678901234567890 and type(doc.data["big"]) is int
    assert isinstance(doc.data["f"], JsonFloat) and doc.data["f"].text == "1.0e400"
    assert doc.data["f"] == float("inf")
    out = doc.serialize(dict(doc.data, x=1)).decode()
    for lit in ("12345678901234567890", "-98765432109876543210", "1.0e400", "0.10", "1E-7"):
        assert lit in out
    # Rewritten from scratch (no source), the literals are still the original ones.
    assert dumps(doc.data, doc.style).startswith(
        '{"big": 12345678901234567890, "neg": -98765432109876543210, "f": 1.0e400'
    )


def test_non_ascii_is_written_as_utf8_not_escaped():
    doc = parse('{"labels": ["café"]}\n'.encode())
    out = doc.serialize(dict(doc.data, debug=True))
    assert "café".encode() in out and b"\\u" not in out


def test_ascii_escaped_file_keeps_escaping_new_non_ascii():
    doc = parse(b'{\n  "a": "caf\\u00e9"\n}\n')
    assert doc.style.ensure_ascii
    out = doc.serialize(dict(doc.data, b="ñ"))
    assert b'"b": "\\u00f1"' in out


def test_lone_surrogate_is_kept_as_an_escape():
    doc = parse(b'{"a": "\\ud800"}')
    out = document.dumps(dict(doc.data), Style(indent=None, suffix=""))
    assert out == '{"a": "\\ud800"}'
    out.encode("utf-8")


@pytest.mark.parametrize(
    "raw, line, col, words",
    [
        (b'{"a": 1,}', 1, 8, "trailing comma"),
        (b'{\n  "a": [1, 2,]\n}', 2, 13, "trailing comma"),
        (b'{\n  // comment\n  "a": 1\n}', 2, 3, "comments are not allowed"),
        (b'{"a": 1 /* c */}', 1, 9, "comments are not allowed"),
        (b"# comment\n{}", 1, 1, "comments are not allowed"),
        (b'{"a": NaN}', 1, 7, "NaN is not a valid JSON value"),
        (b'{"a": Infinity}', 1, 7, "Infinity"),
        (b'{"a": -Infinity}', 1, 7, "Infinity"),
        (b'{"a": [1, 2', 1, 12, "truncated"),
        (b'{\n  "a": "tru', 2, 8, "unterminated string"),
        (b'{"a"', 1, 5, "truncated"),
        (b"{'a': 1}", 1, 2, "double quotes"),
        (b"{a: 1}", 1, 2, "not in double quotes"),
        (b'{"a" 1}', 1, 6, "':'"),
        (b'{"a": 1 "b": 2}', 1, 9, "missing comma"),
        (b'{"a": 1} {"b": 2}', 1, 10, "after the end"),
        (b'{"a": 01}', 1, 8, "malformed number"),
        (b'{"a": 1.}', 1, 8, "malformed number"),
        (b'{"a": tru}', 1, 7, "unexpected word"),
        (b'{"a": "x\ty"}', 1, 9, "control character"),
        (b'{"a": "\\q"}', 1, 8, "invalid escape"),
        (b'{"a": 1]', 1, 8, "does not match"),
        (b"[]", 1, 1, "top level is an array"),
        (b'"x"', 1, 1, "top level is a string"),
        (b"null", 1, 1, "top level is null"),
        (b'{"a": 1}\x00\x00', 1, 9, "NUL bytes"),
        (b'{"a": "\xff"}', 1, 8, "invalid UTF-8 at byte offset 7"),
        (b"\xff\xfe{\x00}\x00", 1, 1, "invalid UTF-8 at byte offset 0"),
        (b'{\n"a": "\xc3"}', 2, 7, "invalid UTF-8 at byte offset 8"),
    ],
)
def test_syntax_errors_name_line_column_and_reason(raw, line, col, words):
    with pytest.raises(DocumentError) as ei:
        parse(raw, "/etc/docker/daemon.json")
    e = ei.value
    assert e.exit_code == EXIT_BAD_INPUT
    assert (e.line, e.column) == (line, col), e.message
    assert words in e.message
    assert e.message.startswith(f"/etc/docker/daemon.json line {line}, column {col}: ")
    assert e.hint


def test_utf16_file_gets_a_hint_about_utf16():
    with pytest.raises(DocumentError) as ei:
        parse('{"a": 1}'.encode("utf-16"))
    assert "UTF-16" in ei.value.hint


@pytest.mark.parametrize("raw", [b"", b"   ", b"\n\n", b" \t\r\n"])
def test_empty_and_whitespace_files_are_an_empty_object(raw):
    doc = parse(raw)
    assert doc.data == {}
    expected = b'{\n    "debug": true\n}\n'
    if b"\r\n" in raw:
        expected = expected.replace(b"\n", b"\r\n")
    assert doc.serialize({"debug": True}) == expected
    # An existing empty file is rewritten even without an edit: dockerd 20.10 refuses it.
    assert doc.changed_by_loading


def test_bom_is_dropped_with_a_warning():
    doc = parse(b'\xef\xbb\xbf{\n  "debug": true\n}\n')
    assert doc.had_bom and doc.data == {"debug": True}
    assert any("byte order mark" in w for w in doc.warnings)
    assert doc.serialize() == b'{\n  "debug": true\n}\n'
    assert doc.changed_by_loading


def test_duplicate_keys_warn_with_their_path_and_last_wins():
    doc = parse(b'{"a": 1, "runtimes": {"x": {"path": "/a"}, "x": {"path": "/b"}}, "a": 2}')
    assert doc.data["a"] == 2 and doc.data["runtimes"]["x"] == {"path": "/b"}
    assert doc.duplicates == ("runtimes.x", "a")
    assert any('"runtimes.x", "a"' in w for w in doc.warnings)


def test_nesting_1000_deep_is_fine_and_1001_is_refused_without_recursion_error():
    ok = b'{"a": ' + b"[" * 999 + b"]" * 999 + b"}"
    doc = parse(ok)
    assert doc.serialize(dict(doc.data, b=1)).startswith(b'{"a": [[[')
    assert dumps(doc.data, Style()).count("[") == 999
    bad = b'{"a": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with pytest.raises(DocumentError) as ei:
        parse(bad)
    assert "nesting deeper than 1000" in ei.value.message
    with pytest.raises(DocumentError):
        parse(b"[" * 100000)


def test_over_16_mib_is_refused():
    raw = b'{"a": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    with pytest.raises(DocumentError) as ei:
        parse(raw)
    assert "16 MiB" in ei.value.message


def test_load_missing_file_is_a_new_empty_document(tmp_path):
    doc = document.load(tmp_path / "daemon.json")
    assert not doc.existed and doc.data == {}
    assert doc.serialize({"runtimes": {}}) == b'{\n    "runtimes": {}\n}\n'


def test_load_refuses_directory_dangling_symlink_and_fifo(tmp_path):
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(DocumentError, match="is a directory"):
        document.load(tmp_path / "dir.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "missing.json")
    with pytest.raises(DocumentError, match="which does not exist"):
        document.load(tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(DocumentError, match="not a regular file"):
        document.load(tmp_path / "fifo.json")


def test_load_reads_through_a_symlink(tmp_path):
    (tmp_path / "real.json").write_bytes(b'{"debug": true}')
    (tmp_path / "daemon.json").symlink_to("real.json")
    assert document.load(tmp_path / "daemon.json").data == {"debug": True}


def test_same_distinguishes_types_and_order():
    assert document.same({"a": 1, "b": 2}, {"a": 1, "b": 2})
    assert not document.same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not document.same(1, True)
    assert not document.same(1, JsonFloat("1.0"))
    assert not document.same(JsonFloat("1.0"), JsonFloat("1.00"))


def test_rewritten_object_keeps_each_untouched_member_exactly_as_written():
    raw = (
        b'{\n    "data-root": "/srv/docker",\n    "log-driver":"json-file",\n'
        b'    "log-opts": { "max-size": "10m",  "max-file": "3" },\n'
        b'    "registry-mirrors": [\n        "https://mirror.example.org"\n    ]\n}\n'
    )
    doc = parse(raw)
    new = dict(doc.data, runtimes={"nvidia": {"path": "/x"}})
    out = doc.serialize(new)
    assert out == raw[:-3] + (
        b',\n    "runtimes": {\n        "nvidia": {\n'
        b'            "path": "/x"\n        }\n    }\n}\n'
    )
    # Taking the member out again gives the original bytes back.
    assert parse(out).serialize(doc.data) == raw


def test_removing_a_member_takes_its_separator_with_it():
    raw = b'{\n  "a": 1,\n  "b":2,\n  "c" : 3\n}'
    doc = parse(raw)
    assert doc.serialize({"a": 1, "c": 3}) == b'{\n  "a": 1,\n  "c" : 3\n}'
    assert doc.serialize({"b": 2, "c": 3}) == b'{\n  "b":2,\n  "c" : 3\n}'
    assert doc.serialize({"a": 1, "b": 2}) == b'{\n  "a": 1,\n  "b":2\n}'


def test_new_member_of_a_one_line_object_stays_on_that_line():
    raw = b'{\n    "runtimes": {"kata": {"path": "/k"}},\n    "debug": true\n}\n'
    doc = parse(raw)
    rts = dict(doc.data["runtimes"], nvidia={"path": "/x", "runtimeArgs": ["-v"]})
    out = doc.serialize(dict(doc.data, runtimes=rts))
    assert out == (
        b'{\n    "runtimes": {"kata": {"path": "/k"}, "nvidia": {"path": "/x", '
        b'"runtimeArgs": ["-v"]}},\n    "debug": true\n}\n'
    )


def test_duplicate_keys_are_kept_as_written_and_the_last_one_is_edited():
    doc = parse(b'{"a": 1, "a": 2, "b": 3}')
    assert doc.serialize({"a": 2, "b": 3, "c": 4}) == b'{"a": 1, "a": 2, "b": 3, "c": 4}'
    assert doc.serialize({"a": 5, "b": 3}) == b'{"a": 1, "a": 5, "b": 3}'
    assert parse(doc.serialize({"a": 5, "b": 3})).data == {"a": 5, "b": 3}


def test_removing_a_duplicated_key_removes_every_occurrence():
    """Else the earlier occurrence would take effect once the last one is gone."""
    doc = parse(b'{"a": 1, "a": 2, "b": 3}')
    assert doc.serialize({"b": 3}) == b'{"b": 3}'
    nested = parse(b'{"runtimes": {"nvidia": {"path": "/old"}, "nvidia": {"path": "/a"}}, "x": 1}')
    assert nested.serialize({"runtimes": {}, "x": 1}) == b'{"runtimes": {}, "x": 1}'
