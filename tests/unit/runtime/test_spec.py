"""Editing config.json (reference §3): one hook appended, everything else kept, atomic write."""

from __future__ import annotations

import copy
import json
import os
import stat

import pytest

from nvdocker2.runtime.spec import (
    SpecError,
    add_prestart_hook,
    has_gpu_hook,
    hook_entry,
    read_spec,
    write_spec,
)

HOOK = "/usr/bin/nvidia-container-runtime-hook"
OUR_ENTRY = {
    "path": HOOK,
    "args": ["nvidia-container-runtime-hook", "prestart"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
}


def spec_with(**extra):
    spec = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["A=1"]},
            "root": {"path": "rootfs"}, "x-unknown": {"n": 12345678901234567890, "f": 0.1}}
    spec.update(extra)
    return spec


def test_hook_appended_once_and_idempotent():
    spec = spec_with()
    assert add_prestart_hook(spec, HOOK) is True
    assert spec["hooks"] == {"prestart": [OUR_ENTRY]}
    again = copy.deepcopy(spec)
    assert add_prestart_hook(again, HOOK) is False
    assert again == spec


def test_other_hooks_and_unknown_fields_kept_in_order():
    other = {"path": "/usr/bin/other", "args": ["other"], "timeout": 5}
    spec = spec_with(hooks={"poststop": [other], "prestart": [other],
                            "createRuntime": [other]})
    before = copy.deepcopy(spec)
    add_prestart_hook(spec, HOOK)
    assert spec["hooks"]["prestart"] == [other, OUR_ENTRY]
    spec["hooks"]["prestart"].pop()
    assert spec == before
    assert list(spec) == list(before)


def test_existing_hook_with_same_basename_means_no_change():
    dockerd_hook = {"path": "/opt/other/bin/nvidia-container-runtime-hook",
                    "args": ["nvidia-container-runtime-hook", "prestart"], "env": ["X=1"]}
    spec = spec_with(hooks={"prestart": [dockerd_hook]})
    assert add_prestart_hook(spec, HOOK) is False
    assert spec["hooks"]["prestart"] == [dockerd_hook]


def test_config_file_goes_before_the_stage():
    assert hook_entry(HOOK, "/etc/test/config.toml")["args"] == [
        "nvidia-container-runtime-hook", "--config", "/etc/test/config.toml", "prestart"]


@pytest.mark.parametrize("hooks,message", [
    ([], "'hooks' must be an object"),
    ({"prestart": {}}, "'hooks.prestart' must be a list"),
])
def test_malformed_hooks_refused(hooks, message):
    with pytest.raises(SpecError, match=message):
        add_prestart_hook(spec_with(hooks=hooks), HOOK)


def test_null_hooks_are_created():
    spec = spec_with(hooks={"prestart": None})
    assert add_prestart_hook(spec, HOOK)
    assert spec["hooks"]["prestart"] == [OUR_ENTRY]


def test_write_is_atomic_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(spec_with()))
    os.chmod(path, 0o640)
    spec = read_spec(str(path))
    add_prestart_hook(spec, HOOK)
    write_spec(str(path), spec)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["config.json"]
    written = json.loads(path.read_bytes())
    assert written == spec
    assert written["x-unknown"]["n"] == 12345678901234567890


def test_non_ascii_kept_as_utf8(tmp_path):
    path = tmp_path / "config.json"
    write_spec(str(path), spec_with(hostname="gpu-ü"))
    assert "gpu-ü".encode() in path.read_bytes()


@pytest.mark.parametrize("data,message", [
    pytest.param(b"{", "is not valid JSON", id="truncated"),
    pytest.param(b"[]", "not a JSON object", id="array"),
    pytest.param(b"[" * 100000 + b"]" * 100000, "is not valid JSON", id="deep"),
    pytest.param(b" " * (16 * 1024 * 1024 + 1), "larger than 16777216 bytes", id="huge"),
])
def test_malformed_or_huge_spec_refused(tmp_path, data, message):
    path = tmp_path / "config.json"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=message):
        read_spec(str(path))


def test_missing_spec_names_file(tmp_path):
    with pytest.raises(SpecError, match=f"cannot read {tmp_path}/config.json"):
        read_spec(str(tmp_path / "config.json"))


def test_a_stale_temp_file_of_a_killed_run_is_replaced(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}")
    (tmp_path / f".config.json.nvidia.{os.getpid()}.tmp").write_text("partial")
    write_spec(str(path), spec_with())
    assert json.loads(path.read_text()) == spec_with()
    assert os.listdir(tmp_path) == ["config.json"]


def test_unwritable_bundle_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "missing-dir" / "config.json"
    with pytest.raises(SpecError, match=f"cannot write {path}: No such file or directory"):
        write_spec(str(path), spec_with())


@pytest.mark.parametrize("name,present", [("nvidia-container-runtime-hook", True),
                                          ("another-hook", False)])
def test_the_entry_create_writes_counts_as_the_gpu_hook(name, present):
    """`sh -c SCRIPT nvidia-container-runtime-hook ...` is ours from an earlier create: no
    second hook; an sh hook of another name is someone else's."""
    sh_entry = {"path": "/bin/sh", "args": ["sh", "-c", ": script", name, "/rootfs",
                                            "/usr/bin/nvidia-container-cli", "configure"]}
    spec = spec_with(hooks={"prestart": [sh_entry]})
    assert has_gpu_hook(spec) is present
    assert add_prestart_hook(spec, HOOK) is not present
