"""Pure edits over real-world daemon.json shapes: what changes, what stays, what is refused."""

from __future__ import annotations

import copy

import pytest

from nvdocker2.engines.docker.daemonjson import edit
from nvdocker2.engines.docker.daemonjson.edit import ABSENT
from nvdocker2.errors import EXIT_BAD_INPUT, BadInput

RT = "/usr/bin/nvidia-container-runtime"

# Shapes seen on real hosts: empty, stock Ubuntu/RHEL tweaks, the nvidia-docker2 package's own
# file, the NVIDIA toolkit's file, cgroup/logging setups, registry mirrors, a default runtime.
SHAPES = {
    "empty": {},
    "logging": {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}},
    "cgroup": {"exec-opts": ["native.cgroupdriver=systemd"], "storage-driver": "overlay2"},
    "nvidia-docker2": {
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}
    },
    "toolkit-default": {
        "default-runtime": "nvidia",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    },
    "other-runtime": {"runtimes": {"kata": {"path": "/usr/bin/kata-runtime"}}, "debug": True},
    "crun-default": {"runtimes": {"crun": {"path": "/usr/bin/crun"}}, "default-runtime": "crun"},
    "empty-runtimes": {"runtimes": {}},
    "registry": {
        "registry-mirrors": ["https://mirror.gcr.io"],
        "insecure-registries": ["10.0.0.1:5000"],
        "live-restore": True,
        "mtu": 1450,
    },
    "pools": {
        "default-address-pools": [{"base": "10.10.0.0/16", "size": 24}],
        "bip": "10.200.0.1/24",
    },
    "shim-form": {
        "runtimes": {
            "gvisor": {"runtimeType": "io.containerd.runsc.v1", "options": {"TypeUrl": "x"}}
        }
    },
}


@pytest.mark.parametrize("name", SHAPES)
def test_add_runtime_adds_only_the_entry_and_keeps_everything_else(name):
    doc = SHAPES[name]
    before = copy.deepcopy(doc)
    new, ch = edit.add_runtime(doc, "nvidia", RT)
    assert doc == before, "the input must not be modified"
    assert new["runtimes"]["nvidia"] == {"path": RT}
    rest = {k: v for k, v in new.items() if k != "runtimes"}
    assert rest == {k: v for k, v in doc.items() if k != "runtimes"}
    assert list(rest) == [k for k in doc if k != "runtimes"]
    others = {k: v for k, v in new["runtimes"].items() if k != "nvidia"}
    assert others == {k: v for k, v in doc.get("runtimes", {}).items() if k != "nvidia"}
    prev = doc.get("runtimes", {}).get("nvidia", ABSENT)
    assert ch.key == "runtimes.nvidia" and ch.before == prev and ch.after == {"path": RT}
    assert ch.action == ("added" if prev is ABSENT else "replaced")


@pytest.mark.parametrize("name", SHAPES)
def test_add_runtime_twice_is_unchanged_the_second_time(name):
    once, _ = edit.add_runtime(SHAPES[name], "nvidia", RT, ["--debug"])
    twice, ch = edit.add_runtime(once, "nvidia", RT, ["--debug"])
    assert twice == once and ch.action == "unchanged" and not ch.changed


def test_runtime_args_are_written_only_when_given():
    new, _ = edit.add_runtime({}, "nvidia", RT, ["--log=/tmp/x", "-v"])
    assert new == {"runtimes": {"nvidia": {"path": RT, "runtimeArgs": ["--log=/tmp/x", "-v"]}}}
    new, _ = edit.add_runtime({}, "nvidia", RT, [])
    assert new == {"runtimes": {"nvidia": {"path": RT}}}


def test_existing_runtimes_keep_their_order_and_the_new_one_goes_last():
    doc = {"runtimes": {"b": {"path": "/b"}, "a": {"path": "/a"}}}
    new, _ = edit.add_runtime(doc, "nvidia", RT)
    assert list(new["runtimes"]) == ["b", "a", "nvidia"]
    new2, _ = edit.add_runtime(
        {"runtimes": {"nvidia": {"path": "x"}, "z": {"path": "/z"}}}, "nvidia", RT
    )
    assert list(new2["runtimes"]) == ["nvidia", "z"]


