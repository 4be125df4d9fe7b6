"""The runtime's `create` in direct mode: the hook's request decision, then the spec edit."""

from __future__ import annotations

import io
import json
import sys

import pytest
from fixtures.fake_driver import LIB64_DIR, make_bundle

from nvdocker2 import runtime, toolkit_config
from nvdocker2.direct import DirectError
from nvdocker2.direct.create import edit_for_create


def config_for(driver, tmp_path, extra=""):
    path = tmp_path / "config.toml"
    path.write_text(f'[nvidia-container-runtime]\nmode = "direct"\n'
                    f'driver-root = "{driver.root}"\n{extra}')
    return path, toolkit_config.load(str(path))


def test_the_request_is_decided_by_the_hooks_rules(driver, tmp_path):
    _path, config = config_for(driver, tmp_path)
    bundle, _rootfs, spec = make_bundle(tmp_path, env=[
        "NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    new = edit_for_create(spec, str(bundle), config, "/usr/bin/nvidia-container-runtime")
    assert [d["path"] for d in new["linux"]["devices"]][:2] == ["/dev/nvidia1", "/dev/nvidiactl"]
    assert [m["destination"] for m in new["mounts"][1:]] == [
        f"{LIB64_DIR}/libnvidia-ml.so.{driver.version}", "/usr/bin/nvidia-smi"]
    assert new["hooks"]["createContainer"][0]["path"] == "/usr/bin/nvidia-container-runtime"


def test_not_a_gpu_container_is_not_touched(driver, tmp_path):
    _path, config = config_for(driver, tmp_path)
    bundle, _rootfs, spec = make_bundle(tmp_path, env=["PATH=/bin"])
    assert edit_for_create(spec, str(bundle), config, "/x/nvidia-container-runtime") is None


def test_legacy_cuda_image_means_all_gpus(driver, tmp_path):
    _path, config = config_for(driver, tmp_path)
    bundle, _rootfs, spec = make_bundle(tmp_path, env=["CUDA_VERSION=12.2.0"])
    new = edit_for_create(spec, str(bundle), config, "/x/nvidia-container-runtime")
    assert [d["path"] for d in new["linux"]["devices"]][:2] == ["/dev/nvidia0", "/dev/nvidia1"]


def test_a_refused_request_is_one_line_from_the_hooks_rules(driver, tmp_path):
    _path, config = config_for(driver, tmp_path)
    bundle, _rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=--root=/tmp"])
    with pytest.raises(DirectError) as err:
        edit_for_create(spec, str(bundle), config, "/x/nvidia-container-runtime")
    assert err.value.message.startswith(
        "NVIDIA_VISIBLE_DEVICES: invalid device id '--root=/tmp'")


def test_unknown_uuid_fails_create_before_config_json_changes(driver, tmp_path, capsys,
                                                              monkeypatch):
    config_path, _config = config_for(driver, tmp_path)
    bundle, _rootfs, _spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=GPU-0badc0de"])
    before = (bundle / "config.json").read_bytes()
    log = tmp_path / "log.json"
    argv = ["--root", "/run/runc", "--log", str(log), "--log-format", "json",
            "create", "--bundle", str(bundle), "cid"]
    monkeypatch.setenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", str(config_path))
    code = runtime.main(argv, self_path="/usr/bin/nvidia-container-runtime")
    assert code == 1
    message = "NVIDIA_VISIBLE_DEVICES: unknown GPU UUID 'GPU-0badc0de'"
    assert capsys.readouterr().err == (
        f"nvidia-container-runtime: error: {message}\n"
        "nvidia-container-runtime: hint: this host's GPUs: 0"
        " (GPU-00000000-1111-2222-3333-444444440000), 1"
        " (GPU-00000001-1111-2222-3333-444444440001)\n")
    assert (bundle / "config.json").read_bytes() == before
    record = json.loads(log.read_text())
    assert (record["level"], record["msg"]) == ("error", f"nvidia-container-runtime: {message}")


def test_runtime_dispatches_its_hook_role_instead_of_running_runc(tmp_path, monkeypatch):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"bundle": str(bundle)})))
    code = runtime.main(["direct-hook", "update-ldcache", "--ldconfig", "/sbin/ldconfig"],
                        self_path="/x/nvidia-container-runtime")
    assert code == 0
    assert (rootfs / "etc/ld.so.cache").read_bytes().startswith(b"glibc-ld.so.cache1.1")
