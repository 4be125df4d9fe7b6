"""The decisions of the runtime's CDI mode (nvdocker2.runtime.cdi), function by function: what a
container asks for, which spec files are trusted and which one defines a device, and the exact
OCI edits a device brings. Real spec files and device nodes under tmp_path; the process-level
tests are in test_cdi.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from nvdocker2.device_ids import RequestError
from nvdocker2.runtime import cdi
from nvdocker2.toolkit_config import parse

CONFIG = parse(b"")


def env_spec(*env: str, **more) -> dict:
    return {"process": {"env": list(env)}, **more}


def spec_file(directory: Path, name: str, doc, mode: int = 0o644) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    path = directory / name
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    os.chmod(path, mode)
    return path


def gpu(name: str = "0", kind: str = "nvidia.com/gpu", node: str = "/dev/x", **top) -> dict:
    return {"cdiVersion": "0.5.0", "kind": kind, **top, "devices": [
        {"name": name, "containerEdits": {"env": [f"DEV={node}"]}}]}


def registry(*dirs: Path) -> tuple[cdi.Registry, list[str]]:
    warnings: list[str] = []
    return cdi.Registry([str(d) for d in dirs], warnings.append), warnings


# --- what the container asks for ---------------------------------------------------------

def test_annotations_under_the_prefixes_are_read_in_key_order_and_win():
    spec = env_spec("NVIDIA_VISIBLE_DEVICES=0", annotations={
        "cdi.k8s.io/b": " nvidia.com/gpu=1 ,, nvidia.com/gpu=0",
        "cdi.k8s.io/a": "nvidia.com/gpu=0",
        "other.io/x": "not a name",
    })
    assert cdi.requested(spec, CONFIG) == (
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1"], "annotation 'cdi.k8s.io/a', annotation"
        " 'cdi.k8s.io/b'")


def test_an_annotation_that_is_no_string_is_refused():
    spec = env_spec(annotations={"cdi.k8s.io/a": ["nvidia.com/gpu=0"]})
    with pytest.raises(RequestError) as e:
        cdi.requested(spec, CONFIG)
    assert e.value.message == "annotation 'cdi.k8s.io/a': must be a string of CDI device names"


def test_an_invalid_annotation_name_is_refused_naming_the_annotation():
    spec = env_spec(annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0;x"})
    with pytest.raises(RequestError) as e:
        cdi.requested(spec, CONFIG)
    assert e.value.message.startswith(
        "annotation 'cdi.k8s.io/a': invalid CDI device name 'nvidia.com/gpu=0;x'")


@pytest.mark.parametrize("env, names", [
    ((), []),
    (("NVIDIA_VISIBLE_DEVICES=none",), []),
    (("NVIDIA_VISIBLE_DEVICES=0,void",), []),
    (("NVIDIA_VISIBLE_DEVICES=0, all,0",), ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]),
    (("NVIDIA_VISIBLE_DEVICES=GPU-4a2b,example.com/tpu=a",),
     ["nvidia.com/gpu=GPU-4a2b", "example.com/tpu=a"]),
])
def test_the_visible_devices_name_cdi_devices(env, names):
    assert cdi.requested(env_spec(*env), CONFIG) == (names, "NVIDIA_VISIBLE_DEVICES")


def test_bare_ids_take_the_configured_default_kind():
    config = parse(b'[nvidia-container-runtime.modes.cdi]\ndefault-kind = "example.com/gpu"\n')
    assert cdi.requested(env_spec("NVIDIA_VISIBLE_DEVICES=1"), config)[0] == [
        "example.com/gpu=1"]


@pytest.mark.parametrize("value, message", [
    ("-1", "NVIDIA_VISIBLE_DEVICES: invalid device id '-1'"),
    ("cdi/nvidia.com/gpu", "NVIDIA_VISIBLE_DEVICES: invalid CDI device name"),
    ("nvidia.com/gpu", "NVIDIA_VISIBLE_DEVICES: invalid CDI device name"),
    ("a=b", "NVIDIA_VISIBLE_DEVICES: invalid CDI device name"),
])
def test_a_bad_visible_device_is_refused(value, message):
    with pytest.raises(RequestError) as e:
        cdi.requested(env_spec(f"NVIDIA_VISIBLE_DEVICES={value}"), CONFIG)
    assert e.value.message.startswith(message)


def test_a_volume_mount_names_vendor_class_and_name():
    config = parse(b"accept-nvidia-visible-devices-as-volume-mounts = true\n"
                   b"accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    spec = env_spec("NVIDIA_VISIBLE_DEVICES=all", mounts=[
        {"source": "/dev/null", "destination":
         "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/1"},
        {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/2"}])
    assert cdi.requested(spec, config)[0] == ["nvidia.com/gpu=1", "nvidia.com/gpu=2"]


def test_at_most_1024_distinct_cdi_devices():
    names = [f"nvidia.com/gpu={n}" for n in range(1024)]
    spec = env_spec(annotations={"cdi.k8s.io/a": ",".join(names + names[:3])})
    assert cdi.requested(spec, CONFIG)[0] == names
    spec = env_spec(annotations={"cdi.k8s.io/a": ",".join(names + ["nvidia.com/gpu=x"])})
    with pytest.raises(RequestError) as e:
        cdi.requested(spec, CONFIG)
    assert e.value.message == "annotation 'cdi.k8s.io/a': too many CDI devices (at most 1024)"


# --- which spec files are read and trusted -----------------------------------------------

def test_trusted_specs_of_both_suffixes_are_read_in_name_order(tmp_path):
    d = tmp_path / "etc"
    spec_file(d, "b.yaml", b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: b\n"
              b"  containerEdits: {}\n")
    spec_file(d, "a.json", gpu("a"), mode=0o755)
    spec_file(d, "c.yml", gpu("c"))
    spec_file(d, "d.json.bak", gpu("d"))
    reg, warnings = registry(tmp_path / "missing", tmp_path / "etc" / "a.json", d)
    assert warnings == [] and reg.ignored == []
    assert list(reg.devices) == ["nvidia.com/gpu=a", "nvidia.com/gpu=b"]
    assert reg.resolve(["nvidia.com/gpu=b", "nvidia.com/gpu=a"], "X") == [
        reg.devices["nvidia.com/gpu=b"][:3], reg.devices["nvidia.com/gpu=a"][:3]]
    assert reg.devices["nvidia.com/gpu=a"][2:] == (str(d / "a.json"), 2)


@pytest.mark.parametrize("mode, said", [
    (0o664, "is writable by its group or others (mode 0664)"),
    (0o646, "is writable by its group or others (mode 0646)"),
    (0o667, "is writable by its group or others (mode 0667)"),
])
def test_a_spec_others_may_write_is_ignored(tmp_path, mode, said):
    path = spec_file(tmp_path, "a.json", gpu(), mode=mode)
    reg, warnings = registry(tmp_path)
    assert reg.devices == {} and warnings == [f"CDI spec ignored: {path} {said}"]
    assert reg.ignored == [f"{path} {said}"]


def test_a_spec_of_another_user_is_ignored(tmp_path):
    path = spec_file(tmp_path, "a.json", gpu())
    os.chown(path, 65534, 0)
    reg, warnings = registry(tmp_path)
    assert reg.devices == {} and warnings == [f"CDI spec ignored: {path} belongs to uid 65534"]


def test_a_spec_dir_that_cannot_be_opened_is_ignored_with_its_reason(tmp_path):
    loose = tmp_path / "loose"
    spec_file(loose, "a.json", gpu())
    os.chmod(loose, 0o777)
    long = tmp_path / ("x" * 300)
    reg, warnings = registry(loose, long)
    assert reg.devices == {}
    assert warnings[0].startswith(f"CDI spec ignored: {loose}: ")
    assert warnings[0].endswith("(only a directory no other user can write is read)")
    assert warnings[1:] == [f"CDI spec ignored: {long}: File name too long"]


def test_entries_that_are_no_regular_file_are_ignored(tmp_path):
    (tmp_path / "dir.json").mkdir()
    os.symlink("/etc/passwd", tmp_path / "link.yaml")
    reg, warnings = registry(tmp_path)
    assert warnings == [f"CDI spec ignored: {tmp_path}/dir.json is not a regular file",
                        f"CDI spec ignored: {tmp_path}/link.yaml is a symlink"]


def test_a_spec_removed_while_the_directory_is_read_is_skipped(tmp_path, monkeypatch):
    spec_file(tmp_path, "b.json", gpu("b"))
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda fd: ["a.json"] + listdir(fd))
    reg, warnings = registry(tmp_path)
    assert list(reg.devices) == ["nvidia.com/gpu=b"] and warnings == []


def test_a_spec_of_4_mib_is_read_and_a_larger_one_ignored(tmp_path):
    body = json.dumps(gpu()).encode()
    path = spec_file(tmp_path, "a.json", body + b" " * (4 * 1024 * 1024 - len(body)))
    assert list(registry(tmp_path)[0].devices) == ["nvidia.com/gpu=0"]
    spec_file(tmp_path, "a.json", body + b" " * (4 * 1024 * 1024 + 1 - len(body)))
    assert registry(tmp_path)[1] == [
        f"CDI spec ignored: {path} is larger than 4194304 bytes"]


LONG = "n" * 250


@pytest.mark.parametrize("doc, said", [
    ([1], "not a CDI spec (a mapping with cdiVersion, kind and devices)"),
    ({"kind": 5, "devices": []}, "kind 5 is not vendor/class"),
    ({"kind": "gpu", "devices": []}, "kind 'gpu' is not vendor/class"),
    ({"kind": "a.b/c", "devices": {}}, "'devices' must be a list"),
    ({"kind": "a.b/c"}, "'devices' must be a list"),
    ({"kind": "a.b/c", "devices": ["x"]}, "device name None is not a CDI device name"),
    ({"kind": "a.b/c", "devices": [{"name": 3}]}, "device name 3 is not a CDI device name"),
    ({"kind": "a.b/c", "devices": [{"name": "-x", "containerEdits": {}}]},
     "device name '-x' is not a CDI device name"),
    ({"kind": "a.b/c", "devices": [{"name": "x" * 257, "containerEdits": {}}]},
     f"device name {'x' * 257!r:.60} is not a CDI device name"),
    ({"kind": "a.b/c", "devices": [{"name": "x"}]}, "device 'x': 'containerEdits' must be a"
     " mapping"),
    ({"kind": "a.b/c", "devices": [{"name": LONG, "containerEdits": []}]},
     f"device {LONG!r}: 'containerEdits' must be a mapping"[:200]),
    ({"kind": "a.b/c", "devices": [], "containerEdits": []}, "'containerEdits' must be a mapping"),
    (b"\xff{}", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
])
def test_a_spec_of_the_wrong_shape_is_ignored_naming_why(tmp_path, doc, said):
    path = spec_file(tmp_path, "a.json", doc)
    reg, warnings = registry(tmp_path)
    assert reg.devices == {} and warnings == [f"CDI spec ignored: {path}: {said}"]


def test_a_spec_nested_too_deep_is_ignored(tmp_path):
    path = spec_file(tmp_path, "a.json", b"[" * 100000 + b"]" * 100000)
    reg, warnings = registry(tmp_path)
    assert reg.devices == {} and len(warnings) == 1
    assert warnings[0].startswith(f"CDI spec ignored: {path}: ")


def test_a_device_at_most_256_characters_is_defined(tmp_path):
    spec_file(tmp_path, "a.json", gpu("x" * 256))
    assert list(registry(tmp_path)[0].devices) == ["nvidia.com/gpu=" + "x" * 256]


# --- precedence and the refusals ---------------------------------------------------------

def test_a_later_dir_wins_and_a_conflict_in_one_dir_is_no_ones(tmp_path):
    spec_file(tmp_path / "etc", "a.json", gpu("0", node="/dev/etc"))
    spec_file(tmp_path / "etc", "b.json", gpu("1", node="/dev/etc-1"))
    spec_file(tmp_path / "run", "a.json", gpu("0", node="/dev/run"))
    spec_file(tmp_path / "run", "b.json", gpu("1", node="/dev/run-b"))
    spec_file(tmp_path / "run", "c.json", gpu("1", node="/dev/run-c"))
    reg, _ = registry(tmp_path / "etc", tmp_path / "run")
    (_, device, path), = reg.resolve(["nvidia.com/gpu=0"], "X")
    assert device["containerEdits"]["env"] == ["DEV=/dev/run"]
    assert path == str(tmp_path / "run" / "a.json")
    assert reg.conflicts == {"nvidia.com/gpu=1": (str(tmp_path / "run/b.json"),
                                                  str(tmp_path / "run/c.json"))}
    with pytest.raises(cdi.CdiRefusal) as e:
        reg.resolve(["nvidia.com/gpu=0", "nvidia.com/gpu=1"], "annotation 'x'")
    assert (e.value.message, e.value.hint) == (
        f"CDI device 'nvidia.com/gpu=1' (annotation 'x') is defined by two specs in one"
        f" directory, {tmp_path}/run/b.json and {tmp_path}/run/c.json: a conflict, so neither"
        " is used", "remove one of the two specs (or the device from one of them)")


def test_an_unresolvable_device_names_the_dirs_and_the_first_ignored_spec(tmp_path):
    spec_file(tmp_path / "a", "x.json", gpu("0"))
    reg, _ = registry(tmp_path / "a", tmp_path / "b")
    hint = ("write a spec with `nvdocker2 cdi generate --output DIR/nvidia.yaml` into one of"
            " these directories, or ask for a device a spec there defines")
    with pytest.raises(cdi.CdiRefusal) as e:
        reg.resolve(["nvidia.com/gpu=0", "nvidia.com/gpu=1"], "NVIDIA_VISIBLE_DEVICES")
    assert (str(e.value), e.value.hint) == (
        f"unresolvable CDI device 'nvidia.com/gpu=1' (NVIDIA_VISIBLE_DEVICES): no CDI spec in"
        f" {tmp_path}/a, {tmp_path}/b defines it", hint)
    spec_file(tmp_path / "b", "y.json", gpu("1"), mode=0o666)
    spec_file(tmp_path / "b", "z.json", gpu("2"), mode=0o666)
    reg, _ = registry(tmp_path / "a", tmp_path / "b")
    with pytest.raises(cdi.CdiRefusal) as e:
        reg.resolve(["nvidia.com/gpu=1"], "X")
    assert e.value.hint == (hint + f"; 2 spec(s) were ignored, the first: {tmp_path}/b/y.json"
                            " is writable by its group or others (mode 0666)")


# --- the edits ---------------------------------------------------------------------------

def edits_of(oci: dict, *resolved) -> dict:
    cdi.inject(oci, list(resolved))
    return oci


def test_spec_edits_come_once_before_its_first_device_then_each_device(tmp_path):
    spec = {"kind": "a.b/c", "containerEdits": {"env": ["S=1", "D=spec"]}}
    other = {"kind": "a.b/c", "containerEdits": {}}
    d1 = {"name": "1", "containerEdits": {"env": ["D=1"], "additionalGids": [0, 44, 44]}}
    d2 = {"name": "2", "containerEdits": {"env": ["D=2", "E=2"], "additionalGids": [45, 44]}}
    d3 = {"name": "3", "containerEdits": {"env": ["F=3"]}}
    oci = edits_of({"process": {"env": ["D=old", 5, "DX=1"]}},
                   (spec, d1, "/s"), (spec, d2, "/s"), (other, d3, "/o"))
    assert oci["process"] == {"env": ["D=2", 5, "DX=1", "S=1", "E=2", "F=3"],
                              "user": {"uid": 0, "gid": 0, "additionalGids": [44, 45]}}
    oci = edits_of({"process": {"user": {"uid": 5, "gid": 6, "additionalGids": [45]}}},
                   (spec, d2, "/s"))
    assert oci["process"]["user"] == {"uid": 5, "gid": 6, "additionalGids": [45, 44]}
    assert edits_of({}, (other, d3, "/o")) == {"process": {"env": ["F=3"]}, "mounts": []}


def test_mounts_replace_their_destination_and_are_ordered_parents_first():
    edit = {"mounts": [
        {"hostPath": "/h/lib", "containerPath": "/usr/lib/x/y", "type": "bind",
         "options": ["ro", "nosuid"]},
        {"hostPath": "/h/a", "containerPath": "/a", "options": []},
        {"hostPath": "/h/b", "containerPath": "/usr/b"},
    ]}
    oci = edits_of({"mounts": [{"destination": "/usr/lib/x/y", "source": "old"},
                               {"destination": "/proc/x/y", "source": "p"}, "odd",
                               {"destination": "/b/c", "source": "q"}]},
                   ({"kind": "a.b/c"}, {"name": "0", "containerEdits": edit}, "/s"))
    assert oci["mounts"] == [
        "odd",
        {"destination": "/a", "source": "/h/a"},
        {"destination": "/b/c", "source": "q"},
        {"destination": "/usr/b", "source": "/h/b"},
        {"destination": "/proc/x/y", "source": "p"},
        {"destination": "/usr/lib/x/y", "source": "/h/lib", "type": "bind",
         "options": ["ro", "nosuid"]},
    ]


def test_hooks_keep_their_fields_under_their_name():
    hooks = [{"hookName": "createContainer", "path": "/bin/h", "args": ["h", "-x"],
              "env": ["A=1"], "timeout": 5, "other": 1},
             {"hookName": "createContainer", "path": "/bin/g"},
             {"hookName": "poststop", "path": "/bin/p"}]
    oci = edits_of({"hooks": {"prestart": [{"path": "/x"}]}},
                   ({"kind": "a.b/c"}, {"name": "0", "containerEdits": {"hooks": hooks}}, "/s"))
    assert oci["hooks"] == {"prestart": [{"path": "/x"}],
                            "createContainer": [{"path": "/bin/h", "args": ["h", "-x"],
                                                 "env": ["A=1"], "timeout": 5},
                                                {"path": "/bin/g"}],
                            "poststop": [{"path": "/bin/p"}]}


@pytest.mark.parametrize("edit, said", [
    ({"intelRdt": {}, "env": []}, "edits ['intelRdt'] are not applied by nvdocker2"),
    ({"env": "A=1"}, "env must be a list"),
    ({"env": [5]}, "env entry 5 is not NAME=VALUE"),
    ({"env": ["A"]}, "env entry 'A' is not NAME=VALUE"),
    ({"mounts": [{"hostPath": "/a"}]}, "a mount needs hostPath and containerPath"),
    ({"mounts": [{"containerPath": "/a"}]}, "a mount needs hostPath and containerPath"),
    ({"mounts": ["x"]}, "'str' object has no attribute 'get'"),
    ({"hooks": [{"hookName": "prestarts", "path": "/x"}]},
     "hook 'prestarts' needs a known hookName and a path"),
    ({"hooks": [{"hookName": "prestart"}]}, "hook 'prestart' needs a known hookName and a path"),
    ({"deviceNodes": [{"path": "dev/x"}]}, "device node path 'dev/x' is not absolute"),
    ({"deviceNodes": [{"path": 5}]}, "device node path 5 is not absolute"),
    ({"deviceNodes": [{"path": "/dev/none-such-node"}]},
     "device node /dev/none-such-node: No such file or directory"),
    ({"deviceNodes": [{"path": "/x", "hostPath": "/etc/passwd"}]},
     "/etc/passwd is not a device node"),
    ({"deviceNodes": [{"path": "/x", "hostPath": "/dev/null", "type": "b"}]},
     "/dev/null is of type c, the spec says b"),
])
def test_an_edit_that_cannot_be_applied_refuses_the_container(edit, said):
    with pytest.raises(cdi.CdiRefusal) as e:
        cdi.inject({}, [({"kind": "a.b/c"}, {"name": "0", "containerEdits": edit}, "/s.json")])
    assert (e.value.message, e.value.hint) == (
        f"/s.json: cannot apply its containerEdits: {said}",
        "check the spec with `nvdocker2 cdi validate`")


def test_a_spec_wide_edit_that_fails_names_its_file():
    with pytest.raises(cdi.CdiRefusal) as e:
        cdi.inject({}, [({"containerEdits": {"env": [1]}}, {"containerEdits": {}}, "/w.yaml")])
    assert e.value.message == "/w.yaml: cannot apply its containerEdits: env entry 1 is not" \
                              " NAME=VALUE"


def node_edit(oci: dict, *nodes: dict) -> dict:
    return edits_of(oci, ({"kind": "a.b/c"},
                          {"name": "0", "containerEdits": {"deviceNodes": list(nodes)}}, "/s"))


def test_device_nodes_take_what_the_spec_leaves_out_from_the_host_node(tmp_path):
    blk = tmp_path / "blk"
    os.mknod(blk, stat.S_IFBLK | 0o640, os.makedev(7, 9))
    os.chmod(blk, 0o640)
    chr_ = tmp_path / "chr"
    os.mknod(chr_, stat.S_IFCHR | 0o600, os.makedev(195, 3))
    os.chmod(chr_, 0o600)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o604)
    oci = node_edit({"process": {"user": {"uid": 1000, "gid": 0}},
                     "linux": {"devices": [{"path": "/dev/b", "type": "c"}, "odd"]}},
                    {"path": "/dev/b", "hostPath": str(blk), "permissions": "rw"},
                    {"path": "/dev/c", "hostPath": str(chr_), "type": "u", "uid": 7},
                    {"path": "/dev/f", "hostPath": str(fifo), "gid": 8})
    assert oci["linux"]["devices"] == [
        "odd",
        {"path": "/dev/b", "type": "b", "major": 7, "minor": 9, "fileMode": 0o640, "uid": 1000},
        {"path": "/dev/c", "type": "u", "major": 195, "minor": 3, "fileMode": 0o600, "uid": 7},
        {"path": "/dev/f", "type": "p", "major": 0, "minor": 0, "fileMode": 0o604,
         "uid": 1000, "gid": 8},
    ]
    assert oci["linux"]["resources"] == {"devices": [
        {"allow": True, "type": "b", "major": 7, "minor": 9, "access": "rw"}]}


def test_a_device_node_the_spec_describes_in_full_is_not_looked_up():
    oci = node_edit({"process": {"user": {"uid": 0, "gid": 5}}},
                    {"path": "/dev/none-such-a", "type": "c", "major": 195, "minor": 7,
                     "fileMode": 0o660},
                    {"path": "/dev/none-such-p", "type": "p"},
                    {"path": "/dev/none-such-b", "hostPath": "/dev/none", "type": "b",
                     "major": 8})
    assert oci["linux"]["devices"] == [
        {"path": "/dev/none-such-a", "type": "c", "major": 195, "minor": 7, "fileMode": 0o660,
         "gid": 5},
        {"path": "/dev/none-such-p", "type": "p", "major": 0, "minor": 0, "gid": 5},
        {"path": "/dev/none-such-b", "type": "b", "major": 8, "minor": 0, "gid": 5},
    ]
    assert oci["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 7, "access": "rwm"},
        {"allow": True, "type": "b", "major": 8, "minor": 0, "access": "rwm"}]


def test_a_typed_node_without_a_major_reads_it_and_keeps_a_given_mode():
    oci = node_edit({}, {"path": "/dev/n", "hostPath": "/dev/null", "type": "c",
                         "fileMode": 0o600})
    assert oci["linux"]["devices"] == [
        {"path": "/dev/n", "type": "c", "major": 1, "minor": 3, "fileMode": 0o600}]
    oci = node_edit({}, {"path": "/dev/null"})
    assert oci["linux"]["devices"] == [
        {"path": "/dev/null", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}]


def test_a_spec_that_cannot_be_read_is_ignored_with_the_reason(tmp_path, monkeypatch):
    """A read error of one spec (EIO from a failing disk, which no file can be made to give
    root) is that spec's warning; the others are still read."""
    import errno

    from nvdocker2.host import files

    spec_file(tmp_path, "a.json", gpu("a"))
    spec_file(tmp_path, "b.json", gpu("b"))
    read_entry = files.read_entry

    def failing(fd, name, what):
        if name == "a.json":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return read_entry(fd, name, what)

    monkeypatch.setattr(files, "read_entry", failing)
    reg, warnings = registry(tmp_path)
    assert list(reg.devices) == ["nvidia.com/gpu=b"]
    assert warnings == [f"CDI spec ignored: {tmp_path}/a.json: Input/output error"]


