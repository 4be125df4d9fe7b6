"""The sh launchers against what another user can plant (issue 39, holes 1 and 6): a runc or
python3 owned by `nobody` or in a directory others can write, an empty PATH entry with a
hostile working directory, and the launcher reached through a symlink in a directory
`nobody` owns. Real processes run as root, with real files given to `nobody`; every planted
program appends to a marker file when it runs, and no marker may appear: the launcher runs
the trusted program, or exits 1 with one `error:` line and a `hint:` line.

Both sets are run: the packages' (written by `python3 -m nvdocker2.runtime.launcher`, the
interpreter named in it) and pip's (nvdocker2/runtime/bin, the interpreter read from the
`nvdocker2` console script beside it)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from .test_launcher import pip_prefix

from nvdocker2.host.run import unsafe_to_run
from nvdocker2.runtime.launcher import CLI_NAME, DOOR, write_cli_launcher, write_launchers

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid if "nogroup" in {g.gr_name for g in grp.getgrall()} \
    else pwd.getpwnam("nobody").pw_gid
RUNTIME = "nvidia-container-runtime"
HOOK = "nvidia-container-runtime-hook"


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("prerequisite missing under CI: root, to give files to nobody")
        pytest.skip("needs root to give files to nobody")


def program(path: Path, text: str, owner: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    os.chown(path, owner, -1)
    return path


def planted(path: Path, marker: Path, owner: int = NOBODY) -> Path:
    return program(path, f'#!/bin/sh\necho "$0 $*" >> {marker}\n', owner)


def nobody_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    os.chown(path, NOBODY, NOGROUP)
    return path


class Host:
    """Launchers of one kind in root's directory, a trusted runc, a marker for planted code."""

    def __init__(self, tmp: Path, kind: str):
        self.tmp, self.kind = tmp, kind
        self.marker = tmp / "planted-ran"
        self.trusted_runc = program(tmp / "low" / "runc",
                                    '#!/bin/sh\necho "trusted runc $*"\n')
        if kind == "package":
            self.bin = tmp / "bin"
            self.bin.mkdir()
            write_launchers(str(self.bin), python=sys.executable)
        else:
            self.bin = pip_prefix(tmp, "7.7.7-pip")
        self.env = {"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(tmp / "none.toml")}

    def run(self, exe, *args, path: str, cwd: Path | None = None):
        return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60,
                              env={**self.env, "PATH": path}, cwd=str(cwd or self.tmp))

    def no_plant_ran(self):
        assert not self.marker.exists(), self.marker.read_text()


def refused(proc, prog: str, *why: str):
    """Exit 1, one error line saying why, one hint line."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 2 and lines[0].startswith(f"{prog}: error: "), proc.stderr
    assert all(w in lines[0] for w in why), lines[0]
    assert lines[1].startswith(f"{prog}: hint: ")


@pytest.fixture(params=["package", "pip"])
def host(request, tmp_path):
    return Host(tmp_path, request.param)


def test_a_runc_of_nobodys_first_on_path_never_runs(host):
    evil = nobody_dir(host.tmp / "evil")
    runc = planted(evil / "runc", host.marker)
    for verb in (["state", "ctr"], ["delete", "ctr"], ["kill", "ctr", "9"]):
        proc = host.run(host.bin / RUNTIME, *verb, path=f"{evil}:{host.tmp / 'low'}:/usr/bin:/bin")
        refused(proc, RUNTIME, f"refusing to run {runc}: {evil} belongs to uid {NOBODY}")
        host.no_plant_ran()


def test_a_runc_in_a_directory_a_group_can_write_never_runs(host):
    shared = host.tmp / "shared"
    shared.mkdir()
    os.chown(shared, 0, NOGROUP)
    shared.chmod(0o775)
    runc = planted(shared / "runc", host.marker, owner=0)
    proc = host.run(host.bin / RUNTIME, "start", "ctr",
                    path=f"{shared}:{host.tmp / 'low'}:/usr/bin:/bin")
    refused(proc, RUNTIME, f"refusing to run {runc}: {shared} is writable by other users")
    host.no_plant_ran()


def test_an_empty_path_entry_never_searches_a_hostile_working_directory(host):
    """`:` first on PATH is the working directory, here nobody's, with a runc and a bundle
    mark of its own, and one of root's naming the planted runc: all passed over."""
    cwd = nobody_dir(host.tmp / "cwd")
    planted(cwd / "runc", host.marker)
    planted(cwd / "docker-runc", host.marker)
    mark = cwd / ".nvidia-container-runtime-plain"
    mark.write_text(f"{cwd / 'runc'}\n")
    for owner in (NOBODY, 0):
        os.chown(mark, owner, -1)
        for path in (f":{host.tmp / 'low'}:/usr/bin:/bin", f"{host.tmp / 'low'}::.:/bin"):
            proc = host.run(host.bin / RUNTIME, "state", "ctr", path=path, cwd=cwd)
            assert (proc.returncode, proc.stdout) == (0, "trusted runc state ctr\n"), proc.stderr
            host.no_plant_ran()


