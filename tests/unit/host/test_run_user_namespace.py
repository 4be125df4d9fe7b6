"""Who counts as root's inside a user namespace (nvdocker2.host.run.trusted_ids).

In a namespace that does not map the host's root, root's files show as the kernel's overflow
uid (65534). Where nothing else is mapped to that uid (a rootless engine's `0 1000 1`) they
count as root's. A standard 65536-id map (an LXD or Incus container, Sysbox) maps 65534 too:
it is that namespace's own `nobody`, who must not pass for root. First the rule on fake /proc
trees, then the attack in a real namespace (`0 100000 65536`, made with `unshare -U` and
entered with `nsenter`): the mapped nobody's runc, and a `dockerd` of nobody's, as the
runtime and `doctor` see them, next to the host root's runc that must still run there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nvdocker2
from nvdocker2.host import run

REPO = Path(nvdocker2.__file__).resolve().parent.parent
OVERFLOW = 65534
FOWNER = 1 << 3
ALL_CAPS = "000001ffffffffff"


def fake_proc(root: Path, uid_map: str | None, gid_map: str | None = "same",
              overflow: tuple[str, str] = ("65534\n", "65534\n"),
              cap_eff: str = ALL_CAPS) -> str:
    """A /proc tree with what trusted_ids reads (None: that file is absent; gid_map is
    uid_map's unless given)."""
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    gid_map = uid_map if gid_map == "same" else gid_map
    for rel, text in (("self/uid_map", uid_map), ("self/gid_map", gid_map),
                      ("sys/kernel/overflowuid", overflow[0]),
                      ("sys/kernel/overflowgid", overflow[1]),
                      ("self/status", f"Name:\tpython3\nCapEff:\t{cap_eff}\n")):
        if text is not None:
            (root / rel).write_text(text)
    return str(root)


def ids_of(tmp_path: Path, *args, euid: int = 0, **kwargs) -> run.Ids:
    return run.trusted_ids(euid, fake_proc(tmp_path / "proc", *args, **kwargs))


# --- the rule, on fake /proc trees ----------------------------------------------------------


def test_in_the_initial_namespace_the_overflow_ids_are_just_nobody(tmp_path):
    ids = ids_of(tmp_path, "         0          0 4294967295\n", euid=1000)
    assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
        frozenset({0, 1000}), frozenset({0}), None, True)


def test_where_only_the_overflow_ids_stand_for_unmapped_owners_they_count_as_roots(tmp_path):
    ids = ids_of(tmp_path, "         0       1000          1\n")
    assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
        frozenset({0, OVERFLOW}), frozenset({0, OVERFLOW}), None, False)


@pytest.mark.parametrize("uid_map", [
    "0 100000 65536\n",                   # LXD, Incus, Sysbox
    "0 1000 1\n1 100000 65536\n",         # rootless Podman with its subordinate ids
    "0 1000000 1000000000\n",             # a bigger one
])
def test_a_namespace_that_maps_its_own_nobody_does_not_trust_it(tmp_path, uid_map):
    ids = ids_of(tmp_path, uid_map)
    assert (ids.uids, ids.gids, ids.root_mapped) == (frozenset({0}), frozenset({0}), False)
    assert ids.shared == OVERFLOW  # to be asked of the kernel, file by file
    no_fowner = f"{int(ALL_CAPS, 16) & ~FOWNER:016x}"
    assert ids_of(tmp_path, uid_map, cap_eff=no_fowner).shared is None  # it cannot say


def test_where_the_hosts_root_is_mapped_the_overflow_ids_are_other_users(tmp_path):
    for uid_map in ("0 0 1\n", "0 0 1\n1 100000 65536\n", "5 0 1\n"):
        ids = ids_of(tmp_path, uid_map)
        assert (ids.uids, ids.gids, ids.shared, ids.root_mapped) == (
            frozenset({0}), frozenset({0}), None, True), uid_map


def test_a_caller_mapped_to_the_overflow_uid_is_itself_trusted_not_shared(tmp_path):
    ids = ids_of(tmp_path, "0 100000 65536\n", euid=OVERFLOW)
    assert (ids.uids, ids.shared) == (frozenset({0, OVERFLOW}), None)


def test_gids_follow_gid_map(tmp_path):
    ids = ids_of(tmp_path, "0 1000 1\n", gid_map="0 1000 1\n1 100000 65536\n")
    assert (ids.uids, ids.gids) == (frozenset({0, OVERFLOW}), frozenset({0}))
    ids = ids_of(tmp_path, "0 1000 1\n", gid_map="0 0 1\n")
    assert ids.gids == frozenset({0})


