"""CSV mode (Jetson/Tegra): NVIDIA's mount-spec CSV files become the container's device
nodes, read-only file and folder mounts, and links, on a fake Tegra root (test fixture)."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.fake_driver import TEGRA_LIB_DIR, build_fake_tegra, make_bundle

from nvdocker2 import toolkit_config
from nvdocker2.direct import DirectError
from nvdocker2.direct.csv_mode import csv_edit_for_create, csv_files, parse_line
from nvdocker2.runtime.mode import container_mode

RUNTIME = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def tegra(tmp_path):
    return build_fake_tegra(tmp_path / "tegra")


def load(tegra, tmp_path, mode="csv"):
    path = tmp_path / "config.toml"
    path.write_text(f'[nvidia-container-cli]\nroot = "{tegra.root}"\n'
                    f'[nvidia-container-runtime]\nmode = "{mode}"\n'
                    f'[nvidia-container-runtime.modes.csv]\nmount-spec-path = "{tegra.spec_dir}"\n')
    return toolkit_config.load(str(path))


def edit(tegra, tmp_path, *env):
    bundle, rootfs, spec = make_bundle(tmp_path, env=list(env))
    return rootfs, spec, csv_edit_for_create(spec, str(bundle), load(tegra, tmp_path), RUNTIME)


def hook_links(new):
    args = new["hooks"]["createContainer"][0]["args"]
    return [args[i + 1] for i, a in enumerate(args) if a == "--link"]


def test_the_csv_set_becomes_exactly_these_nodes_mounts_and_links(tegra, tmp_path):
    _rootfs, spec, new = edit(tegra, tmp_path, "NVIDIA_VISIBLE_DEVICES=all")
    nodes = [(d["path"], d["major"], d["minor"]) for d in new["linux"]["devices"]]
    assert nodes == [("/dev/nvhost-ctrl", 489, 0), ("/dev/nvhost-ctrl-gpu", 489, 1),
                     ("/dev/nvmap", 10, 120), ("/dev/dri/card0", 226, 0),
                     ("/dev/dri/renderD128", 226, 128)]
    rules = new["linux"]["resources"]["devices"][1:]
    assert [(r["major"], r["minor"], r["access"]) for r in rules] == [
        (489, 0, "rwm"), (489, 1, "rwm"), (10, 120, "rwm"), (226, 0, "rwm"), (226, 128, "rwm")]
    mounts = [(m["destination"], m["source"], m["options"]) for m in new["mounts"][1:]]
    ro = ["nosuid", "nodev", "bind", "ro"]
    assert mounts == [
        *((f, str(tegra.root) + f, ro) for f in tegra.files),
        ("/dev/dri/by-path", f"{tegra.root}/dev/dri/by-path",
         ["nosuid", "nodev", "rbind", "rprivate", "ro"]),
        (f"{TEGRA_LIB_DIR}/tegra-egl", f"{tegra.root}{TEGRA_LIB_DIR}/tegra-egl",
         ["nosuid", "nodev", "rbind", "rprivate", "ro"]),
    ]
    assert hook_links(new) == [f"{link}::{target}" for link, target in tegra.links]
    args = new["hooks"]["createContainer"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--folder"] == [
        f"{TEGRA_LIB_DIR}/nvidia", "/usr/share/vulkan/icd.d"]
    assert spec["mounts"] == [{"destination": "/proc", "type": "proc", "source": "proc"}]


def test_index_0_is_the_board_and_other_ids_are_refused(tegra, tmp_path):
    _rootfs, _spec, new = edit(tegra, tmp_path, "NVIDIA_VISIBLE_DEVICES=0")
    assert len(new["linux"]["devices"]) == 5
    with pytest.raises(DirectError) as err:
        edit(tegra, tmp_path / "b", "NVIDIA_VISIBLE_DEVICES=1")
    assert "csv mode serves the board's one GPU, '1' is not it" in err.value.message


@pytest.mark.parametrize("env", [["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES=none"],
                                 ["PATH=/bin"]])
def test_no_request_no_change(tegra, tmp_path, env):
    assert edit(tegra, tmp_path, *env)[2] is None


def test_other_csv_files_only_with_csv_mounts_all(tegra, tmp_path):
    extra = f"{TEGRA_LIB_DIR}/nvidia/libnvextra.so"
    names = [os.path.basename(p) for p in csv_files(str(tegra.spec_dir))]
    assert names == ["devices.csv", "drivers.csv", "l4t.csv"]
    _r, _s, new = edit(tegra, tmp_path, "NVIDIA_VISIBLE_DEVICES=all")
    assert extra not in [m["destination"] for m in new["mounts"]]
    _r, _s, new = edit(tegra, tmp_path / "b", "NVIDIA_VISIBLE_DEVICES=all",
                       "NVIDIA_REQUIRE_JETPACK=csv-mounts=all")
    assert [m["destination"] for m in new["mounts"]].count(extra) == 1


@pytest.mark.parametrize("line, parsed", [
    ("dev, /dev/nvhost-ctrl", ("dev", "/dev/nvhost-ctrl")),
    ("   dev   , /dev/target ", ("dev", "/dev/target")),
    ("dir,/lib/target   ", ("dir", "/lib/target")),
    ("sym, /a,b", ("sym", "/a,b")),
    ("", None), ("lib", None), ("lib, ", None), ("Lib, /x", None), ("file, /x", None),
])
def test_lines_parse_as_nvidias(line, parsed):
    assert parse_line(line) == parsed


def test_an_image_symlink_cannot_carry_a_folder_mount_to_the_host(tegra, tmp_path):
    bundle, rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=all"])
    (rootfs / "usr/lib/aarch64-linux-gnu").mkdir(parents=True)
    os.symlink("/../../../../etc", rootfs / "usr/lib/aarch64-linux-gnu/tegra-egl")
    with pytest.raises(DirectError) as err:
        csv_edit_for_create(spec, str(bundle), load(tegra, tmp_path), RUNTIME)
    assert "tegra-egl in the container image is a symlink" in err.value.message
    assert json.loads((bundle / "config.json").read_text()) == spec


def test_an_image_symlink_leads_a_library_mount_only_inside_the_image(tegra, tmp_path):
    bundle, rootfs, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=all"])
    os.symlink("/etc", rootfs / "usr/lib/aarch64-linux-gnu")
    new = csv_edit_for_create(spec, str(bundle), load(tegra, tmp_path), RUNTIME)
    assert "/etc/nvidia/libcuda.so.1.1" in [m["destination"] for m in new["mounts"]]
    os.unlink(rootfs / "usr/lib/aarch64-linux-gnu")
    os.symlink("/../../../etc", rootfs / "usr/lib/aarch64-linux-gnu")
    with pytest.raises(DirectError) as err:
        csv_edit_for_create(spec, str(bundle), load(tegra, tmp_path), RUNTIME)
    assert "which leads outside the container's root; refusing it" in err.value.message


def test_a_driver_root_symlink_cannot_lead_a_mount_out_of_the_driver_root(tegra, tmp_path):
    secret = tmp_path / "secret.so"
    secret.write_bytes(b"host file\n")
    os.symlink(f"../../../../../../../../{secret}",
               tegra.root / "usr/lib/aarch64-linux-gnu/nvidia/libnvrm_gpu.so.evil")
    with open(tegra.spec_dir / "drivers.csv", "a") as f:
        f.write(f"lib, {TEGRA_LIB_DIR}/nvidia/libnvrm_gpu.so.evil\n")
    _r, _s, new = edit(tegra, tmp_path, "NVIDIA_VISIBLE_DEVICES=all")
    assert not any(m["source"] == str(secret) for m in new["mounts"])


def test_auto_on_tegra_is_csv_mode(tegra, tmp_path):
    _b, _r, spec = make_bundle(tmp_path, env=["NVIDIA_VISIBLE_DEVICES=all"])
    mode, why = container_mode(spec, load(tegra, tmp_path, "auto"))
    assert mode == "csv" and "Tegra" in why


def test_mount_spec_path_defaults_to_nvidias(tmp_path):
    cfg = toolkit_config.parse(b'[nvidia-container-runtime]\nmode = "csv"\n')
    assert cfg.runtime.csv_mount_spec_path == \
        "/etc/nvidia-container-runtime/host-files-for-container.d"
    assert not any("mount-spec-path" in u for u in cfg.unused)
