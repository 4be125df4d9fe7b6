"""What the program door (nvdocker2/host/run.py) promises, seen by the one who plants a
program, by the program run and by the caller: which file may run and the one line that says
why not, the environment, working directory, descriptors and session a child gets, its
output and exit status, and a program killed and reaped when it overstays or is interrupted.

Runs as root (the suite's unit tests do): files are given to `nobody` (65534) with chown.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from nvdocker2.host import run
from nvdocker2.host.testing import hooks_on

NOBODY = 65534
OTHER = 1000  # a uid or gid that is neither root nor nobody
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to other users")


def program(path: Path, body: str = 'echo "$0 $*"', mode: int = 0o755) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path


def directory(path: Path, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Path:
    path.mkdir()
    path.chmod(mode)
    os.chown(path, uid, gid)
    return path


def children() -> set[int]:
    """The processes this test process has started and not reaped (living or zombie)."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        out.update(int(p) for p in (task / "children").read_text().split())
    return out


# --- which file may run ----------------------------------------------------------------------


def test_a_relative_path_is_never_trusted():
    assert run.unsafe_to_run("usr/bin/env") == "usr/bin/env is not an absolute path"


def test_owner_and_writers_of_the_program_decide(tmp_path):
    prog = program(tmp_path / "prog")
    assert run.unsafe_to_run(prog) is None
    prog.chmod(0o757)
    assert run.unsafe_to_run(prog) == f"{prog} is writable by other users"
    prog.chmod(0o775)  # group-writable: only root's group may write
    assert run.unsafe_to_run(prog) is None
    os.chown(prog, 0, NOBODY)
    assert run.unsafe_to_run(prog) == f"{prog} is writable by other users"
    prog.chmod(0o755)  # another group that cannot write is harmless
    assert run.unsafe_to_run(prog) is None
    os.chown(prog, NOBODY, 0)
    assert run.unsafe_to_run(prog) == f"{prog} belongs to uid {NOBODY}"


def test_a_rootless_caller_trusts_itself_and_root(tmp_path):
    prog = program(tmp_path / "prog")
    assert run.unsafe_to_run(prog, euid=OTHER) is None  # root's program
    os.chown(prog, OTHER, OTHER)
    assert run.unsafe_to_run(prog, euid=OTHER) is None
    assert run.unsafe_to_run(prog) == f"{prog} belongs to uid {OTHER}"  # root trusts no user
    assert run.trusted_uids() == frozenset({0})  # root's namespace: nobody is not root


def test_every_directory_on_the_way_is_checked(tmp_path):
    shared = directory(tmp_path / "shared", 0o777)
    prog = program(shared / "prog")
    assert run.unsafe_to_run(prog) == f"{shared} is writable by other users"
    assert run.unsafe_to_run(f"{tmp_path}/./shared/prog") == f"{shared} is writable by other users"
    shared.chmod(0o1777)  # sticky, like /tmp: root's entry cannot be replaced
    assert run.unsafe_to_run(prog) is None
    os.chown(prog, NOBODY, NOBODY)
    assert run.unsafe_to_run(prog) == f"{shared} is writable by other users"
    owned = directory(tmp_path / "owned", uid=NOBODY, gid=NOBODY)
    assert run.unsafe_to_run(program(owned / "prog")) == f"{owned} belongs to uid {NOBODY}"


def test_what_is_not_a_program_is_named(tmp_path):
    prog = program(tmp_path / "prog")
    assert run.unsafe_to_run(tmp_path) == f"{tmp_path} is not a regular file"
    assert run.unsafe_to_run(f"{tmp_path}/") == f"{tmp_path} is not a regular file"
    assert run.unsafe_to_run(f"{prog}/x") == f"{prog} is not a directory"
    assert run.unsafe_to_run(tmp_path / "missing") == (
        f"cannot read {tmp_path}/missing: No such file or directory")
    assert run.unsafe_to_run("/") == "/ is not a file"