def test_reading_the_spec_dirs_leaves_no_descriptor_open(tmp_path):
    spec_file(tmp_path / "a", "x.json", gpu("0"))
    spec_file(tmp_path / "b", "x.json", [1])
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(3):
        registry(tmp_path / "a", tmp_path / "b")
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_a_specs_own_edits_are_applied_once_for_all_its_devices():
    spec = {"kind": "a.b/c", "containerEdits": {"hooks": [
        {"hookName": "createContainer", "path": "/bin/ldconfig-hook"}]}}
    devices = [{"name": n, "containerEdits": {"env": [f"D={n}"]}} for n in "123"]
    oci = edits_of({}, *((spec, d, "/s") for d in devices))
    assert oci["hooks"] == {"createContainer": [{"path": "/bin/ldconfig-hook"}]}
    assert oci["process"]["env"] == ["D=3"]


def test_an_env_edit_replaces_the_variable_of_that_exact_name():
    oci = edits_of({"process": {"env": ["DX=1", "D=old", "D=older"]}},
                   ({"kind": "a.b/c"}, {"name": "0", "containerEdits": {"env": ["D=a=b"]}}, "/s"))
    assert oci["process"]["env"] == ["DX=1", "D=a=b", "D=older"]


@pytest.mark.parametrize("key", ["deviceNodes", "mounts", "hooks", "additionalGids"])
def test_an_edit_that_is_no_list_is_refused_naming_it(key):
    with pytest.raises(cdi.CdiRefusal) as e:
        cdi.inject({}, [({"kind": "a.b/c"}, {"name": "0", "containerEdits": {key: "x"}}, "/s")])
    assert e.value.message == f"/s: cannot apply its containerEdits: {key} must be a list"


def test_given_numbers_of_an_untyped_node_or_a_fifo_are_kept(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o600)
    oci = node_edit({"process": {"user": {"uid": 1, "gid": 1}}},
                    {"path": "/dev/n", "hostPath": "/dev/null", "major": 5, "minor": 6},
                    {"path": "/dev/f", "hostPath": str(fifo), "minor": 4})
    assert oci["linux"]["devices"] == [
        {"path": "/dev/n", "type": "c", "major": 5, "minor": 6, "fileMode": 0o666, "uid": 1,
         "gid": 1},
        {"path": "/dev/f", "type": "p", "major": 0, "minor": 4, "fileMode": 0o600, "uid": 1,
         "gid": 1},
    ]
