"""`nvdocker2 system create-device-nodes` and `create-dev-char-symlinks` on the TEST FIXTURE
fake driver tree (tests/fixtures/fake_driver.py: real nodes made with mknod, a /proc/devices
with the drivers' majors): exact nodes and links, a second run makes nothing, what is in the
way stops the run before any change, and no planted symlink is followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from .cli_run import cli
from fixtures.fake_driver import (
    CAPS_MAJOR,
    MIG_CONFIG_MINOR,
    MIG_MONITOR_MINOR,
    NVIDIA_MAJOR,
    UVM_MAJOR,
    add_fabric,
    add_mig,
    build_fake_driver,
    default_migs,
    write_proc_devices,
)

CONTROL = [("nvidiactl", NVIDIA_MAJOR, 255), ("nvidia-modeset", NVIDIA_MAJOR, 254),
           ("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]


@pytest.fixture
def fake(tmp_path):
    fake = build_fake_driver(tmp_path / "root")
    write_proc_devices(fake)
    return fake


def nodes_under(dev: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for p in sorted(dev.rglob("*")):
        st = p.lstat()
        if stat.S_ISCHR(st.st_mode):
            out[str(p.relative_to(dev))] = (os.major(st.st_rdev), os.minor(st.st_rdev),
                                            stat.S_IMODE(st.st_mode))
    return out


def links_under(char: Path) -> dict[str, str]:
    return {p.name: os.readlink(p) for p in sorted(char.iterdir())} if char.is_dir() else {}


def make_nodes(fake, *extra):
    return cli("system", "create-device-nodes", "--dev-root", str(fake.root), "--proc-root",
               str(fake.root), *extra)


def make_links(fake, *extra):
    return cli("system", "create-dev-char-symlinks", "--dev-root", str(fake.root), *extra)


def test_create_device_nodes_makes_exactly_the_missing_control_and_mig_caps_nodes(fake):
    dev = fake.root / "dev"
    for name in ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).unlink()
    (fake.root / "proc/driver/nvidia-caps").mkdir(parents=True)
    (fake.root / "proc/driver/nvidia-caps/mig-minors").write_text(
        f"config {MIG_CONFIG_MINOR}\nmonitor {MIG_MONITOR_MINOR}\ngpu0/gi1/access 12\n")
    before = nodes_under(dev)
    old = os.umask(0o077)
    try:
        code, out, err = make_nodes(fake)
    finally:
        os.umask(old)
    assert (code, err) == (0, ""), err
    made = {k: v for k, v in nodes_under(dev).items() if k not in before}
    assert made == {
        **{name: (major, minor, 0o666) for name, major, minor in CONTROL},
        f"nvidia-caps/nvidia-cap{MIG_CONFIG_MINOR}": (CAPS_MAJOR, MIG_CONFIG_MINOR, 0o400),
        f"nvidia-caps/nvidia-cap{MIG_MONITOR_MINOR}": (CAPS_MAJOR, MIG_MONITOR_MINOR, 0o400),
    }
    assert stat.S_IMODE((dev / "nvidia-caps").stat().st_mode) == 0o755
    assert out.splitlines()[0] == f"made {dev}/nvidiactl ({NVIDIA_MAJOR}:255)"
    again = nodes_under(dev)
    code, out, _ = make_nodes(fake)
    assert code == 0 and nodes_under(dev) == again
    assert all(line.startswith("unchanged: ") for line in out.splitlines()) and len(
        out.splitlines()) == 6


def test_create_device_nodes_without_an_nvidia_driver_makes_nothing(fake):
    write_proc_devices(fake, {})
    (fake.root / "dev/nvidia-uvm").unlink()
    before = nodes_under(fake.root / "dev")
    code, out, _ = make_nodes(fake)
    assert code == 0 and "lists no NVIDIA driver: nothing to make" in out
    assert nodes_under(fake.root / "dev") == before


@pytest.mark.parametrize("what", ["file", "wrong-number"])
def test_an_entry_in_the_way_stops_create_device_nodes_before_any_change(fake, what):
    dev = fake.root / "dev"
    (dev / "nvidiactl").unlink()
    (dev / "nvidia-uvm-tools").unlink()
    if what == "file":
        (dev / "nvidia-uvm-tools").write_text("planted\n")
    else:
        os.mknod(dev / "nvidia-uvm-tools", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = nodes_under(dev)
    code, out, err = make_nodes(fake)
    assert code == 3 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {dev}/nvidia-uvm-tools: ")
    assert lines[0].endswith("; nothing was made") and lines[1].startswith("hint: move ")
    assert nodes_under(dev) == before and not (dev / "nvidiactl").exists()


def test_create_dev_char_symlinks_links_every_nvidia_node_but_the_blocked_ones(fake):
    add_mig(fake, default_migs())
    add_fabric(fake)
    code, out, err = make_links(fake)
    assert (code, err) == (0, ""), err
    caps = sorted(p.name for p in (fake.root / "dev/nvidia-caps").iterdir())
    expected = {f"{NVIDIA_MAJOR}:{g.minor}": f"../nvidia{g.minor}" for g in fake.gpus}
    expected.update({f"{major}:{minor}": f"../{name}" for name, major, minor in CONTROL})
    expected.update({f"{CAPS_MAJOR}:{name[len('nvidia-cap'):]}": f"../nvidia-caps/{name}"
                     for name in caps})
    char = fake.root / "dev/char"
    assert links_under(char) == expected
    assert all(os.path.samefile(char / k, char / v) for k, v in expected.items())
    assert len(out.splitlines()) == len(expected)
    code, out, _ = make_links(fake)
    assert code == 0 and links_under(char) == expected
    assert all(line.startswith("unchanged: ") for line in out.splitlines())


def test_a_link_that_leads_to_its_node_stays_and_a_wrong_one_is_replaced(fake):
    char = fake.root / "dev/char"
    char.mkdir()
    os.symlink(str(fake.root / "dev/nvidia0"), char / f"{NVIDIA_MAJOR}:0")  # absolute, right
    os.symlink("../nvidia1", char / f"{NVIDIA_MAJOR}:255")  # leads to the wrong node
    os.symlink("../tty", char / "4:0")  # not NVIDIA's: never touched
    code, out, err = make_links(fake)
    assert code == 0, err
    links = links_under(char)
    assert links[f"{NVIDIA_MAJOR}:0"] == str(fake.root / "dev/nvidia0")
    assert links[f"{NVIDIA_MAJOR}:255"] == "../nvidiactl"
    assert links["4:0"] == "../tty"
    assert f"unchanged: {char}/{NVIDIA_MAJOR}:0" in out
    assert sorted(p.name for p in char.iterdir() if p.name.startswith(".")) == []


def test_a_file_in_the_way_stops_create_dev_char_symlinks_before_any_change(fake):
    char = fake.root / "dev/char"
    char.mkdir()
    (char / f"{UVM_MAJOR}:1").write_text("planted\n")
    code, out, err = make_links(fake)
    assert code == 3 and out == ""
    assert err.splitlines()[0] == (f"error: {char}/{UVM_MAJOR}:1: not a symlink; nothing was "
                                   "made")
    assert os.listdir(char) == [f"{UVM_MAJOR}:1"]
    assert (char / f"{UVM_MAJOR}:1").read_text() == "planted\n"


def test_a_symlink_planted_at_dev_char_is_never_followed(fake, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), fake.root / "dev/char")
    code, _, err = make_links(fake)
    assert code == 3 and err.startswith(f"error: {fake.root}/dev/char: not a directory")
    assert "never followed" in err
    assert os.listdir(elsewhere) == []


def test_a_dev_root_another_user_can_write_is_refused(tmp_path):
    """A dev root reached through a directory `nobody` owns: `nobody` could swap what is
    under it between the check and the link, so nothing is made there."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    fake = build_fake_driver(theirs / "root")
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    via = tmp_path / "via"
    os.symlink(str(fake.root), via)
    for args in (("create-dev-char-symlinks", "--dev-root", str(via)),
                 ("create-device-nodes", "--dev-root", str(via), "--proc-root", str(via))):
        code, out, err = cli("system", *args)
        assert code == 3 and out == "", err
        assert err.startswith(f"error: {via}/dev: not trusted: ") and \
            err.splitlines()[0].endswith("; nothing was made")
    assert not (fake.root / "dev/char").exists()