def test_a_directory_is_checked_as_a_path_entry(tmp_path):
    prog = program(tmp_path / "prog")
    assert run.unsafe_to_run(tmp_path, want_dir=True) is None
    assert run.unsafe_to_run("/", want_dir=True) is None
    assert run.unsafe_to_run(prog, want_dir=True) == f"{prog} is not a directory"
    shared = directory(tmp_path / "shared", 0o777)
    assert run.unsafe_to_run(shared, want_dir=True) == f"{shared} is writable by other users"
    assert run.unsafe_to_run(prog) is None  # a file is not asked to be a directory


def test_symlinks_are_followed_and_their_targets_checked(tmp_path):
    real = directory(tmp_path / "real")
    prog = program(real / "prog")
    (tmp_path / "abs").symlink_to(prog)
    (real / "rel").symlink_to("prog")
    (tmp_path / "dir").symlink_to("real")
    for path in (tmp_path / "abs", real / "rel", tmp_path / "dir" / "prog"):
        assert run.unsafe_to_run(path) is None, path
    prog.chmod(0o757)
    assert run.unsafe_to_run(tmp_path / "dir" / "prog") == f"{prog} is writable by other users"
    prog.chmod(0o755)
    os.lchown(tmp_path / "abs", NOBODY, NOBODY)  # nobody's link to root's program
    assert run.unsafe_to_run(tmp_path / "abs") == f"{tmp_path}/abs belongs to uid {NOBODY}"


def test_forty_symbolic_links_are_followed_and_no_more(tmp_path):
    prog = program(tmp_path / "prog")
    previous = prog
    for n in range(41):
        link = tmp_path / f"l{n}"
        link.symlink_to(previous)
        previous = link
    assert run.unsafe_to_run(tmp_path / "l39") is None
    assert run.unsafe_to_run(tmp_path / "l40") == f"{tmp_path}/l40: too many symbolic links"
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert run.unsafe_to_run(tmp_path / "a") == f"{tmp_path}/a: too many symbolic links"


def test_dot_dot_climbs_to_the_real_parent_and_is_checked_there(tmp_path):
    prog = program(tmp_path / "prog")
    directory(tmp_path / "shared", 0o777)
    directory(tmp_path / "sub")
    # Out of a world-writable directory and back: only where the program is counts.
    assert run.unsafe_to_run(f"{tmp_path}/shared/../prog") is None
    assert run.unsafe_to_run(f"{tmp_path}/sub/..", want_dir=True) is None
    assert run.unsafe_to_run(f"{tmp_path}/sub/..") == f"{tmp_path}/sub/.. is not a file"
    prog.chmod(0o757)
    assert run.unsafe_to_run(f"{tmp_path}/sub/../prog") == f"{prog} is writable by other users"
    # Up into a directory anyone can write: not a directory to look programs up in.
    sticky = directory(tmp_path / "sticky", 0o1777)
    directory(sticky / "root")
    assert run.unsafe_to_run(f"{sticky}/root/..", want_dir=True) == (
        f"{sticky} is writable by other users")


@contextlib.contextmanager
def root_dir_seen_as(mode: int = 0o755, uid: int = 0, error: OSError | None = None):
    """`/` as lstat reports it: another mode or owner, or unreadable (a host set up wrongly)."""
    real = os.lstat

    def lstat(path, *args, **kwargs):
        if os.fspath(path) != "/":
            return real(path, *args, **kwargs)
        if error is not None:
            raise error
        fields = list(real("/"))
        fields[0] = stat.S_IFDIR | mode
        fields[4] = uid
        return os.stat_result(fields)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "lstat", lstat)
        yield


def test_a_root_directory_others_can_write_trusts_nothing(tmp_path):
    prog = program(tmp_path / "prog")
    with root_dir_seen_as(0o777):
        assert run.unsafe_to_run(prog) == "/ is writable by other users"
        assert run.unsafe_to_run("/", want_dir=True) == "/ is writable by other users"
    with root_dir_seen_as(uid=OTHER):  # its owner can write it
        assert run.unsafe_to_run(prog) == "/ is writable by other users"
        assert run.unsafe_to_run("/", want_dir=True) == "/ is writable by other users"
    with root_dir_seen_as(error=PermissionError(13, "Permission denied")):
        assert run.unsafe_to_run(prog) == "cannot read /: Permission denied"