@pytest.mark.parametrize("broken", [
    {"uid_map": None}, {"uid_map": "0 1000\n"}, {"uid_map": "0 1000 1\n", "gid_map": None},
    {"uid_map": "0 1000 1\n", "overflow": ("65534\n", "")},
])
def test_what_cannot_be_read_trusts_nothing_more(tmp_path, broken):
    ids = ids_of(tmp_path, **broken)
    assert (ids.uids, ids.gids, ids.shared) == (frozenset({0}), frozenset({0}), None)


def _ranges(draw_ranges: list[tuple[int, int, int]]) -> str:
    return "".join(f"{inside:10d} {outside:10d} {count:10d}\n"
                   for inside, outside, count in draw_ranges)


@st.composite
def id_maps(draw) -> list[tuple[int, int, int]]:
    """Up to five lines with non-overlapping inside ranges, as the kernel allows; the edges
    that matter (0 and 65534 on either side) are drawn often."""
    edges = st.sampled_from([0, 1, 1000, 65533, 65534, 65535, 100000, 165534])
    starts = sorted(set(draw(st.lists(st.one_of(edges, st.integers(0, 2**32 - 2)),
                                      min_size=1, max_size=5))))
    lines = []
    for i, inside in enumerate(starts):
        room = (starts[i + 1] if i + 1 < len(starts) else 2**32 - 1) - inside
        usual = [c for c in (1, 65534, 65535, 65536) if c <= room]
        count = draw(st.one_of(st.sampled_from(usual), st.integers(1, room)))
        outside = draw(st.one_of(edges, st.integers(0, 2**32 - 1 - count)))
        lines.append((inside, min(outside, 2**32 - 1 - count), count))
    return lines


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(uid_map=id_maps(), gid_map=id_maps(), euid=st.sampled_from([0, 1000, OVERFLOW]))
def test_the_overflow_ids_are_trusted_exactly_where_they_stand_for_unmapped_owners_alone(
        tmp_path_factory, uid_map, gid_map, euid):
    proc = fake_proc(tmp_path_factory.mktemp("proc"), _ranges(uid_map), _ranges(gid_map))
    ids = run.trusted_ids(euid, proc)

    def shows(maps, i):  # does some id inside stand for `i` outside?
        return any(0 <= i - outside < count for _, outside, count in maps)

    def mapped(maps, i):  # is the id `i` inside someone's?
        return any(0 <= i - inside < count for inside, _, count in maps)

    assert {0, euid} <= ids.uids and 0 in ids.gids
    assert (OVERFLOW in ids.uids) == (euid == OVERFLOW or not (
        shows(uid_map, 0) or mapped(uid_map, OVERFLOW)))
    assert (OVERFLOW in ids.gids) == (not shows(uid_map, 0) and not (
        shows(gid_map, 0) or mapped(gid_map, OVERFLOW)))
    assert ids.uids <= {0, euid, OVERFLOW} and ids.gids <= {0, OVERFLOW}
    assert ids.root_mapped == shows(uid_map, 0)
    assert (ids.shared == OVERFLOW) == (
        euid != OVERFLOW and not shows(uid_map, 0) and mapped(uid_map, OVERFLOW))


# --- the attack, in a real namespace of 65536 ids --------------------------------------------

HOST_BASE = 100000
MAPPED_NOBODY = HOST_BASE + OVERFLOW  # the host uid the namespace's 65534 stands for


