"""`cdi generate`: a CDI spec from the fake driver tree, checked against the CDI schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR

from nvdocker2.direct import DirectError, discover
from nvdocker2.direct.cdi import cdi_spec, dump_yaml, render

SCHEMA = json.loads((Path(__file__).parents[2] / "fixtures/cdi_schema.json").read_text())
RUNTIME = "/usr/bin/nvidia-container-runtime"


def read_block_yaml(text):
    """Reader for the YAML subset the generator writes (block maps and lists, JSON scalars).

    Kept independent of the writer: it only knows YAML's indentation rules.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    pos = 0

    def scalar(s):
        return json.loads(s)

    def block(indent):
        nonlocal pos
        if lines[pos][indent:].startswith("- "):
            out = []
            while pos < len(lines) and lines[pos].startswith(" " * indent + "- "):
                rest = lines[pos][indent + 2:]
                if ":" in rest and not rest.startswith('"'):
                    lines[pos] = " " * (indent + 2) + rest
                    out.append(block(indent + 2))
                else:
                    out.append(scalar(rest))
                    pos += 1
            return out
        out = {}
        while pos < len(lines) and len(lines[pos]) - len(lines[pos].lstrip()) == indent \
                and not lines[pos][indent:].startswith("- "):
            key, _, rest = lines[pos][indent:].partition(":")
            pos += 1
            out[key] = scalar(rest.strip()) if rest.strip() else block(
                len(lines[pos]) - len(lines[pos].lstrip()))
        return out

    return block(0)


def test_cdi_spec_validates_and_names_gpus_by_index_uuid_and_all(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    jsonschema.validate(spec, SCHEMA)
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", driver.gpus[0].uuid, "1", driver.gpus[1].uuid, "all"]
    assert spec["devices"][2]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": f"{driver.root}/dev/nvidia1", "type": "c",
         "major": 195, "minor": 1}
    ]
    common = spec["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    assert {"hostPath": f"{driver.root}{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}",
            "containerPath": f"{LIB64_DIR}/libcuda.so.{DRIVER_VERSION}",
            "options": ["nosuid", "nodev", "bind", "ro"]} in common["mounts"]
    hook = common["hooks"][0]
    assert (hook["hookName"], hook["path"], hook["args"][1:3]) == (
        "createContainer", RUNTIME, ["direct-hook", "update-ldcache"])


def test_cdi_for_the_real_root_has_no_host_paths_on_nodes(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    # Same discovery seen as driver root "/": nodes need no hostPath.
    d = discover(str(driver.root)).replace(driver_root="/")
    root_spec = cdi_spec(d, runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    jsonschema.validate(root_spec, SCHEMA)
    assert "hostPath" not in root_spec["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert "hostPath" in spec["devices"][0]["containerEdits"]["deviceNodes"][0]


def test_schema_fixture_rejects_what_cdi_rejects(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    for broken in (
        {**spec, "devices": [{"name": "bad name", "containerEdits": {}}]},
        {**spec, "kind": "gpu"},
        {**spec, "containerEdits": {"mounts": [{"containerPath": "/x"}]}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


def test_yaml_and_json_outputs_hold_the_same_spec(driver):
    spec = cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
    yaml_text = render(spec, "/etc/cdi/nvidia.yaml")
    assert yaml_text.startswith(
        'cdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ndevices:\n  - name: "0"\n')
    assert read_block_yaml(yaml_text) == spec
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        assert yaml.safe_load(yaml_text) == spec
    assert json.loads(render(spec, "nvidia.json")) == spec


def test_yaml_quotes_every_string():
    assert dump_yaml({"a": ["no", "0:1", "*x"], "b": {}, "c": 3, "d": True}) == (
        'a:\n  - "no"\n  - "0:1"\n  - "*x"\nb: {}\nc: 3\nd: true\n')


def test_cdi_generate_fails_like_create_without_a_driver(tmp_path):
    with pytest.raises(DirectError, match="no NVIDIA driver found"):
        cdi_spec(discover(str(tmp_path)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")