# --- in a user namespace that does not map the host's root --------------------------------


@contextlib.contextmanager
def proc_files(tmp_path: Path, uid_map: str | None,
               overflow: tuple[str, str] = ("65534\n", "65533\n")):
    """/proc as a process in a user namespace reads it (overflowuid and overflowgid made to
    differ, to tell them apart); `uid_map` None: no /proc at all."""
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    files = {}
    for real, text in (("/proc/self/uid_map", uid_map), ("/proc/self/gid_map", uid_map),
                       ("/proc/sys/kernel/overflowuid", overflow[0]),
                       ("/proc/sys/kernel/overflowgid", overflow[1])):
        files[real] = proc / os.path.basename(real)
        if uid_map is None:
            files[real].unlink(missing_ok=True)
        else:
            files[real].write_text(text)

    def fake_open(path, *args, **kwargs):
        return open(files.get(path, path), *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "open", fake_open, raising=False)
        mp.setattr(run, "_unmapped", False)  # read /proc again
        yield


def test_in_a_user_namespace_the_overflow_ids_count_as_roots(tmp_path):
    prog = program(tmp_path / "prog")
    os.chown(prog, NOBODY, 0)
    with proc_files(tmp_path, "         0       1000          1\n"):
        assert run.unmapped_owner() == (65534, 65533)
        assert run.trusted_uids(OTHER) == frozenset({0, OTHER, 65534})
        assert run.unsafe_to_run(prog) is None
        os.chown(prog, 0, 0)
        assert run.unsafe_to_run(prog, euid=OTHER) is None
        prog.chmod(0o775)
        assert run.unsafe_to_run(prog) is None  # root's group
        os.chown(prog, 0, 65533)
        assert run.unsafe_to_run(prog) is None  # the overflow group: root's group seen there
        os.chown(prog, 0, 65534)
        assert run.unsafe_to_run(prog) == f"{prog} is writable by other users"


def test_where_root_is_root_or_proc_is_unreadable_the_overflow_ids_are_nobody(tmp_path):
    prog = program(tmp_path / "prog")
    os.chown(prog, NOBODY, 0)
    for uid_map in ("         0          0 4294967295\n", None):
        with proc_files(tmp_path, uid_map):
            assert run.unmapped_owner() is None
            assert run.unsafe_to_run(prog) == f"{prog} belongs to uid {NOBODY}"
    with proc_files(tmp_path, "0 1000 1\n", overflow=("65534\n", "")):
        assert run.unmapped_owner() is None  # unreadable: nothing more is trusted


# --- finding a program -----------------------------------------------------------------------