def test_the_mark_create_leaves_names_the_runc_it_checked(host):
    """`create`'s mark in root's bundle names the runc that passed the door: the
    pass-throughs run from the bundle exec it, whatever PATH holds then."""
    bundle = host.tmp / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"ociVersion": "1.0.2", "process": {"env": []},'
                                        ' "root": {"path": "rootfs"}}')
    low = f"{host.tmp / 'low'}:/usr/bin:/bin"
    proc = host.run(host.bin / RUNTIME, "create", "--bundle", str(bundle), "ctr", path=low)
    assert proc.returncode == 0, proc.stderr
    assert (bundle / ".nvidia-container-runtime-plain").read_text() == f"{host.trusted_runc}\n"
    evil = nobody_dir(host.tmp / "evil")
    planted(evil / "runc", host.marker)
    proc = host.run(host.bin / RUNTIME, "delete", "ctr", path=f"{evil}:{low}", cwd=bundle)
    assert (proc.returncode, proc.stdout) == (0, "trusted runc delete ctr\n"), proc.stderr
    host.no_plant_ran()


def test_an_interpreter_others_could_replace_never_runs(tmp_path):
    """The packages' runtime launcher names its interpreter when it is built; it is still
    checked before the slow path runs it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    py = planted(shared / "python3", tmp_path / "planted-ran", owner=0)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    write_launchers(str(bin_), python=str(py))
    for args in (["create", "--bundle", str(tmp_path), "ctr"], ["--version"]):
        proc = subprocess.run([str(bin_ / RUNTIME), *args], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
        refused(proc, RUNTIME, f"refusing to run {py}: {shared} is writable by other users")
    assert not (tmp_path / "planted-ran").exists()


def test_our_cli_launcher_never_runs_an_interpreter_others_could_replace(tmp_path):
    """LXC's mount hook runs nvidia-container-cli from PATH as root: our launcher checks its
    interpreter (and its own file) as the runtime's does, and runs nothing it refuses."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    py = planted(shared / "python3", tmp_path / "planted-ran", owner=0)
    cli = tmp_path / "libexec"
    cli.mkdir()
    write_cli_launcher(str(cli), python=str(py))
    proc = subprocess.run([str(cli / CLI_NAME), "--version"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    refused(proc, CLI_NAME, f"refusing to run {py}: {shared} is writable by other users")
    # reached through a link in nobody's directory, its own file is checked (links followed)
    good = tmp_path / "good"
    good.mkdir()
    write_cli_launcher(str(good))
    evil = nobody_dir(tmp_path / "evil")
    program(evil / CLI_NAME, (good / CLI_NAME).read_text(), NOBODY)
    proc = subprocess.run([str(evil / CLI_NAME), "--version"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    refused(proc, CLI_NAME, f"refusing to run from {evil / CLI_NAME}: {evil}")
    assert not (tmp_path / "planted-ran").exists()


@pytest.mark.parametrize("name", [RUNTIME, HOOK])
def test_pips_launcher_through_a_link_in_nobodys_directory_runs_its_own_python(tmp_path, name):
    """Reached through a link in a directory nobody owns, beside a planted `nvdocker2` console
    script and `python3`: the interpreter is the one beside the launcher's own file."""
    host = Host(tmp_path, "pip")
    evil = nobody_dir(tmp_path / "evil")
    py = planted(evil / "python3", host.marker)
    program(evil / "nvdocker2", f"#!{py}\n", NOBODY)
    (evil / name).symlink_to(host.bin / name)
    os.lchown(evil / name, NOBODY, NOGROUP)
    proc = host.run(evil / name, "--version", path=f"{evil}:/usr/bin:/bin", cwd=evil)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{name} version 7.7.7-pip (nvdocker2)\n")
    host.no_plant_ran()
    # without the console script beside its own file, python3 on PATH: nobody's is refused
    (host.bin / "nvdocker2").unlink()
    proc = host.run(evil / name, "--version", path=f"{evil}:/usr/bin:/bin", cwd=evil)
    refused(proc, name, f"refusing to run {py}: {evil} belongs to uid {NOBODY}")
    host.no_plant_ran()


def test_pips_hook_never_runs_nobodys_python3_from_path(tmp_path):
    host = Host(tmp_path, "pip")
    (host.bin / "nvdocker2").unlink()
    evil = nobody_dir(tmp_path / "evil")
    py = planted(evil / "python3", host.marker)
    for path in (f"{evil}:/usr/bin:/bin", ":/usr/bin:/bin"):
        proc = host.run(host.bin / HOOK, "poststop", path=path, cwd=evil)
        if path.startswith(":"):  # the working directory's python3 is never looked at
            assert (proc.returncode, proc.stderr) == (0, "")
        else:
            refused(proc, HOOK, f"refusing to run {py}: {evil} belongs to uid {NOBODY}")
        host.no_plant_ran()


# --- the door's rules in sh agree with Python's -------------------------------------------------


def test_the_sh_door_agrees_with_unsafe_to_run(tmp_path):
    ok = tmp_path / "ok"
    ok.mkdir()
    program(ok / "x", "#!/bin/sh\n")
    program(ok / "theirs", "#!/bin/sh\n", NOBODY)
    group = tmp_path / "group"
    group.mkdir()
    os.chown(group, 0, NOGROUP)
    group.chmod(0o775)
    program(group / "x", "#!/bin/sh\n")
    roots = tmp_path / "roots"
    roots.mkdir()
    roots.chmod(0o775)  # group-writable, but by root's group
    program(roots / "x", "#!/bin/sh\n")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    program(sticky / "root", "#!/bin/sh\n")
    program(sticky / "theirs", "#!/bin/sh\n", NOBODY)
    evil = nobody_dir(tmp_path / "evil")
    (evil / "link").symlink_to(ok / "x")
    (ok / "rel").symlink_to("x")
    (ok / "up").symlink_to("../ok/x")
    (ok / "chain").symlink_to(ok / "up")
    (ok / "toevil").symlink_to(evil / "link")
    (ok / "dir").symlink_to(ok)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    writable = program(ok / "writable", "#!/bin/sh\n")
    writable.chmod(0o757)
    paths = [ok / "x", ok / "theirs", group / "x", roots / "x", sticky / "root",
             sticky / "theirs", evil / "link", ok / "rel", ok / "up", ok / "chain",
             ok / "toevil", f"{ok}/dir/x", f"{ok}/dir/../ok/x", f"{group}/../ok/x",
             f"{ok}/../ok/dir/../group/x", tmp_path / "loop", writable, ok, ok / "missing",
             "relative/x", "/usr/bin/env", sys.executable]
    script = ("set -f\n" + DOOR + '\nfor p do\n    if trusted "$p"; then echo ok; '
              'else echo "$why"; fi\ndone\n')
    proc = subprocess.run(["/bin/sh", "-c", script, "sh", *map(str, paths)],
                          capture_output=True, text=True, timeout=60, env={})
    assert proc.stderr == ""
    got = proc.stdout.splitlines()
    for p, line in zip(paths, got):
        want = unsafe_to_run(str(p))
        if want is None:
            assert line == "ok", (p, line)
        elif want.startswith("cannot read") or "not a" in want or "symbolic" in want:
            assert line != "ok", (p, want)  # refused, in the sh's own words
        else:
            assert line == want, p
    assert len(got) == len(paths)
