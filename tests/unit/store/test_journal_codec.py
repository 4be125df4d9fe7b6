"""The journal is strict JSON of nvdocker2's own writing (store/codec.py): numbers come back to
the letter, whatever nvdocker2 would not have written is a damaged journal, and reading it
needs none of the Docker engine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nvdocker2.changes import ABSENT
from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.store import codec
from nvdocker2.store.journal import Journal, slot, unslot


def _journal(tmp_path):
    return Journal(tmp_path / "state", tmp_path / "daemon.json")


def test_numbers_strings_and_absence_come_back_as_they_were_written(tmp_path):
    j = _journal(tmp_path)
    prev = {"n": codec.JsonFloat("1.50"), "big": codec.JsonFloat("1.0e400"), "i": 10 ** 30,
            "neg": codec.JsonFloat("-0.0"), "s": "naïve \udcff \"q\"", "t": True, "z": None,
            "empty": {}, "list": [1, [], {"a": [codec.JsonFloat("2E-3")]}]}
    rec = {"config": str(tmp_path / "daemon.json"),
           "runtimes": {"nvidia": {"previous": slot(prev), "installed": {"path": "/y"}}},
           "default_runtime": {"previous": slot(ABSENT), "installed": "nvidia"}}
    j.write(rec)
    raw = j.path.read_bytes()
    assert b"1.50" in raw and b"1.0e400" in raw and b"-0.0" in raw and b"2E-3" in raw
    assert raw.endswith(b"}\n") and raw.decode("ascii")  # ASCII: every other char escaped
    json.loads(raw, parse_constant=pytest.fail)  # strict JSON for any reader
    back = j.load()
    assert back == rec
    value = unslot(back["runtimes"]["nvidia"]["previous"])
    assert value["n"].text == "1.50" and value["big"].text == "1.0e400"
    assert value["list"][2]["a"][0].text == "2E-3" and value["s"] == prev["s"]
    assert unslot(back["default_runtime"]["previous"]) is ABSENT
    j.write(back)
    assert j.path.read_bytes() == raw  # written again: the same bytes


@pytest.mark.parametrize("raw", [
    b'\xef\xbb\xbf{"config": "C"}',  # a BOM
    b'{"config": "C", "config": "C"}',  # a duplicate key
    b'{"config": "C", "n": NaN}',
    b'{"config": "C", "n": -Infinity}',
    b'[{"config": "C"}]',
    b'{"config": "C\xff"}',  # not UTF-8
    b'{"config": "C"} {}',
    b'{"config": "C",}',
    b"",
], ids=["bom", "duplicate", "nan", "infinity", "array", "latin1", "trailing", "comma", "empty"])
def test_what_nvdocker2_never_writes_is_a_damaged_journal(tmp_path, raw):
    j = _journal(tmp_path)
    j.dir.mkdir(parents=True, mode=0o700)
    j.path.write_bytes(raw.replace(b'"C', json.dumps(str(j.config)).encode()[:-1]))
    with pytest.raises(EnvironmentProblem, match="damaged") as e:
        j.load()
    assert f"rm {j.path}" in e.value.hint


def test_a_value_too_deep_for_the_reader_is_refused_before_anything_is_written(tmp_path):
    j = _journal(tmp_path)
    deep: object = "x"
    for _ in range(codec.MAX_DEPTH):
        deep = [deep]
    rec = {"config": str(j.config), "runtimes": {"nvidia": {"previous": slot(deep)}}}
    with pytest.raises(BadInput, match="nested deeper than"):
        j.write(rec)
    assert not j.dir.exists()
    shallower = rec["runtimes"]["nvidia"]["previous"]["value"][0][0][0][0][0][0]
    rec["runtimes"]["nvidia"]["previous"]["value"] = shallower
    j.write(rec)
    assert j.load() == rec


def test_the_journal_reads_and_writes_without_the_docker_engine(tmp_path):
    code = ("import sys\nfrom pathlib import Path\nfrom nvdocker2.store.journal import Journal\n"
            f"j = Journal(Path({str(tmp_path)!r}), Path('/etc/x.toml'))\n"
            "j.write({'config': '/etc/x.toml', 'runtimes': {'n': {'installed': 1.25}}})\n"
            "assert j.load()['runtimes']['n']['installed'] == 1.25\n"
            "print(sorted(m for m in sys.modules if m.startswith('nvdocker2.engines')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