def test_a_program_planted_earlier_on_path_is_passed_over(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    evil = directory(tmp_path / "evil", uid=NOBODY, gid=NOBODY)
    program(evil / "prog", f"echo planted >> {marker}")
    os.chown(evil / "prog", NOBODY, NOBODY)
    noexec = directory(tmp_path / "noexec")
    program(noexec / "prog", f"echo noexec >> {marker}", mode=0o644)
    good = directory(tmp_path / "good")
    prog = program(good / "prog")
    monkeypatch.setenv("PATH", f"{evil}:{noexec}:{good}")
    assert run.safe_which("prog") == str(prog)
    assert run.find("prog") == str(prog)
    ran = run.run(["prog", "a", "b"], timeout=30)
    assert (ran.returncode, ran.stdout, ran.argv) == (0, f"{prog} a b\n".encode(),
                                                      (str(prog), "a", "b"))
    assert not marker.exists()


def test_a_program_is_looked_up_on_the_path_given(tmp_path, monkeypatch):
    prog = program(directory(tmp_path / "bin") / "prog")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert run.safe_which("prog") is None
    assert run.safe_which("prog", path=f"rel:{tmp_path}/bin") == str(prog)
    assert run.safe_which(str(prog), path="") == str(prog)  # a path is checked as it is
    assert run.safe_which("./prog", path=f"{tmp_path}/bin") is None
    assert run.first_safe(["", str(tmp_path / "missing"), str(prog)]) == str(prog)
    assert run.find("prog") is None
    assert run.find("prog", also=[str(tmp_path / "missing"), str(prog)]) == str(prog)
    assert run.run(["prog"], timeout=30, check_path=str(tmp_path / "bin")).argv == (str(prog),)
    # A program given by path is run as it is: one that cannot be executed fails at the exec.
    noexec = program(tmp_path / "noexec", mode=0o644)
    with pytest.raises(PermissionError):
        run.run([str(noexec)], timeout=30)
    monkeypatch.delenv("PATH")
    found = run.safe_which("sh")
    assert found is not None and os.path.dirname(found) in SYSTEM_PATH.split(":")


def test_refusals_say_why_in_one_line(tmp_path, monkeypatch):
    evil = directory(tmp_path / "evil", uid=NOBODY, gid=NOBODY)
    planted = program(evil / "prog")
    monkeypatch.chdir(evil)
    with pytest.raises(run.NotRun) as err:
        run.resolve("./prog")
    assert (str(err.value), err.value.missing) == ("./prog: not an absolute path", False)
    with pytest.raises(run.NotRun) as err:
        run.resolve(str(tmp_path / "missing"))
    assert (str(err.value), err.value.missing) == (f"{tmp_path}/missing not found", True)
    assert err.value.reason == str(err.value)
    with pytest.raises(run.NotRun) as err:
        run.resolve(str(planted))
    why = f"{evil} belongs to uid {NOBODY}"
    assert (str(err.value), err.value.reason, err.value.missing) == (
        f"not run: {why}", why, False)
    with pytest.raises(run.NotRun) as err:
        run.resolve("prog", path=f"/nonexistent:{evil}")
    assert (str(err.value), err.value.missing) == (f"prog not run: {why}", False)
    monkeypatch.setenv("PATH", f"/nonexistent:{evil}")
    with pytest.raises(run.NotRun) as err:
        run.run(["prog"], timeout=30)
    assert str(err.value) == f"prog not run: {why}"
    # The working directory is never searched, not even when PATH names it.
    monkeypatch.setenv("PATH", ".::rel")
    with pytest.raises(run.NotRun) as err:
        run.run(["prog"], timeout=30)
    assert (str(err.value), err.value.missing) == ("prog not found on PATH", True)


def test_the_names_of_python_interpreters(tmp_path):
    for name in ("python", "python3", "/usr/bin/python3.11"):
        assert run.is_python(name) is True, name
    for name in ("pythonx", "python3-config", "ipython", "perl5.36", "jython3", "sh"):
        assert run.is_python(name) is False, name


# --- what the program gets -------------------------------------------------------------------


def test_the_environment_a_program_gets(tmp_path, monkeypatch):
    good = directory(tmp_path / "bin")
    shared = directory(tmp_path / "shared", 0o777)
    sticky = directory(tmp_path / "sticky", 0o1777)
    directory(sticky / "root")
    monkeypatch.setenv("PATH", f"{good}:/usr/bin:{shared}:rel:{good}:{sticky}/root/..:"
                               f"{tmp_path}/missing:/bin")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("NVD2_PROBE", "1")
    for k in [k for k in os.environ if k.startswith("NVD2_") and k != "NVD2_PROBE"]:
        monkeypatch.delenv(k)
    knobs = {"NVD2_PROBE": "1"} if hooks_on() else {}
    ran = run.run(["env"], timeout=30, text=True, env={"GIVEN": "1"})
    seen = dict(line.split("=", 1) for line in ran.stdout.splitlines())
    assert seen == {"PATH": f"{good}:/usr/bin:/bin", "GIVEN": "1", **knobs}
    # A rootless caller's own systemd and D-Bus are passed on.
    monkeypatch.setattr(os, "geteuid", lambda: OTHER)
    assert run.environment() == {"PATH": f"{good}:/usr/bin:/bin",
                                 "XDG_RUNTIME_DIR": "/run/user/1000", **knobs}
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus")
    assert run.environment() == {"PATH": f"{good}:/usr/bin:/bin",
                                 "XDG_RUNTIME_DIR": "/run/user/1000",
                                 "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
                                 **knobs}


def test_with_no_safe_path_entry_a_program_gets_the_system_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(directory(tmp_path / "shared", 0o777)))
    assert run.safe_path() == ""
    assert run.environment() == {
        "PATH": SYSTEM_PATH, **({k: v for k, v in os.environ.items() if k.startswith("NVD2_")}
                                if hooks_on() else {})}
    assert run.safe_path("/:/") == "/"