def test_a_missing_dev_root_is_one_line_and_exit_3(tmp_path):
    code, _, err = cli("system", "create-dev-char-symlinks", "--dev-root",
                       str(tmp_path / "none"))
    assert code == 3 and len(err.splitlines()) == 2
    assert err.startswith(f"error: {tmp_path}/none/dev: No such file or directory")


def test_no_nvidia_node_no_link_and_no_dev_char(tmp_path):
    (tmp_path / "root/dev").mkdir(parents=True)
    code, out, _ = cli("system", "create-dev-char-symlinks", "--dev-root",
                       str(tmp_path / "root"))
    assert code == 0 and "no NVIDIA device nodes" in out
    assert not (tmp_path / "root/dev/char").exists()


def test_a_symlink_planted_at_dev_nvidia_caps_is_never_followed(fake, tmp_path):
    (fake.root / "proc/driver/nvidia-caps").mkdir(parents=True)
    (fake.root / "proc/driver/nvidia-caps/mig-minors").write_text("config 1\nmonitor 2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), fake.root / "dev/nvidia-caps")
    (fake.root / "dev/nvidia-uvm").unlink()
    code, _, err = make_nodes(fake)
    assert code == 3 and err.startswith(f"error: {fake.root}/dev/nvidia-caps: not a directory")
    assert os.listdir(elsewhere) == [] and not (fake.root / "dev/nvidia-uvm").exists()
    code, _, err = make_links(fake)  # the links of the other nodes, none into it
    assert code == 0, err
    assert os.listdir(elsewhere) == []
    assert not [v for v in links_under(fake.root / "dev/char").values() if "caps" in v]
