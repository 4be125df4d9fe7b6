"""The user-namespace identity function (nvdocker2.host.run.trusted_ids) and the door's use of
it at their edges: what cannot be read says the host's root is mapped or not as the runtime
must then assume, the kernel's CAP_FOWNER bit read from CapEff exactly, the owner that
unmapped files show as given only where both its ids count, and, in a real namespace of 65536
ids (`unshare -U`), what the mapped nobody plants (a symlink in a sticky directory, a
symlink in root's directory, a FIFO) against what the host's root owns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nvdocker2.host import run

from . import test_run_user_namespace as userns
from .test_run_user_namespace import (
    ALL_CAPS, HOST_BASE, MAPPED_NOBODY, OVERFLOW, REPO, _runc, fake_proc)

ns, planted = userns.ns, userns.planted  # the real namespace of 65536 ids and its files


def ids_with_status(tmp_path, uid_map, status):
    """trusted_ids(0) where /proc/self/status is `status` (None: absent)."""
    proc = fake_proc(tmp_path / "proc", uid_map)
    path = tmp_path / "proc" / "self" / "status"
    if status is None:
        path.unlink()
    else:
        path.write_text(status)
    return run.trusted_ids(0, proc)


SHARED_MAP = "0 100000 65536\n"  # the namespace's own nobody is mapped: the kernel is asked


@pytest.mark.parametrize("cap_eff, asks", [
    ("0000000000000008", True),    # CAP_FOWNER alone
    (ALL_CAPS, True),
    ("00000000000000f7", False),   # everything below bit 8 but CAP_FOWNER
    ("0000000000000010", False),   # bit 4 alone (15 if read in base 15)
    ("0000000000000017", False),   # bits 0-2 and 4 (bit 3 set if read in base 17)
    ("000000000000000f", True),    # not a number in base 15
])
def test_cap_fowner_is_bit_3_of_capeff_in_hex(tmp_path, cap_eff, asks):
    ids = ids_with_status(tmp_path, SHARED_MAP, f"Name:\tpython3\nCapEff:\t{cap_eff}\n")
    assert ids.shared == (OVERFLOW if asks else None)


@pytest.mark.parametrize("status", [
    None, "Name:\tpython3\n", "CapEff:\n", "CapEff:\tnothex\n",
    "Name:\tpython3\nCapInh:\t0000000000000008\n",
])
def test_without_a_readable_capeff_the_kernel_is_not_asked(tmp_path, status):
    ids = ids_with_status(tmp_path, SHARED_MAP, status)
    assert (ids.uids, ids.shared, ids.root_mapped) == (frozenset({0}), None, False)


def test_an_unreadable_uid_map_counts_the_hosts_root_as_mapped(tmp_path):
    """Not rootless, nothing more trusted: what the initial namespace would say."""
    for uid_map in (None, "0 1000\n", "zero 1000 1\n"):
        ids = run.trusted_ids(0, fake_proc(tmp_path / "proc", uid_map))
        assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
            frozenset({0}), frozenset({0}), None, True), uid_map


@pytest.mark.parametrize("broken", [
    {"gid_map": None}, {"overflow": ("", "65534\n")}, {"overflow": ("65534\n", "x\n")},
])
def test_unreadable_overflow_files_in_a_rootless_namespace_trust_nothing_more(tmp_path, broken):
    ids = run.trusted_ids(0, fake_proc(tmp_path / "proc", "0 1000 1\n", **broken))
    assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
        frozenset({0}), frozenset({0}), None, False)


def test_the_overflow_ids_are_read_each_from_its_own_file(tmp_path):
    ids = run.trusted_ids(0, fake_proc(tmp_path / "proc", "0 1000 1\n",
                                       overflow=("65534\n", "65533\n")))
    assert (ids.uids, ids.gids) == (frozenset({0, 65534}), frozenset({0, 65533}))


def test_an_unmapped_owner_is_given_only_where_its_uid_and_gid_both_count(tmp_path, monkeypatch):
    """gid_map maps the overflow gid (a group of the namespace's own), uid_map does not map
    the overflow uid: unmapped files show as 65534:65534, whose group is not root's."""
    proc = fake_proc(tmp_path / "proc", "0 1000 1\n", gid_map="0 1000 1\n1 100000 65536\n")
    monkeypatch.setattr(run, "_unmapped", run._read_namespace(proc))
    assert run.trusted_ids(0).uids == frozenset({0, OVERFLOW})
    assert run.unmapped_owner() is None
    proc = fake_proc(tmp_path / "proc2", "0 1000 1\n", overflow=("65534\n", "65533\n"))
    monkeypatch.setattr(run, "_unmapped", run._read_namespace(proc))
    assert run.unmapped_owner() == (65534, 65533)


def test_ids_show_themselves_sorted():
    ids = run.Ids(frozenset({65534, 0, 1000}), frozenset({0}), 65534, False)
    assert repr(ids) == "Ids(uids=[0, 1000, 65534], gids=[0], shared=65534, root_mapped=False)"
    assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
        frozenset({0, 1000, 65534}), frozenset({0}), 65534, False)


# --- in a real namespace: what the door says, as the namespace's root -----------------------

DOOR = ("import json, sys; sys.path.insert(0, sys.argv[1]); from nvdocker2.host import run;"
        " print(json.dumps([run.unsafe_to_run(p) for p in sys.argv[2:]]))")