def test_a_program_starts_in_root_in_its_own_session_with_only_its_descriptors(tmp_path):
    r, w = os.pipe()
    os.set_inheritable(w, True)
    try:
        ran = run.run(["sh", "-c", f"pwd; [ -e /proc/$$/fd/{w} ] && echo open || echo closed; "
                                   "echo $$; cut -d' ' -f6 /proc/$$/stat"], timeout=30)
    finally:
        os.close(r)
        os.close(w)
    cwd, fd, pid, sid = ran.stdout.decode().split()
    assert (cwd, fd, sid) == ("/", "closed", pid)
    assert int(sid) != os.getsid(0)


def test_output_input_and_exit_status(tmp_path):
    both = ["sh", "-c", r"printf 'out\377\n'; printf 'err\377\n' >&2; exit 3"]
    ran = run.run(both, timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr) == (3, b"out\xff\n", b"err\xff\n")
    ran = run.run(both, timeout=30, text=True)
    assert (ran.stdout, ran.stderr) == ("out\ufffd\n", "err\ufffd\n")
    ran = run.run(both, timeout=30, merge_stderr=True)
    assert (ran.stdout, ran.stderr) == (b"out\xff\nerr\xff\n", b"")
    ran = run.run(both, timeout=30, merge_stderr=True, text=True)
    assert (ran.stdout, ran.stderr) == ("out\ufffd\nerr\ufffd\n", "")
    assert run.run(["cat"], timeout=30, input="typed").stdout == b"typed"
    assert run.run(["cat"], timeout=30).stdout == b""  # stdin closed, not the caller's
    ran = run.as_run(["cat"], timeout=30, input=b"typed")
    assert (ran.stdout, ran.stderr) == (b"typed", b"")
    assert run.as_run(["echo", "x"], timeout=30, text=True).stdout == "x\n"
    assert repr(run.run(["true"], timeout=30)) == (
        f"Ran(argv=({run.resolve('true')!r},), returncode=0)")


def test_python_gets_one_dash_i(tmp_path):
    ran = run.run([sys.executable, "-I", "-c", "import sys; print(sys.flags.isolated)"],
                  timeout=60, text=True)
    assert ran.argv == (sys.executable, "-I", "-c", "import sys; print(sys.flags.isolated)")
    assert ran.stdout == "1\n"


def test_a_program_past_its_timeout_is_killed_and_reaped():
    before = children()
    with pytest.raises(run.Timeout) as err:
        run.run(["sleep", "600"], timeout=0.5)
    assert str(err.value) == f"{run.resolve('sleep')} did not finish within 0.5s"
    assert children() == before


class Interrupted(Exception):
    pass


def test_a_program_interrupted_while_waited_for_is_killed_and_reaped():
    """Ctrl-C (here: an exception from a signal handler) while the door waits."""
    def waiting(frame) -> bool:
        while frame is not None:
            if frame.f_code.co_name == "communicate":
                return True
            frame = frame.f_back
        return False

    def interrupt(signum, frame):
        if waiting(frame):
            raise Interrupted
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    before = children()
    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(Interrupted):
            run.run(["sleep", "600"], timeout=600)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert children() == before


# --- replacing this process: exec_program -----------------------------------------------------


