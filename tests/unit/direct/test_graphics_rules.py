"""What the graphics, display and NGX capabilities bring (nvdocker2.direct.graphics) at their
edges, on the fake driver tree: display alone brings the loaders' configs too, each file
labelled with the capability that brought it, a config reached by a symlink that climbs out
of the driver root clamped inside it, a folder where a config should be left out, and the
DRI nodes of GPUs whose sysfs entry is odd or missing."""

from __future__ import annotations

import os

from . import test_graphics
from fixtures.fake_driver import LIB64_DIR

from nvdocker2.direct.discover import discover
from nvdocker2.direct.graphics import dri_nodes, graphics_files

driver = test_graphics.driver  # the fake driver with its DRI nodes and graphics files


def files(driver, *caps):
    found, _ = graphics_files(discover(str(driver.root)), frozenset(caps))
    return {f.path: f for f in found}


def test_display_alone_brings_the_configs_and_the_xorg_modules(driver):
    display = files(driver, "display")
    graphics = files(driver, "graphics")
    assert set(graphics) < set(display)
    assert {f.capability for p, f in display.items() if p in graphics} == {"graphics"}
    assert {f.capability for p, f in display.items() if p not in graphics} == {"display"}
    assert {f.kind for f in display.values()} == {"file"}
    assert [p for p in graphics if "application-profiles" in p]


def test_ngx_brings_the_wine_dlls_beside_the_64_bit_library_only(driver):
    ngx = files(driver, "ngx")
    assert sorted(ngx) == [f"{LIB64_DIR}/nvidia/wine/_nvngx.dll",
                           f"{LIB64_DIR}/nvidia/wine/nvngx.dll"]
    assert {(f.capability, f.kind) for f in ngx.values()} == {("ngx", "file")}


def test_a_config_behind_a_symlink_that_climbs_out_is_taken_inside_the_driver_root(driver):
    real = driver.path("/real_icd.json")
    real.write_text('{"ICD": {}}\n')
    icd = None
    for root in ("/etc", "/usr/local/share", "/usr/share"):
        path = driver.path(f"{root}/vulkan/icd.d/nvidia_icd.json")
        if path.exists():
            icd = path
    assert icd is not None
    os.unlink(icd)
    os.symlink("../../../../../../../../real_icd.json", icd)
    found = [f for f in files(driver, "graphics").values() if f.host_path == str(real)]
    assert len(found) == 1


def test_a_folder_where_a_config_should_be_is_left_out(driver):
    before = files(driver, "graphics")
    victim = next(f for f in before.values() if f.path.endswith("nvidia_icd.json"))
    os.unlink(victim.host_path)
    os.mkdir(victim.host_path)
    assert victim.path not in files(driver, "graphics")


def test_dri_nodes_of_gpus_with_an_odd_or_no_sysfs_entry_are_left_out(driver):
    d = discover(str(driver.root))
    first, second = sorted(d.gpus, key=lambda g: g.bus_id)
    card, render = driver.dri[second.uuid]
    drm = driver.path(f"/sys/bus/pci/devices/{first.bus_id}/drm")
    for name in os.listdir(drm):
        os.rmdir(drm / name)
    os.rmdir(drm)
    # A connector's folder beside the card's, with a DRI node of that name planted in /dev/dri.
    os.mkdir(driver.path(f"/sys/bus/pci/devices/{second.bus_id}/drm/{card}-DP-1"))
    os.mknod(driver.path(f"/dev/dri/{card}-DP-1"), 0o20666, os.makedev(226, 99))
    odd = first.replace(bus_id=f"{second.bus_id}/drm/..")  # not a bus id
    nodes = [n.path for n in dri_nodes(d, (odd, first, second))]
    assert nodes == [f"/dev/dri/{card}", f"/dev/dri/{render}"]
