"""The refresh units both packages ship, fired without systemd or udev as they would fire them.

The udev rule (nvdocker2/data/70-nvdocker2-cdi-refresh.rules) is matched here against the
uevents the kernel sends when a module loads, and its RUN command is run with the systemctl
stand-in (tests/fixtures/systemctl), which starts the shipped nvdocker2-cdi-refresh.service
by running its ExecStart; the path unit's Unit= is started the same way. Everything runs in a
private mount namespace whose /etc is an overlay (privatepodman.py), so `install --mode cdi`
and `cdi refresh` use their real defaults, /etc/docker/daemon.json and /etc/cdi/nvidia.yaml,
and the machine's /etc is never written. The Docker that install asks is the TEST FIXTURE fake
Engine API (tests/unit/fake_engine.py: a Docker 28.5 with CDI on, so install writes the spec
alone and restarts nothing). The driver is the TEST FIXTURE fake tree; its change is the one
that breaks cuInit in containers when the spec goes stale: nvidia-uvm comes back with another
major number.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shlex
import shutil
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from prereq import require
from fixtures.fake_driver import UVM_MAJOR, build_fake_driver
from privatepodman import PrivatePodman

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "nvdocker2/data"
RULES = DATA / "70-nvdocker2-cdi-refresh.rules"
PATH_UNIT = DATA / "nvdocker2-cdi-refresh.path"
STANDIN = REPO / "tests/fixtures/systemctl"
NEW_UVM_MAJOR = UVM_MAJOR + 1


def fake_engine(socket_path: Path):
    """The unit tests' fake Engine API (tests/unit is not on this directory's import path)."""
    spec = importlib.util.spec_from_file_location("fake_engine", REPO / "tests/unit/fake_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    engine = module.FakeEngine(socket_path)
    engine.info.update(ServerVersion="28.5.2", CDISpecDirs=["/etc/cdi", "/var/run/cdi"])
    return engine.start()


def udev_rule_runs(event: dict[str, str]) -> list[list[str]]:
    """The RUN+= commands of the rules file for `event` (KEY=="a|b" globs, as udev matches)."""
    runs = []
    for line in RULES.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pairs = re.findall(r'([A-Z_]+)(==|!=|\+=|=)"([^"]*)"', line)
        matched = True
        for k, op, value in pairs:
            if op in ("==", "!="):
                hit = any(fnmatch(event.get(k, ""), alt) for alt in value.split("|"))
                matched &= hit if op == "==" else not hit
        if matched:
            runs += [shlex.split(v) for k, op, v in pairs if k == "RUN" and op == "+="]
    return runs


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: (kind, bytes or link target or device number)."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                found[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif p.is_file():
                found[str(p.relative_to(root))] = ("file", p.read_bytes())
            elif not p.is_dir():
                found[str(p.relative_to(root))] = ("node", st.st_rdev)
    return found


@pytest.fixture
def host(tmp_path):
    require("the refresh units' test", [t for t in ("unshare", "nsenter")
                                         if shutil.which(t) is None]
            + ([] if os.geteuid() == 0 else ["root"]))
    driver = build_fake_driver(tmp_path / "driver")
    toml = tmp_path / "config.toml"
    toml.write_text(f'[nvidia-container-runtime]\ndriver-root = "{driver.root}"\n')
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").symlink_to(STANDIN)
    nvdocker2 = bindir / "nvdocker2"
    nvdocker2.write_text(f'#!/bin/sh\nexec {sys.executable} -m nvdocker2 "$@"\n')
    nvdocker2.chmod(0o755)
    engine = fake_engine(tmp_path / "api.sock")
    ns = PrivatePodman(tmp_path / "ns")
    ns.start()
    ns.env.update(
        PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(REPO),
        NVIDIA_CONTAINER_RUNTIME_CONFIG=str(toml), NVDOCKER2_STATE_DIR=str(tmp_path / "state"),
        NVD2_FAKE_UNIT_DIR=str(DATA), NVD2_FAKE_NVDOCKER2=str(nvdocker2),
        NVD2_FAKE_CALLS=str(tmp_path / "calls"),
    )
    try:
        yield ns, driver, tmp_path
    finally:
        ns.cleanup()
        engine.stop()


def install_cdi_mode(ns, tmp: Path) -> None:
    """`install --mode cdi` as an administrator runs it: the spec at /etc/cdi/nvidia.yaml."""
    ns.sh("nvdocker2 install --mode cdi --runtime-path /usr/bin/nvidia-container-runtime"
          f" --allow-missing-runtime --reload none --docker-host unix://{tmp / 'api.sock'}")


def fire(ns, argv: list[str]):
    """Run a unit's or rule's command in the namespace, /bin/systemctl being the stand-in."""
    assert argv[0] == "/bin/systemctl", argv
    return ns.sh(shlex.join(["systemctl", *argv[1:]]), check=False, timeout=120)


def test_a_module_load_refreshes_the_stale_spec_and_touches_nothing_else(host):
    ns, driver, tmp = host
    install_cdi_mode(ns, tmp)
    upper = tmp / "ns/ovl/etc/up"
    spec = upper / "cdi/nvidia.yaml"
    header, before = spec.read_text().split("\n", 1)
    assert f"major: {UVM_MAJOR}" in before
    etc = tree(upper)
    backups_before = set((tmp / "state/backups").glob("*.meta.json"))
    # The driver is upgraded: nvidia-uvm is loaded again and gets another major number.
    for name, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
        node = driver.root / "dev" / name
        node.unlink()
        os.mknod(node, 0o666 | 0o020000, os.makedev(NEW_UVM_MAJOR, minor))
    driver_tree = tree(driver.root)

    runs = udev_rule_runs({"ACTION": "add", "SUBSYSTEM": "module", "KERNEL": "nvidia_uvm"})
    assert runs == [["/bin/systemctl", "--no-block", "start", "nvdocker2-cdi-refresh.service"]]
    proc = fire(ns, runs[0])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rewrote /etc/cdi/nvidia.yaml: nvidia.com/gpu=0, "), proc.stdout
    after = spec.read_text()
    assert f"major: {NEW_UVM_MAJOR}" in after and f"major: {UVM_MAJOR}\n" not in after
    assert header == "# Written by nvdocker2 (CDI mode); regenerated by: nvdocker2 cdi refresh"
    assert after == header + "\n" + before.replace(f"major: {UVM_MAJOR}",
                                                    f"major: {NEW_UVM_MAJOR}")
    # Nothing else: the overlay's upper /etc holds what install left there and the new spec
    # (no temp file), the driver tree is as the upgrade left it, the state directory holds
    # one more backup.
    assert tree(upper) == {**etc, "cdi/nvidia.yaml": ("file", after.encode())}
    assert tree(driver.root) == driver_tree
    backups = set((tmp / "state/backups").glob("*.meta.json")) - backups_before
    assert len(backups) == 1
    rc = ns.sh("nvdocker2 cdi validate /etc/cdi/nvidia.yaml --for podman-4.3", check=False)
    assert rc.returncode == 0, rc.stderr

    # The path unit fires on a driver file or /dev/nvidia-caps changing: nothing changed now,
    # so nothing is written.
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(PATH_UNIT.read_text())
    assert unit["Path"]["Unit"] == "nvdocker2-cdi-refresh.service"
    mtime = spec.stat().st_mtime_ns
    proc = fire(ns, ["/bin/systemctl", "start", unit["Path"]["Unit"]])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("unchanged: /etc/cdi/nvidia.yaml"), proc.stdout
    assert spec.read_text() == after and spec.stat().st_mtime_ns == mtime
    assert set((tmp / "state/backups").glob("*.meta.json")) - backups_before == backups
    calls = (tmp / "calls").read_text().splitlines()
    assert calls == ["systemctl --no-block start nvdocker2-cdi-refresh.service",
                     "systemctl start nvdocker2-cdi-refresh.service"]


def test_at_boot_a_spec_install_did_not_write_keeps_its_bytes(host):
    ns, driver, tmp = host
    # `cdi generate` is the spec only (no transaction): as good as a hand-made one here.
    ns.sh("nvdocker2 cdi generate")
    upper = tmp / "ns/ovl/etc/up"
    etc = tree(upper)
    for name, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
        node = driver.root / "dev" / name
        node.unlink()
        os.mknod(node, 0o666 | 0o020000, os.makedev(NEW_UVM_MAJOR, minor))

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(PATH_UNIT.read_text())
    proc = fire(ns, ["/bin/systemctl", "start", unit["Path"]["Unit"]])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("left alone: /etc/cdi/nvidia.yaml: nvdocker2 install --mode cdi did "
                           "not write it (its journal records no spec there); nothing written\n")
    assert tree(upper) == etc
    assert not list((tmp / "state").glob("backups/*"))


@pytest.mark.parametrize("event", [
    {"ACTION": "add", "SUBSYSTEM": "module", "KERNEL": "snd_hda_intel"},
    {"ACTION": "remove", "SUBSYSTEM": "module", "KERNEL": "nvidia"},
    {"ACTION": "add", "SUBSYSTEM": "pci", "KERNEL": "nvidia"},
])
def test_the_udev_rule_ignores_other_events(event):
    assert udev_rule_runs(event) == []


def test_the_path_unit_watches_files_a_driver_or_mig_change_rewrites():
    text = PATH_UNIT.read_text()
    watched = [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("PathChanged=")]
    assert watched == ["/lib/modules/%v/modules.dep", "/etc/ld.so.cache", "/dev/nvidia-caps"]
    assert not any("*" in w or w.startswith("/proc/") for w in watched)


def test_both_packages_ship_the_path_unit_and_the_udev_rule():
    install = (REPO / "debian/nvdocker2.install").read_text().splitlines()
    assert "nvdocker2/data/nvdocker2-cdi-refresh.path lib/systemd/system/" in install
    assert "nvdocker2/data/70-nvdocker2-cdi-refresh.rules lib/udev/rules.d/" in install
    files = (REPO / "rpm/nvdocker2.spec").read_text().split("%files")[1]
    assert "/usr/lib/systemd/system/nvdocker2-cdi-refresh.path" in files
    assert "/usr/lib/udev/rules.d/70-nvdocker2-cdi-refresh.rules" in files