def exec_in_child(program_: str, argv: list[str], env: dict | None = None,
                  cwd: Path | None = None) -> tuple[int, str]:
    """(exit status, output) of a forked child that prints "before" without flushing, then
    calls exec_program; a NotRun is printed and exits 99 (what was buffered is lost)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.dup2(w, 1)
            os.dup2(w, 2)
            if cwd is not None:
                os.chdir(cwd)
            sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
            sys.stdout.write("before\n")
            run.exec_program(program_, argv, env)
        except run.NotRun as err:
            os.write(2, f"NotRun(missing={err.missing}): {err}\n".encode())
        finally:
            os._exit(99)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    return os.waitstatus_to_exitcode(status), out


def test_exec_program_looks_up_on_the_given_path_and_passes_that_environment(
        tmp_path, monkeypatch):
    bindir = directory(tmp_path / "bin")
    prog = program(bindir / "prog",
                   'echo "$0 $*"; /usr/bin/env | /usr/bin/grep -v ^PWD= | /usr/bin/sort')
    monkeypatch.setenv("MARK", "caller")
    env = {"PATH": str(bindir), "ONLY": "1"}
    assert exec_in_child("prog", ["prog", "a"], env) == (
        0, f"before\n{prog} a\nONLY=1\nPATH={bindir}\n")
    status, out = exec_in_child("./prog", ["prog"], env, cwd=bindir)
    assert (status, out.splitlines()[:2]) == (0, ["before", f"{prog} "])
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    status, out = exec_in_child("prog", ["prog"])  # the caller's own environment
    assert status == 0 and "MARK=caller" in out.splitlines(), out


def test_exec_program_refuses_a_missing_or_planted_program(tmp_path):
    evil = directory(tmp_path / "evil", 0o777)
    program(evil / "prog")
    env = {"PATH": f"{evil}:/usr/bin:/bin"}
    assert exec_in_child("prog", ["prog"], env) == (
        99, f"NotRun(missing=False): prog not run: {evil} is writable by other users\n")
    assert exec_in_child("nvd2-missing", ["x"], env) == (
        99, "NotRun(missing=True): nvd2-missing not found on PATH\n")


# --- fork_exec: direct mode's ldconfig -------------------------------------------------------


@contextlib.contextmanager
def stdin_on_a_pipe():
    """This process's stdin is a pipe for a while (a child must not inherit it)."""
    r, w = os.pipe()
    saved = os.dup(0)
    os.dup2(r, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, r, w):
            os.close(fd)


def wait_child(pid: int, r: int) -> tuple[int, bytes]:
    """(exit status, all the child wrote); the read fails if this process kept the pipe's
    write end (the output would never end)."""
    _, status = os.waitpid(pid, 0)
    os.set_blocking(r, False)
    chunks = []
    try:
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
    return os.waitstatus_to_exitcode(status), b"".join(chunks)


def test_fork_exec_runs_the_program_on_null_stdin_with_its_output_on_the_pipe(monkeypatch):
    monkeypatch.setenv("MARK", "caller")
    script = ("echo out; echo err >&2; readlink /proc/self/fd/0; "
              "/usr/bin/env | grep -v ^PWD= | sort; exit 1")
    # Its exit status comes back through waitpid (not 0: were this process itself ever
    # replaced by the program, the test run's own status would say so).
    with stdin_on_a_pipe():
        pid, r = run.fork_exec(["/bin/sh", "-c", script], {"ONLY": "1"})
    assert wait_child(pid, r) == (1, b"out\nerr\n/dev/null\nONLY=1\n")


def test_fork_exec_runs_prepare_in_the_child_and_reports_its_failure(tmp_path):
    pid, r = run.fork_exec(["/bin/sh", "-c", "pwd"], {}, lambda: os.chdir(tmp_path))
    assert wait_child(pid, r) == (0, f"{tmp_path}\n".encode())
    assert os.getcwd() != str(tmp_path)

    def prepare():
        raise RuntimeError("cannot confine " + os.fsdecode(b"/lib/\xff"))

    pid, r = run.fork_exec(["/bin/sh", "-c", "echo exec"], {}, prepare)
    assert wait_child(pid, r) == (126, b"nvdocker2 child: cannot confine /lib/?\n")


def test_fork_exec_forks_nothing_for_a_program_it_will_not_run(tmp_path):
    evil = directory(tmp_path / "evil", 0o777)
    prog = program(evil / "prog")
    before = children()
    for argv, message in ((["sh", "-c", "true"], "sh: not an absolute path"),
                          ([str(tmp_path / "missing")], f"{tmp_path}/missing not found"),
                          ([str(prog)], f"not run: {evil} is writable by other users")):
        with pytest.raises(run.NotRun) as err:
            run.fork_exec(argv, {})
        assert str(err.value) == message
    assert children() == before