class UserNamespace:
    """`0 100000 65536` for uids and gids: a holder process made by `unshare -U`, its maps
    written by root here, entered with `nsenter` as the namespace's root or nobody."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "--user", "sh", "-c", "echo ready; exec sleep 600"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.holder.stdout is not None
        assert self.holder.stdout.readline() == "ready\n"  # the namespace exists
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{self.holder.pid}/{name}").write_text(f"0 {HOST_BASE} 65536\n")

    def argv(self, uid: int, *argv: str) -> list[str]:
        return ["nsenter", "--target", str(self.holder.pid), "--user",
                "--setuid", str(uid), "--setgid", str(uid), "--", *argv]

    def run(self, *argv: str, env: dict[str, str], uid: int = 0) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(uid, *argv), capture_output=True, text=True,
                              timeout=120, env=env, cwd="/")

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()


@pytest.fixture
def ns():
    missing = [t for t in ("unshare", "nsenter", "setpriv") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        why = f"needs root and {', '.join(missing) or 'unshare'}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"prerequisite missing under CI: {why}", pytrace=False)
        pytest.skip(why)
    namespace = UserNamespace()
    try:
        yield namespace
    finally:
        namespace.close()


@pytest.fixture
def planted():
    """In /tmp (reachable from the namespace: pytest's own tmp is root's 0700, which the
    namespace's root cannot enter): `root/` of the host's root, `nobody/` of host uid 165534
    (65534 in the namespace), `marks/` where a planted program leaves its mark when run."""
    base = Path(tempfile.mkdtemp(prefix="nvd2-userns-", dir="/tmp"))
    base.chmod(0o755)
    for name, uid in (("root", 0), ("nobody", MAPPED_NOBODY)):
        (base / name).mkdir(mode=0o755)
        os.chown(base / name, uid, uid)
    (base / "marks").mkdir()
    (base / "marks").chmod(0o777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _program(path: Path, uid: int, script: str) -> Path:
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    os.chown(path, uid, uid)
    return path


def _runc(base: Path, who: str, uid: int) -> Path:
    return _program(base / who / "runc", uid, f"echo {who} >> {base}/marks/runc-ran\n"
                    "echo runc ran")


RUNTIME = ("import sys; sys.path.append(sys.argv[1]); from nvdocker2.runtime import main;"
           " sys.exit(main(sys.argv[3:], sys.argv[2]))")


def _state(ns: UserNamespace | None, base: Path, bin_dir: Path, *caps: str):
    argv = [*caps, sys.executable, "-I", "-S", "-c", RUNTIME, str(REPO),
            str(base / "nvidia-container-runtime"), "state", "ctr"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin",
           "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(base / "none.toml")}
    if ns is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd="/")
    return ns.run(*argv, env=env)


def _refused(runc: Path, why: str) -> tuple[int, str]:
    return (1, f"nvidia-container-runtime: error: refusing to run {runc}: {why}\n"
               "nvidia-container-runtime: hint: the low-level runtime must belong to root, in"
               " directories only root can write\n")


def test_the_namespaces_own_nobody_cannot_plant_runc_for_the_runtime(ns, planted):
    """Issue 39 (2): `state` (or any pass-through) found nobody's runc first on PATH and ran
    it as the namespace's root: nobody is 65534 there, which passed for the host's root."""
    runc = _runc(planted, "nobody", MAPPED_NOBODY)
    proc = _state(ns, planted, runc.parent)
    why = f"{runc.parent} belongs to uid {OVERFLOW}"
    assert (proc.returncode, proc.stderr) == _refused(runc, why)
    assert not (planted / "marks" / "runc-ran").exists()


def test_the_hosts_root_still_counts_as_root_there(ns, planted):
    """What rootless engines rely on: the host root's runc (65534 there too) runs, since the
    kernel says its owner is unmapped; the same test as above but for the owner."""
    runc = _runc(planted, "root", 0)
    proc = _state(ns, planted, runc.parent)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "runc ran\n", "")
    assert (planted / "marks" / "runc-ran").read_text() == "root\n"


def test_without_cap_fowner_nothing_that_shows_as_the_overflow_uid_is_trusted(ns, planted):
    """The kernel tells the two owners apart only for a holder of CAP_FOWNER: without it, the
    host root's runc is refused too (at /, which shows as 65534 as well)."""
    runc = _runc(planted, "root", 0)
    proc = _state(ns, planted, runc.parent, "setpriv", "--bounding-set=-fowner")
    assert (proc.returncode, proc.stderr) == _refused(runc, "/ is writable by other users")
    assert not (planted / "marks" / "runc-ran").exists()


def test_in_the_initial_namespace_the_same_files_keep_their_old_verdicts(planted):
    root_runc = _runc(planted, "root", 0)
    proc = _state(None, planted, root_runc.parent)
    assert (proc.returncode, proc.stdout) == (0, "runc ran\n")
    runc = _runc(planted, "nobody", MAPPED_NOBODY)
    proc = _state(None, planted, runc.parent)
    assert (proc.returncode, proc.stderr) == _refused(
        runc, f"{runc.parent} belongs to uid {MAPPED_NOBODY}")
    assert (planted / "marks" / "runc-ran").read_text() == "root\n"


SERVE = ("import socket, sys\n"
         "s = socket.socket(socket.AF_UNIX)\n"
         "s.bind(sys.argv[-1][len('unix://'):])\n"
         "s.listen(8)\n"
         "while True:\n"
         "    c, _ = s.accept()\n"
         "    c.close()\n")


def test_doctor_does_not_trust_a_dockerd_of_the_namespaces_nobody(ns, planted):
    """Issue 39 (2): with dockerd down, nobody (65534 in the namespace) serves the socket as a
    process named dockerd with its own PATH. Root's doctor called it trusted and ran nobody's
    runc --version."""
    nobody = planted / "nobody"
    for name in ("runc", "docker-runc"):
        _program(nobody / name, MAPPED_NOBODY, f"touch {planted}/marks/{name}-ran\n"
                 "echo 'runc version 1.1.5'")
    sock = nobody / "docker.sock"
    dockerd = subprocess.Popen(
        ns.argv(OVERFLOW, "/usr/bin/env", "-i", f"PATH={nobody}", "/bin/bash", "-c",
                'exec -a dockerd /usr/bin/python3 -c "$0" -H "$1"', SERVE, f"unix://{sock}"),
        stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert dockerd.poll() is None and time.monotonic() < deadline, "no planted socket"
            time.sleep(0.05)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/",
               "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(planted / "none.toml")}
        proc = ns.run("/bin/sh", "-c", f"cd {REPO} && exec \"$0\" -m nvdocker2 doctor "
                      f"--docker-host unix://{sock} --json", sys.executable, env=env)
    finally:
        dockerd.kill()
        dockerd.wait()
    assert sorted(os.listdir(planted / "marks")) == [], "doctor ran a program nobody planted"
    checks = {r["id"]: r for r in json.loads(proc.stdout)["checks"]}
    trusted = checks["dockerd.trusted"]
    assert trusted["status"] == "fail", trusted
    assert f"belongs to uid {OVERFLOW}, not root" in trusted["detail"]
    assert str(nobody) not in checks["runtime.low-level"]["detail"]
    assert proc.returncode == 1, proc.stderr


def _sh_door(ns: UserNamespace, *paths: Path, caps: tuple[str, ...] = ()) -> list[str]:
    """The sh launchers' door (`trusted`), run inside the namespace as its root."""
    from nvdocker2.runtime.launcher import DOOR

    script = ("set -f\n" + DOOR
              + '\nfor p do if trusted "$p"; then echo ok; else echo "$why"; fi; done\n')
    proc = ns.run(*caps, "/bin/sh", "-c", script, "sh", *map(str, paths), env={})
    assert proc.stderr == ""
    return proc.stdout.splitlines()


def test_the_sh_launchers_door_does_not_trust_the_namespaces_nobody_either(ns, planted):
    """The launchers' own check (issue 39, holes 1 and 2 together): inside the namespace, the
    mapped nobody's runc is refused by the sh door as by the Python one, the host root's runc
    and interpreter pass where the kernel says their owner is unmapped, and nothing that
    shows as 65534 passes without CAP_FOWNER."""
    theirs = _runc(planted, "nobody", MAPPED_NOBODY)
    ours = _runc(planted, "root", 0)
    python = Path(os.path.realpath(sys.executable))
    assert _sh_door(ns, theirs, ours, python) == [
        f"{theirs.parent} belongs to uid {OVERFLOW}", "ok", "ok"]
    assert _sh_door(ns, ours, caps=("setpriv", "--bounding-set=-fowner")) == [
        "/ is writable by other users"]
    assert not (planted / "marks" / "runc-ran").exists()


def test_the_packages_launcher_in_the_namespace_never_runs_nobodys_runc(ns, planted):
    from nvdocker2.runtime.launcher import write_launchers

    theirs = _runc(planted, "nobody", MAPPED_NOBODY)
    bin_dir = planted / "root"
    write_launchers(str(bin_dir), python=os.path.realpath(sys.executable), paths=[str(REPO)])
    env = {"PATH": f"{theirs.parent}:/usr/bin:/bin",
           "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(planted / "none.toml")}
    proc = ns.run(str(bin_dir / "nvidia-container-runtime"), "state", "ctr", env=env)
    assert (proc.returncode, proc.stderr) == _refused(
        theirs, f"{theirs.parent} belongs to uid {OVERFLOW}")
    assert not (planted / "marks" / "runc-ran").exists()
    ours = _runc(planted, "root", 0)
    env["PATH"] = f"{ours.parent}:/usr/bin:/bin"
    proc = ns.run(str(bin_dir / "nvidia-container-runtime"), "state", "ctr", env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "runc ran\n", "")
