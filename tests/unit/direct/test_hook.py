"""The runtime's hook role: soname links in the rootfs, then the host's ldconfig -r ROOTFS."""

from __future__ import annotations

import io
import json
import os
import shutil

from fixtures.fake_driver import DRIVER_VERSION, LIB64_DIR, build_fake_driver, make_bundle

from nvdocker2.direct import direct_edit
from nvdocker2.direct.hook import main
from nvdocker2.direct.ldcache import parse_ld_cache

V = DRIVER_VERSION


def _state(bundle):
    return io.StringIO(json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating",
                                   "pid": 1, "bundle": str(bundle)}))


def _mount_like_runc(spec, rootfs):
    """Stand-in for runc's bind mounts: copy each source to its destination in the rootfs."""
    for m in spec["mounts"]:
        if m["type"] == "bind":
            dest = rootfs / m["destination"].lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(m["source"], dest)


def test_hook_links_sonames_and_refreshes_the_image_ld_cache(tmp_path, capsys):
    driver = build_fake_driver(tmp_path / "driver")
    bundle, rootfs, spec = make_bundle(tmp_path)
    new = direct_edit(spec, str(bundle), ["0"], {"compute", "utility"},
                      driver_root=str(driver.root), runtime_path="/x/nvidia-container-runtime")
    (bundle / "config.json").write_text(json.dumps(new))
    _mount_like_runc(new, rootfs)
    args = new["hooks"]["createContainer"][0]["args"]
    assert args[1] == "direct-hook"

    assert main(args[2:], _state(bundle)) == 0
    assert capsys.readouterr().err == ""
    assert os.readlink(rootfs / LIB64_DIR.lstrip("/") / "libcuda.so.1") == f"libcuda.so.{V}"
    entries = parse_ld_cache((rootfs / "etc/ld.so.cache").read_bytes())
    names = {(e.name, e.path) for e in entries}
    assert ("libcuda.so.1", f"{LIB64_DIR}/libcuda.so.1") in names
    assert ("libnvidia-ml.so.1", f"{LIB64_DIR}/libnvidia-ml.so.1") in names


def test_hook_refuses_a_link_through_an_escaping_image_symlink(tmp_path, capsys):
    bundle, rootfs, _spec = make_bundle(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("../../../outside", rootfs / "usr/lib/x86_64-linux-gnu")
    argv = ["update-ldcache", "--ldconfig", "/sbin/ldconfig",
            "--link", f"{LIB64_DIR}/libcuda.so.1::libcuda.so.{V}", "--folder", LIB64_DIR]
    assert main(argv, _state(bundle)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("error: /usr/lib/x86_64-linux-gnu in the container image is a symlink to"
                      " '../../../outside', which leads outside the container's root; refusing it")
    assert os.listdir(outside) == []


def test_hook_reports_an_ldconfig_failure_in_one_line(tmp_path, capsys):
    bundle, _rootfs, _spec = make_bundle(tmp_path)
    assert main(["update-ldcache", "--ldconfig", "/bin/false"], _state(bundle)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: /bin/false -r {bundle}/rootfs failed (exit 1)")
    assert err.count("\n") == 1


def test_hook_refuses_bad_arguments(tmp_path, capsys):
    bundle, _rootfs, _spec = make_bundle(tmp_path)
    assert main(["update-ldcache", "--ldconfig", "ldconfig"], _state(bundle)) == 1
    assert "error: direct-hook: --ldconfig must be an absolute path" in capsys.readouterr().err
    assert main(["update-ldcache", "--ldconfig", "/sbin/ldconfig", "--link", "a/b"],
                _state(bundle)) == 1
    assert "error: direct-hook: bad --link 'a/b'" in capsys.readouterr().err
    assert main(["frobnicate"], _state(bundle)) == 1
    assert "unknown direct-hook action ['frobnicate']" in capsys.readouterr().err


def test_debians_nvidia_current_layout_gets_its_links_and_cache_entries_there(tmp_path, capsys):
    """Debian's driver packages keep the libraries in nvidia/current/ and link the sonames
    into the library directory; the container gets the libraries at their real place, the
    links beside them, and that directory in its ld cache."""
    driver = build_fake_driver(tmp_path / "driver", layout="debian")
    bundle, rootfs, spec = make_bundle(tmp_path)
    new = direct_edit(spec, str(bundle), ["0"], {"compute", "utility"},
                      driver_root=str(driver.root), runtime_path="/x/nvidia-container-runtime")
    (bundle / "config.json").write_text(json.dumps(new))
    _mount_like_runc(new, rootfs)
    current = f"{LIB64_DIR}/nvidia/current"
    assert main(new["hooks"]["createContainer"][0]["args"][2:], _state(bundle)) == 0
    assert capsys.readouterr().err == ""
    assert os.readlink(rootfs / current.lstrip("/") / "libcuda.so.1") == f"libcuda.so.{V}"
    names = {(e.name, e.path) for e in parse_ld_cache((rootfs / "etc/ld.so.cache").read_bytes())}
    assert ("libcuda.so.1", f"{current}/libcuda.so.1") in names
    assert ("libnvidia-ml.so.1", f"{current}/libnvidia-ml.so.1") in names


def test_mounts_below_the_root_are_found_as_mountinfo_escapes_them():
    """What the hook detaches before ldconfig runs: every mount below the container's root,
    also where the root's path has a space or a backslash (mountinfo writes them as octal)."""
    from nvdocker2.direct.confine import mounts_below

    root = "/run/a b\\c/rootfs"
    mountinfo = "\n".join([
        "21 1 0:20 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        "30 21 0:25 / /run/a\\040b\\134c/rootfs rw shared:2 - overlay overlay rw",
        "31 30 0:26 / /run/a\\040b\\134c/rootfs/proc rw,nosuid - proc proc rw",
        "32 30 8:1 /lib/libcuda.so.1 /run/a\\040b\\134c/rootfs/usr/lib/libcuda.so.1 ro - ext4"
        " /dev/vda rw",
        "33 30 0:27 / /run/a\\040b\\134c/rootfs/my\\040vol rw - tmpfs tmpfs rw",
        "34 21 0:28 / /run/a\\040b\\134c/rootfs-other/x rw - tmpfs tmpfs rw",
        "35 21 0:29 / /run/other rw - tmpfs tmpfs rw",
    ])
    assert mounts_below(root, mountinfo) == {
        "/run/a b\\c/rootfs/proc": False,
        "/run/a b\\c/rootfs/usr/lib/libcuda.so.1": True,
        "/run/a b\\c/rootfs/my vol": False,
    }