def verdicts(ns, *paths, caps=()):
    import json

    proc = ns.run(*caps, sys.executable, "-I", "-S", "-c", DOOR, str(REPO), *map(str, paths),
                  env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def as_nobody(ns, *argv):
    proc = ns.run(*argv, env={"PATH": "/usr/bin:/bin"}, uid=OVERFLOW)
    assert proc.returncode == 0, proc.stderr


def test_a_symlink_showing_as_the_overflow_uid_in_a_sticky_directory_is_refused(ns, planted):
    """/tmp-like: root's runc is fine, but a link to it there that shows as 65534 may be the
    mapped nobody's, who could have made it lead anywhere, and the kernel cannot be asked
    about a symlink: the sticky directory is then writable by other users, whoever made it."""
    ours = _runc(planted, "root", 0)
    sticky = planted / "sticky"
    sticky.mkdir(mode=0o777)
    sticky.chmod(0o1777)
    as_nobody(ns, "ln", "-s", str(ours), str(sticky / "runc"))
    assert os.lstat(sticky / "runc").st_uid == MAPPED_NOBODY
    os.symlink(str(ours), sticky / "roots")  # the host's root's own link there
    assert verdicts(ns, sticky / "runc", sticky / "roots", ours) == [
        f"{sticky} is writable by other users", f"{sticky} is writable by other users", None]
    assert verdicts(ns, ours.parent / ".." / "sticky" / "runc") == [
        f"{sticky} is writable by other users"]


def test_a_symlink_of_another_mapped_user_is_refused_where_the_overflow_uid_is_asked(ns, planted):
    ours = _runc(planted, "root", 0)
    link = planted / "root" / "link"
    os.symlink(str(ours), link)
    os.lchown(link, HOST_BASE + 1000, HOST_BASE + 1000)
    nobodys = planted / "root" / "nobodys-link"
    os.symlink(str(ours), nobodys)
    os.lchown(nobodys, MAPPED_NOBODY, MAPPED_NOBODY)
    assert verdicts(ns, link, nobodys) == [f"{link} belongs to uid 1000", None]


def test_only_files_and_directories_of_the_overflow_uid_are_asked(ns, planted):
    """A FIFO of the host's root shows as 65534 too; the kernel is not asked about it (an
    open could block or do something), so it is not root's: refused for its owner."""
    fifo = planted / "root" / "fifo"
    os.mkfifo(fifo, 0o755)
    ours = _runc(planted, "root", 0)
    assert verdicts(ns, fifo, ours) == [f"{fifo} belongs to uid {OVERFLOW}", None]


def test_a_file_the_kernel_refuses_for_its_mode_tells_nothing(ns, planted):
    """EACCES, not EPERM: the open failed for the mode, not for the owner, so the host
    root's unreadable file is not known to be root's: refused, as nobody's is."""
    theirs = _runc(planted, "nobody", MAPPED_NOBODY)
    theirs.chmod(0o000)
    hidden = planted / "root" / "hidden"
    hidden.write_text("#!/bin/sh\n")
    hidden.chmod(0o000)
    ours = _runc(planted, "root", 0)
    assert verdicts(ns, theirs, hidden, ours) == [
        f"{theirs.parent} belongs to uid {OVERFLOW}", f"{hidden} belongs to uid {OVERFLOW}",
        None]


def test_the_processs_own_namespace_is_read_once(monkeypatch):
    """On every container's start path: /proc is read at the first question, not again."""
    opened = []

    def counting_open(path, *args, **kwargs):
        opened.append(path)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(run, "open", counting_open, raising=False)
    monkeypatch.setattr(run, "_unmapped", False)
    first = run.trusted_ids(0)
    reads = len(opened)
    assert reads >= 1 and all(p.startswith("/proc/") for p in opened)
    again = run.trusted_ids(0)
    assert len(opened) == reads
    assert (again.uids, again.gids, again.shared) == (first.uids, first.gids, first.shared)


SWAPPED = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from nvdocker2.host import run
target, when = sys.argv[2], sys.argv[3]
real_open = os.open

def wait():  # the test moves the file away, then answers
    print("now", flush=True)
    sys.stdin.readline()

def asking_open(path, flags, *args, **kwargs):
    if path != target or not flags & os.O_NOATIME:
        return real_open(path, flags, *args, **kwargs)
    if when == "before":
        wait()
        return real_open(path, flags, *args, **kwargs)
    try:
        return real_open(path, flags, *args, **kwargs)
    finally:
        wait()

os.open = asking_open
print(json.dumps(run.unsafe_to_run(target)), flush=True)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_file_moved_away_while_the_kernel_is_asked_is_not_trusted(ns, planted, when):
    """The host root's runc, moved away by its owner just before the kernel is asked (the
    open fails, not for its owner) or just after it answered (the file is no longer the one
    asked about): nothing is learnt, it is not root's. The move is the test's, at the
    moment the probe says."""
    import json

    ours = _runc(planted, "root", 0)
    probe = subprocess.Popen(
        ns.argv(0, sys.executable, "-I", "-S", "-c", SWAPPED, str(REPO), str(ours), when),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin"}, cwd="/")
    try:
        assert probe.stdout.readline() == "now\n"
        os.rename(ours, planted / "root" / "moved")
        out, err = probe.communicate("go\n", timeout=60)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    assert (probe.returncode, err) == (0, "")
    assert json.loads(out) == f"{ours} belongs to uid {OVERFLOW}"
