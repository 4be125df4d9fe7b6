"""`nvdocker2 cdi validate` and the cdiVersion `cdi generate` declares.

Every spec this project writes (`cdi generate` for each fake driver layout, YAML and JSON, with
and without a driver root; CDI mode's spec with its header) is accepted by the CDI library of
each reader; hostile specs are refused by exactly the readers whose library refuses them
(facts from tags.cncf.io/container-device-interface 0.5.2, 0.6.2, 0.7.1, 0.8.0, 1.0.1), each
with one `error:` line, one `hint:` line and exit 2.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
from .cli_run import cli
from fixtures.fake_driver import build_fake_driver

from nvdocker2.cdi_validate import READERS
from nvdocker2.cli.cdi import _READERS
from nvdocker2.direct import discover
from nvdocker2.direct.cdi import cdi_spec, render
from nvdocker2.direct.cdi_versions import minimum_version

ALL = ["podman-4.3", "docker-25", "docker-26.1", "docker-28.0", "docker-28.1"]
RUNTIME = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def spec(tmp_path):
    driver = build_fake_driver(tmp_path / "driver")
    return cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")


def verdicts(path) -> dict[str, bool]:
    code, out, err = cli("cdi", "validate", str(path), "--json")
    report = json.loads(out)
    assert code == (0 if report["ok"] else 2), err
    return {name: r["ok"] for name, r in report["readers"].items()}


def refused_by(path) -> list[str]:
    return [name for name, ok in verdicts(path).items() if not ok]


def one_error(path, *args: str) -> tuple[int, str]:
    code, out, err = cli("cdi", "validate", str(path), *args)
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    assert out == ""
    return code, lines[0]


def test_the_cli_lists_the_readers_the_checker_knows():
    assert list(_READERS) == list(READERS) == ALL


# --- every spec the project writes ------------------------------------------------------------


@pytest.mark.parametrize("layout", ["standard", "debian"])
@pytest.mark.parametrize("name", ["nvidia.yaml", "nvidia.json"])
def test_cdi_generate_writes_0_5_0_that_every_reader_accepts(tmp_path, layout, name, monkeypatch):
    monkeypatch.setenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", str(tmp_path / "none.toml"))
    driver = build_fake_driver(tmp_path / "driver", layout=layout)
    out = tmp_path / name
    code, _, err = cli("cdi", "generate", "--output", str(out), "--driver-root",
                       str(driver.root), "--runtime-path", RUNTIME)
    assert code == 0, err
    text = out.read_text()
    assert ('"cdiVersion": "0.5.0"' in text) or ('cdiVersion: "0.5.0"' in text)
    code, stdout, err = cli("cdi", "validate", str(out))
    assert code == 0, err
    assert stdout.startswith(f"ok: {out}: cdiVersion 0.5.0, 5 device(s) of nvidia.com/gpu; "
                             "accepted by podman-4.3 (CDI 0.5.2), docker-25 (CDI 0.6.2)")
    assert verdicts(out) == dict.fromkeys(ALL, True)


def test_a_spec_for_the_real_root_has_no_host_paths_and_is_accepted_too(spec, tmp_path):
    for e in [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]:
        for node in e["deviceNodes"]:
            node.pop("hostPath", None)
    assert minimum_version(spec) == "0.5.0"  # device names "0", "1" need it still
    path = tmp_path / "root.yaml"
    path.write_text(render(spec, str(path)))
    assert refused_by(path) == []


def test_cdi_modes_spec_with_its_header_is_accepted(tmp_path, monkeypatch):
    from nvdocker2.engines.docker.cdi import build_spec

    monkeypatch.setenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", str(tmp_path / "none.toml"))
    driver = build_fake_driver(tmp_path / "driver")
    made = build_spec(tmp_path / "nvidia.yaml", RUNTIME, str(driver.root))
    assert made.data.startswith(b"# Written by nvdocker2")
    (tmp_path / "nvidia.yaml").write_bytes(made.data)
    assert refused_by(tmp_path / "nvidia.yaml") == []


def test_generate_declares_what_a_newer_field_needs(spec):
    spec["containerEdits"]["additionalGids"] = [44]
    assert minimum_version(spec, "0.5.0") == "0.7.0"
    del spec["containerEdits"]["additionalGids"]
    assert minimum_version(spec, "0.5.0") == "0.5.0"


# --- hostile specs: which readers refuse, and why ---------------------------------------------


def _mutate(spec, how):
    s = copy.deepcopy(spec)
    how(s)
    return s


def _set(path, value):
    def go(s):
        *head, last = path
        node = s
        for p in head:
            node = node[p]
        node[last] = value
    return go


HOSTILE = [
    # (id, mutation, refused by, words of podman's or the first refusing reader's error)
    ("annotations-at-0.5.0", _set(["devices", 0, "annotations"], {"a": "b"}), ALL,
     "devices[0].annotations: unknown field (added in CDI spec 0.6.0, which CDI 0.5.2 "
     "predates)"),
    ("additionalGids-at-0.7.0", lambda s: (_set(["containerEdits", "additionalGids"], [44])(s),
                                           _set(["cdiVersion"], "0.7.0")(s)),
     ["podman-4.3", "docker-25"], "containerEdits.additionalGids: unknown field (added in CDI "
     "spec 0.7.0, which CDI 0.5.2 predates); also by docker-25"),
    ("additionalGids-at-0.5.0", _set(["containerEdits", "additionalGids"], [44]), ALL,
     "containerEdits.additionalGids: unknown field (added in CDI spec 0.7.0"),
    ("unknown-field", _set(["devices", 1, "containerEdits", "deviceNodes", 0, "owner"], "x"),
     ALL, "devices[0].containerEdits.deviceNodes[0].owner: unknown field (not a field of the "
     "CDI spec)"),
    ("version-unknown", _set(["cdiVersion"], "0.9.0"), ALL, "'0.9.0' is not a version"),
    ("version-with-v", _set(["cdiVersion"], "v0.5.0"), ["podman-4.3"],
     "'v0.5.0' is not a version CDI 0.5.2 knows"),
    ("version-too-low", _set(["cdiVersion"], "0.4.0"),
     ["docker-25", "docker-26.1", "docker-28.0", "docker-28.1"],
     "cdiVersion: 0.4.0 is too low: a device name starting with a digit needs 0.5.0"),
    ("kind-without-vendor", _set(["kind"], "gpu"), ALL, "kind: empty vendor"),
    ("kind-one-letter-vendor", _set(["kind"], "n/gpu"), ALL,
     "vendor 'n' has one character, which makes the CDI library crash"),
    ("class-with-dot-at-0.5.0", _set(["kind"], "nvidia.com/g.pu"), ALL,
     "class 'g.pu' holds '.'"),
    ("class-with-dot-at-0.6.0", lambda s: (_set(["kind"], "nvidia.com/g.pu")(s),
                                           _set(["cdiVersion"], "0.6.0")(s)),
     ["podman-4.3"], "'0.6.0' is not a version CDI 0.5.2 knows"),
    ("device-name-space", _set(["devices", 0, "name"], "gpu 0"), ALL,
     "devices[0].name: device name 'gpu 0' holds ' '"),
    ("device-name-dash-first", _set(["devices", 0, "name"], "-0"), ALL,
     "must start with a letter or digit"),
    ("device-name-twice", _set(["devices", 1, "name"], "0"), ALL,
     "devices[1].name: device '0' is also devices[0]"),
    ("device-without-edits", _set(["devices", 0, "containerEdits"], {}), ALL,
     "devices[0].containerEdits: a device needs at least one edit"),
    ("node-type", _set(["devices", 0, "containerEdits", "deviceNodes", 0, "type"], "x"), ALL,
     "'x' is not a device type"),
    ("node-permissions", _set(["containerEdits", "deviceNodes", 0, "permissions"], "rwx"), ALL,
     "containerEdits.deviceNodes[0].permissions: 'rwx' holds 'x'"),
    ("node-major-string", _set(["containerEdits", "deviceNodes", 0, "major"], "195"), ALL,
     "a string where an integer (int64) belongs"),
    ("node-major-huge", _set(["containerEdits", "deviceNodes", 0, "major"], 2**64), ALL,
     "does not fit in int64"),
    ("node-empty-path", _set(["containerEdits", "deviceNodes", 0, "path"], ""), ALL,
     "empty device path"),
    ("hook-name", _set(["containerEdits", "hooks", 0, "hookName"], "preStart"), ALL,
     "'preStart' is not a hook name"),
    ("hook-path", _set(["containerEdits", "hooks", 0, "path"], ""), ALL, "empty hook path"),
    ("hook-env", _set(["containerEdits", "hooks", 0, "env"], ["=x"]), ALL,
     "containerEdits.hooks[0].env[0]: '=x' is not NAME=VALUE"),
    ("env-without-equals", _set(["containerEdits", "env"], ["NVIDIA"]), ALL,
     "'NVIDIA' is not NAME=VALUE"),
    ("mount-container-path", _set(["containerEdits", "mounts", 0, "containerPath"], ""), ALL,
     "containerEdits.mounts[0].containerPath: empty mount path"),
    ("mounts-not-a-list", _set(["containerEdits", "mounts"], {"a": 1}), ALL,
     "containerEdits.mounts: an object where a list belongs"),
    ("no-devices", _set(["devices"], []), ["docker-28.1"], "a spec needs at least one device"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_spec_is_refused_by_exactly_the_readers_whose_library_refuses_it(
    spec, tmp_path, case
):
    _, how, readers, words = case
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(_mutate(spec, how)))
    assert refused_by(path) == readers
    code, line = one_error(path)
    assert code == 2
    assert words in line, line
    for name in ALL:
        code, out, _ = cli("cdi", "validate", str(path), "--for", name)
        assert code == (2 if name in readers else 0), name


RAW = [
    ("duplicate-key", b'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\nkind: evil.com/gpu\n'
     b"devices: []\n", "line 3: key 'kind' is given twice"),
    ("not-yaml", b"{cdiVersion: [\n", "not YAML or JSON"),
    ("not-utf8", b'cdiVersion: "0.5.0"\nkind: "\xff"\n', "not UTF-8 text"),
    ("empty", b"", "the file holds no spec (empty or null)"),
    ("a-list", b"- 1\n", "a list where an object belongs"),
]


@pytest.mark.parametrize("case", RAW, ids=[c[0] for c in RAW])
def test_a_file_no_reader_can_parse_is_one_line_exit_2(tmp_path, case):
    _, data, words = case
    path = tmp_path / "spec.yaml"
    path.write_bytes(data)
    code, line = one_error(path)
    assert code == 2
    assert words in line, line
    assert refused_by(path) == ALL


def test_yaml_scalars_in_string_fields_and_field_names_in_another_case_are_read(spec, tmp_path):
    """The library reads YAML into JSON for Go: a number becomes the string a field wants, and
    Go matches field names without case. Readers accept these; so does validate."""
    data = json.loads(json.dumps(spec).replace('"kind"', '"KIND"'))
    data["containerEdits"]["mounts"][0]["options"].append(1)
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    assert refused_by(path) == []


def test_a_file_readers_skip_by_its_name_is_refused(spec, tmp_path):
    path = tmp_path / "nvidia.yml"
    path.write_text(render(spec, "x.yaml"))
    code, line = one_error(path)
    assert code == 2
    assert "readers load only files ending in .json or .yaml" in line


def test_a_spec_other_users_cannot_read_gets_a_warning_for_rootless_podman(spec, tmp_path):
    path = tmp_path / "nvidia.yaml"
    path.write_text(render(spec, str(path)))
    os.chmod(path, 0o600)
    code, out, err = cli("cdi", "validate", str(path))
    assert code == 0
    assert err == (f"warning: {path} is not readable by other users (mode 0600): rootless "
                   "Podman cannot read it; chmod 0644 it\n")


@pytest.mark.parametrize("args, words", [
    (["/nonexistent/nvidia.yaml"], "error: /nonexistent/nvidia.yaml: no such file"),
    (["/"], "error: /: a directory, not a spec file"),
    (["/etc/hostname", "--for", "podman-5"], "error: --for podman-5: not a reader"),
])
def test_bad_arguments_are_one_line_exit_2(args, words):
    code, out, err = cli("cdi", "validate", *args)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(words) and lines[1].startswith("hint: "), err