@pytest.mark.parametrize(
    "doc, key",
    [
        ({"runtimes": []}, "runtimes"),
        ({"runtimes": "nvidia"}, "runtimes"),
        ({"runtimes": None}, "runtimes"),
        ({"runtimes": {"nvidia": "/usr/bin/x"}}, "runtimes.nvidia"),
        ({"runtimes": {"kata": ["/usr/bin/kata"]}}, "runtimes.kata"),
        ({"default-runtime": 1}, "default-runtime"),
        ({"default-runtime": None}, "default-runtime"),
        ({"default-runtime": ["nvidia"]}, "default-runtime"),
    ],
)
def test_wrong_types_are_refused_naming_the_key(doc, key):
    for fn in (
        lambda d: edit.add_runtime(d, "nvidia", RT),
        lambda d: edit.remove_runtime(d, "nvidia"),
        lambda d: edit.unset_default(d),
    ):
        with pytest.raises(edit.ShapeError) as ei:
            fn(doc)
        assert ei.value.key == key and ei.value.exit_code == EXIT_BAD_INPUT
        assert f'"{key.split(".")[0]}"' in ei.value.message


@pytest.mark.parametrize(
    "name", ["runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"]
)
def test_reserved_names_are_refused(name):
    with pytest.raises(BadInput, match="reserved"):
        edit.add_runtime({}, name, RT)


@pytest.mark.parametrize("path", ["nvidia-container-runtime", "bin/x", "./x", ""])
def test_relative_runtime_path_is_refused(path):
    with pytest.raises(BadInput, match="not absolute"):
        edit.add_runtime({}, "nvidia", path)


@pytest.mark.parametrize("name", ["", "a b", "x\n"])
def test_bad_runtime_names_are_refused(name):
    with pytest.raises(BadInput):
        edit.add_runtime({}, name, RT)


def test_remove_runtime_keeps_an_empty_runtimes_object():
    new, ch = edit.remove_runtime({"runtimes": {"nvidia": {"path": RT}}, "debug": True}, "nvidia")
    assert new == {"runtimes": {}, "debug": True}
    assert ch.action == "removed" and ch.before == {"path": RT}
    same, ch = edit.remove_runtime({"debug": True}, "nvidia")
    assert same == {"debug": True} and ch.action == "unchanged"


def test_set_default_requires_a_defined_runtime():
    with pytest.raises(BadInput, match="not defined"):
        edit.set_default({}, "nvidia")
    new, ch = edit.set_default({"runtimes": {"nvidia": {"path": RT}}}, "nvidia")
    assert new["default-runtime"] == "nvidia" and ch.action == "added"
    new2, ch = edit.set_default(new, "nvidia")
    assert ch.action == "unchanged" and new2 is new
    new3, ch = edit.set_default({"default-runtime": "crun", "runtimes": {"nvidia": {}}}, "nvidia")
    assert ch.action == "replaced" and ch.before == "crun"
    assert edit.set_default({}, "runc")[0] == {"default-runtime": "runc"}


def test_unset_default_and_put_default_restore_exactly():
    new, ch = edit.unset_default({"default-runtime": "nvidia", "a": 1})
    assert new == {"a": 1} and ch.action == "removed"
    new, ch = edit.put_default({"a": 1}, "crun")
    assert list(new) == ["a", "default-runtime"]


def test_dangling_default_is_detected_but_shims_and_builtins_are_not():
    assert edit.dangling_default({"default-runtime": "nvidia"}) == "nvidia"
    assert edit.dangling_default({"default-runtime": "runc"}) is None
    assert edit.dangling_default({"default-runtime": "io.containerd.runsc.v1"}) is None
    assert edit.dangling_default({"default-runtime": "nvidia", "runtimes": {"nvidia": {}}}) is None


def test_put_runtime_restores_a_previous_entry_in_place():
    doc = {"runtimes": {"a": {"path": "/a"}, "nvidia": {"path": RT}, "z": {"path": "/z"}}}
    new, ch = edit.put_runtime(
        doc, "nvidia", {"path": "nvidia-container-runtime", "runtimeArgs": []}
    )
    assert list(new["runtimes"]) == ["a", "nvidia", "z"] and ch.action == "replaced"
    new, _ = edit.put_runtime(doc, "nvidia", ABSENT)
    assert list(new["runtimes"]) == ["a", "z"]
