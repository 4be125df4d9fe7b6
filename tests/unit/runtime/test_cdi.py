"""The runtime's CDI mode (docs/cdi.md, "The runtime's CDI mode"): CDI names resolved against
spec directories with CDI's precedence and applied to a bundle's config.json at `create`.
Specs are the ones `cdi generate` writes for the fake driver (tests/fixtures/fake_driver.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.fake_driver import build_fake_driver
from hypothesis import given, settings
from hypothesis import strategies as st
from .test_main import SPEC, Setup

from nvdocker2.device_ids import RequestError, parse_cdi_name
from nvdocker2.direct import discover
from nvdocker2.direct.cdi import cdi_spec, dump_yaml
from nvdocker2.runtime import cdi

RUNTIME = "/usr/bin/nvidia-container-runtime"
NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9_-]*"
                  r"=[a-zA-Z0-9][a-zA-Z0-9_.:-]*")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_fake_driver(tmp_path_factory.mktemp("cdi-driver"))


@pytest.fixture(scope="module")
def generated(driver):
    return cdi_spec(discover(str(driver.root)), runtime_path=RUNTIME, ldconfig="/sbin/ldconfig")


def write_spec(directory: Path, name: str, spec: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    path = directory / name
    path.write_text(json.dumps(spec) if name.endswith(".json") else dump_yaml(spec))
    os.chmod(path, 0o644)
    return path


def one_gpu_spec(node: str, kind: str = "nvidia.com/gpu", name: str = "0") -> dict:
    return {"cdiVersion": "0.5.0", "kind": kind, "devices": [
        {"name": name, "containerEdits": {"deviceNodes": [{"path": node}]}}]}


# -- the YAML reader -------------------------------------------------------------------

def test_the_reader_reads_back_what_cdi_generate_writes(generated):
    assert cdi.read_yaml(dump_yaml(generated)) == generated


def test_the_reader_reads_go_yaml_style_specs():
    text = ("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/nvidia0  # the GPU\n      major: 195\n"
            "  name: \"0\"\ncontainerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n"
            "  hooks:\n  - hookName: createContainer\n    path: /usr/bin/x\n"
            "    args:\n    - x\n    - 'it''s'\n")
    assert cdi.read_yaml(text) == {
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "major": 195}]},
                     "name": "0"}],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"], "hooks": [
            {"hookName": "createContainer", "path": "/usr/bin/x", "args": ["x", "it's"]}]}}


@pytest.mark.parametrize("text", ["a: &x 1\n", "a: !!str 1\n", "a: |\n  x\n", "a: [1, 2]\n",
                                  "a: 1\n a: 2\n", "a: 1\na: 2\n", "a: \"x\n", "- a\nb: 1\n"])
def test_the_reader_refuses_what_it_does_not_read(text):
    with pytest.raises(ValueError):
        cdi.read_yaml(text)


scalars = st.one_of(st.text(max_size=12), st.integers(-10**6, 10**6), st.booleans())
keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC-_", min_size=1, max_size=8)
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, documents, min_size=1, max_size=5))
def test_the_reader_reads_back_every_document_dump_yaml_writes(doc):
    assert cdi.read_yaml(dump_yaml(doc)) == doc


# -- names -----------------------------------------------------------------------------

@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=40), st.from_regex(NAME, fullmatch=True)))
def test_a_cdi_name_passes_exactly_when_it_follows_cdis_grammar(name):
    ok = NAME.fullmatch(name) is not None and len(name) <= 256
    try:
        assert parse_cdi_name(name, "X") == name and ok
    except RequestError as e:
        assert not ok and e.message.startswith("X: invalid CDI device name")


# -- precedence and conflicts ----------------------------------------------------------

def test_a_later_spec_dir_overrides_an_earlier_one_for_the_same_device(tmp_path):
    write_spec(tmp_path / "etc", "a.yaml", one_gpu_spec("/dev/from-etc"))
    write_spec(tmp_path / "run", "b.json", one_gpu_spec("/dev/from-run"))
    registry = cdi.Registry([str(tmp_path / "etc"), str(tmp_path / "run")], print)
    (_, device, path), = registry.resolve(["nvidia.com/gpu=0"], "X")
    assert device["containerEdits"]["deviceNodes"] == [{"path": "/dev/from-run"}]
    assert path == str(tmp_path / "run" / "b.json")
    registry = cdi.Registry([str(tmp_path / "run"), str(tmp_path / "etc")], print)
    assert registry.resolve(["nvidia.com/gpu=0"], "X")[0][2] == str(tmp_path / "etc" / "a.yaml")


def test_two_specs_in_one_dir_defining_a_device_are_a_conflict(tmp_path):
    write_spec(tmp_path / "etc", "a.yaml", one_gpu_spec("/dev/a"))
    write_spec(tmp_path / "etc", "b.yaml", one_gpu_spec("/dev/b"))
    write_spec(tmp_path / "etc", "c.yaml", one_gpu_spec("/dev/c", name="1"))
    # CDI drops a conflicting device even where a later directory defines it too.
    write_spec(tmp_path / "run", "d.yaml", one_gpu_spec("/dev/d"))
    registry = cdi.Registry([str(tmp_path / "etc"), str(tmp_path / "run")], print)
    assert registry.resolve(["nvidia.com/gpu=1"], "X")[0][2].endswith("c.yaml")
    with pytest.raises(cdi.CdiRefusal) as raised:
        registry.resolve(["nvidia.com/gpu=1", "nvidia.com/gpu=0"], "X")
    assert str(raised.value) == (
        f"CDI device 'nvidia.com/gpu=0' (X) is defined by two specs in one directory,"
        f" {tmp_path}/etc/a.yaml and {tmp_path}/etc/b.yaml: a conflict, so neither is used")


def test_files_other_than_json_and_yaml_and_missing_dirs_are_skipped(tmp_path):
    write_spec(tmp_path / "etc", "a.yml", one_gpu_spec("/dev/a"))
    registry = cdi.Registry([str(tmp_path / "none"), str(tmp_path / "etc")], print)
    assert registry.devices == {} and registry.ignored == []


def _spec_warnings(dirs):
    warnings = []
    return cdi.Registry(dirs, warnings.append), warnings


def test_a_spec_another_user_could_write_is_ignored_with_a_warning(tmp_path):
    spec_dir = tmp_path / "etc"
    good = write_spec(spec_dir, "a.yaml", one_gpu_spec("/dev/a", name="a"))
    loose = write_spec(spec_dir, "b.yaml", one_gpu_spec("/dev/b", name="b"))
    os.chmod(loose, 0o666)
    foreign = write_spec(spec_dir, "c.yaml", one_gpu_spec("/dev/c", name="c"))
    os.chown(foreign, 65534, 65534)
    outside = write_spec(tmp_path / "elsewhere", "d.yaml", one_gpu_spec("/dev/d", name="d"))
    os.symlink(outside, spec_dir / "d.yaml")
    write_spec(spec_dir, "e.yaml", {"kind": "nvidia.com/gpu", "devices": "x"})
    registry, warnings = _spec_warnings([str(spec_dir)])
    assert sorted(registry.devices) == ["nvidia.com/gpu=a"]
    assert registry.devices["nvidia.com/gpu=a"][2] == str(good)
    assert warnings == [
        f"CDI spec ignored: {loose} is writable by its group or others (mode 0666)",
        f"CDI spec ignored: {foreign} belongs to uid 65534",
        f"CDI spec ignored: {spec_dir}/d.yaml is a symlink",
        f"CDI spec ignored: {spec_dir}/e.yaml: 'devices' must be a list",
    ]


def test_a_spec_dir_another_user_can_write_is_ignored(tmp_path):
    write_spec(tmp_path / "etc", "a.yaml", one_gpu_spec("/dev/a"))
    os.chmod(tmp_path / "etc", 0o777)
    registry, warnings = _spec_warnings([str(tmp_path / "etc")])
    assert registry.devices == {}
    assert len(warnings) == 1 and warnings[0].startswith(f"CDI spec ignored: {tmp_path}/etc")


# -- the edits -------------------------------------------------------------------------

def test_edits_are_applied_with_cdis_semantics(tmp_path, driver, generated):
    write_spec(tmp_path / "etc", "nvidia.yaml", generated)
    registry = cdi.Registry([str(tmp_path / "etc")], print)
    oci = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1", "A=1"],
                       "user": {"uid": 1000, "gid": 1000}},
           "mounts": [{"destination": "/proc", "source": "proc", "type": "proc"}],
           "linux": {"devices": [{"path": "/dev/nvidia1", "type": "c", "major": 1, "minor": 3}]}}
    cdi.inject(oci, registry.resolve(["nvidia.com/gpu=1"], "X"))
    assert oci["process"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void", "A=1"]
    nodes = {d["path"]: d for d in oci["linux"]["devices"]}
    assert nodes["/dev/nvidia1"] == {"path": "/dev/nvidia1", "type": "c", "major": 195,
                                     "minor": 1, "uid": 1000, "gid": 1000}
    assert "/dev/nvidia0" not in nodes and "/dev/nvidiactl" in nodes
    allowed = oci["linux"]["resources"]["devices"]
    assert {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"} in allowed
    sources = [m["source"] for m in oci["mounts"]]
    assert sources[0] == "proc" and any(s.endswith(".so." + driver.version) for s in sources)
    depth = [len(m["destination"].strip("/").split("/")) for m in oci["mounts"]]
    assert depth == sorted(depth)
    assert oci["hooks"]["createContainer"][0]["path"] == RUNTIME


def test_a_node_without_major_minor_takes_them_from_the_host_node(tmp_path, driver):
    spec = one_gpu_spec("/dev/nvidia1")
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = str(
        driver.root / "dev/nvidia1")
    write_spec(tmp_path / "etc", "a.json", spec)
    oci = {"process": {"env": []}}
    cdi.inject(oci, cdi.Registry([str(tmp_path / "etc")], print).resolve(
        ["nvidia.com/gpu=0"], "X"))
    assert oci["linux"]["devices"] == [
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 0o666}]


# -- create ----------------------------------------------------------------------------

@pytest.fixture
def setup(tmp_path, generated):
    s = Setup(tmp_path, "python")
    s.spec_dir = tmp_path / "cdi"
    write_spec(s.spec_dir, "nvidia.yaml", generated)
    s.log = tmp_path / "runtime.log"
    return s


def cdi_config(setup, extra: str = "", mode: str = "cdi", cdi_keys: str = "") -> None:
    setup.write_config(f'{extra}\n[nvidia-container-runtime]\nmode = "{mode}"\n'
                       f'debug = "{setup.log}"\n[nvidia-container-runtime.modes.cdi]\n'
                       f'spec-dirs = ["{setup.root}/none", "{setup.spec_dir}"]\n{cdi_keys}')


def bundle_spec(setup, env=(), annotations=None, privileged=True) -> bytes:
    spec = {**SPEC, "process": {"args": ["sh"], "env": list(env)}}
    if privileged:
        spec["process"]["capabilities"] = {"bounding": ["CAP_SYS_ADMIN"]}
    if annotations:
        spec["annotations"] = annotations
    setup.spec_file.write_text(json.dumps(spec))
    return setup.spec_file.read_bytes()


def gpu_nodes(setup) -> list[str]:
    return sorted(d["path"] for d in setup.spec()["linux"]["devices"]
                  if re.fullmatch(r"/dev/nvidia\d+", d["path"]))


@pytest.mark.parametrize("mode", ["cdi", "auto"])
@pytest.mark.parametrize("how", ["env", "annotation"])
def test_create_gives_exactly_the_named_gpu(setup, mode, how):
    cdi_config(setup, mode=mode)
    if how == "env":
        bundle_spec(setup, env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    else:
        bundle_spec(setup, annotations={"cdi.k8s.io/x": "nvidia.com/gpu=1"})
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 0, proc.stderr
    assert setup.runc_argv() is not None
    assert gpu_nodes(setup) == ["/dev/nvidia1"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in setup.spec()["process"]["env"]
    assert not any(h.get("path") == "/bin/sh" for h in setup.spec()["hooks"].get("prestart", []))
    assert "cdi: nvidia.com/gpu=1 (" in setup.log.read_text()


def test_bare_ids_are_devices_of_default_kind_and_annotations_come_first(setup, generated):
    other = {**generated, "kind": "example.com/gpu"}
    write_spec(setup.spec_dir, "other.yaml", other)
    cdi_config(setup, cdi_keys='default-kind = "example.com/gpu"\n')
    bundle_spec(setup, env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
    assert gpu_nodes(setup) == ["/dev/nvidia0"]
    assert "cdi: example.com/gpu=0 (NVIDIA_VISIBLE_DEVICES)" in setup.log.read_text()
    bundle_spec(setup, env=["NVIDIA_VISIBLE_DEVICES=0"],
                annotations={"cdi.k8s.io/b": "nvidia.com/gpu=1", "other/a": "x=y"})
    assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
    assert gpu_nodes(setup) == ["/dev/nvidia1"]


@pytest.mark.parametrize("env, annotations, said", [
    (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7"], None,
     "unresolvable CDI device 'nvidia.com/gpu=7' (NVIDIA_VISIBLE_DEVICES): no CDI spec in"
     " {root}/none, {root}/cdi defines it"),
    ([], {"cdi.k8s.io/x": "nvidia.com/gpu=0,example.com/tpu=0"},
     "unresolvable CDI device 'example.com/tpu=0' (annotation 'cdi.k8s.io/x'): no CDI spec in"
     " {root}/none, {root}/cdi defines it"),
])
def test_an_unresolvable_name_is_refused_before_the_container_starts(setup, env, annotations,
                                                                     said):
    cdi_config(setup)
    before = bundle_spec(setup, env=env, annotations=annotations)
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    first, hint = proc.stderr.splitlines()
    assert first == "nvidia-container-runtime: error: " + said.format(root=setup.root)
    assert hint.startswith("nvidia-container-runtime: hint: write a spec with `nvdocker2 cdi")
    assert setup.runc_argv() is None
    assert setup.spec_file.read_bytes() == before


@pytest.mark.parametrize("value", ["nvidia.com/gpu=0;rm", "nvidia.com/gpu=--root=/x",
                                   "nvidia.com/g pu=0", "nvidia.com/gpu=../../x", "-1",
                                   "nvidia.com/gpu=\u0663", "nvidia.com/gpu="])
@pytest.mark.parametrize("where", ["env", "annotation"])
def test_hostile_names_are_refused(setup, value, where):
    cdi_config(setup)
    if where == "env":
        before = bundle_spec(setup, env=[f"NVIDIA_VISIBLE_DEVICES={value}"])
    else:
        before = bundle_spec(setup, annotations={"cdi.k8s.io/x": value})
    proc = setup.run("create", "--bundle", str(setup.bundle), "ctr")
    assert proc.returncode == 1
    assert proc.stderr.startswith("nvidia-container-runtime-hook: error: ")
    assert "invalid" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert setup.runc_argv() is None and setup.spec_file.read_bytes() == before


def test_an_unprivileged_env_request_is_ignored_when_config_toml_says_so(setup):
    cdi_config(setup, "accept-nvidia-visible-devices-envvar-when-unprivileged = false")
    before = bundle_spec(setup, env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"],
                         privileged=False)
    assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
    assert setup.spec_file.read_bytes() == before
    bundle_spec(setup, env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"], privileged=True)
    assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
    assert gpu_nodes(setup) == ["/dev/nvidia1"]


def test_volume_mount_requests_name_cdi_devices(setup):
    cdi_config(setup, "accept-nvidia-visible-devices-as-volume-mounts = true\n"
               "accept-nvidia-visible-devices-envvar-when-unprivileged = false")
    spec = {**SPEC, "process": {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            "mounts": [{"source": "/dev/null", "destination":
                        "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/1"}]}
    setup.spec_file.write_text(json.dumps(spec))
    assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
    assert gpu_nodes(setup) == ["/dev/nvidia1"]


def test_a_container_asking_for_no_device_is_left_alone(setup):
    os.chmod(setup.spec_dir, 0o777)  # never read: no warning either
    cdi_config(setup)
    for env in ([], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES=none"]):
        before = bundle_spec(setup, env=env)
        assert setup.run("create", "--bundle", str(setup.bundle), "c").returncode == 0
        assert setup.spec_file.read_bytes() == before
    assert "CDI spec ignored" not in setup.log.read_text()


def test_a_container_asking_for_no_cdi_device_imports_nothing_new(setup):
    """cdi mode imports its own module and nothing else more than legacy mode does for a
    container that asks for no device; other modes do not import it at all."""
    bundle_spec(setup, env=[])
    seen = {}
    for mode in ("legacy", "auto", "cdi"):
        cdi_config(setup, mode=mode)
        proc = subprocess.run(
            [sys.executable, "-I", "-X", "importtime", "-c",
             "import sys; sys.path.insert(0, sys.argv[1]); from nvdocker2.runtime import main;"
             " sys.exit(main(sys.argv[2:], '/nonexistent'))",
             str(Path(cdi.__file__).parent.parent.parent), "create", "--bundle",
             str(setup.bundle), "c"],
            env={"PATH": f"{setup.low}:/usr/bin:/bin",
                 "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(setup.config)},
            capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        seen[mode] = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                      if line.startswith("import time:")}
    assert "nvdocker2.runtime.cdi" not in seen["legacy"] | seen["auto"]
    assert seen["cdi"] - seen["legacy"] == {"nvdocker2.runtime.cdi"}


@pytest.mark.parametrize("keys, said", [
    ('spec-dirs = ["etc/cdi"]', "key 'nvidia-container-runtime.modes.cdi.spec-dirs' must list"
     " absolute paths"),
    ('default-kind = "gpu"', "key 'nvidia-container-runtime.modes.cdi.default-kind' must be a"
     " CDI kind"),
    ('annotation-prefixes = [""]', "key 'nvidia-container-runtime.modes.cdi."
     "annotation-prefixes' may not hold an empty prefix"),
])
def test_cdi_keys_that_cannot_be_honoured_are_refused_naming_the_key(keys, said):
    from nvdocker2.toolkit_config import ConfigError, parse

    with pytest.raises(ConfigError) as raised:
        parse(f"[nvidia-container-runtime.modes.cdi]\n{keys}\n".encode(), path="/c.toml")
    assert str(raised.value).startswith("/c.toml: " + said)
    assert parse(b"").cdi.spec_dirs == ("/etc/cdi", "/var/run/cdi")
