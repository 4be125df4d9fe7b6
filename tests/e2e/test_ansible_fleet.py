"""The Ansible collection nvdocker2.gpu on a fleet (reference §10): real `ansible-playbook` against
five local-connection hosts, each with its own live private dockerd (its own daemon.json,
socket, pidfile and nvdocker2 state dir; reload by signal):

    alpha, bravo, delta  good hosts, each daemon.json in its own style
    charlie              dockerd runs with --default-runtime=runc, so it refuses the file
                         that --set-default makes (a key also given as a flag)
    echo                 dockerd stopped

The module runs on the Python of the Ansible virtual environment, which has none of
nvdocker2's libraries. ansible-core comes from scripts/ansible-test.sh (.venv-ansible, pinned) or
$NVDOCKER2_ANSIBLE_BIN (a directory holding ansible-playbook, e.g. /usr/bin for Debian's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from dockerd_cli import make_stand_ins, systemd_env, tcp_host
from privatedockerd import PrivateDockerd

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "ansible"
COLLECTION = COLLECTIONS / "ansible_collections" / "nvdocker2" / "gpu"
HERE = Path(__file__).resolve().parent / "ansible"
NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
MODULE_TASK = "nvdocker2.gpu.gpu_host : Configure the runtime"
GOOD = ("alpha", "bravo", "delta")
HOSTS = ("alpha", "bravo", "charlie", "delta", "echo")
ORIGINAL = {
    "alpha": b'{\n  "debug": true,\n  "log-level": "info"\n}\n',
    "bravo": b'{\n\t"max-concurrent-downloads": 3\n}',
    "charlie": b"{}\n",
    "delta": b'{"max-concurrent-uploads": 2}\r\n',
    "echo": b'{\n    "log-level": "warn"\n}\n',
}
FLAGS = {"charlie": ["--default-runtime=runc"]}


def _unmet(message: str) -> None:
    """A missing prerequisite: a failure under CI=true, else a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _ansible_bin() -> Path:
    where = Path(os.environ.get("NVDOCKER2_ANSIBLE_BIN") or REPO / ".venv-ansible" / "bin")
    if not (where / "ansible-playbook").exists():
        _unmet(f"ansible-playbook not found in {where} (run: scripts/ansible-test.sh sanity)")
    return where


class Fleet:
    def __init__(self, root: Path, ansible_bin: Path) -> None:
        self.root = root
        self.bin = ansible_bin
        self.daemons: dict[str, PrivateDockerd] = {}
        self.host_vars: dict[str, dict] = {}  # per host, over the defaults below
        self.runs = 0

    def state_dir(self, host: str) -> Path:
        return self.root / f"state-{host}"

    def interpreter(self) -> str:
        # The Python beside ansible-playbook: the Ansible venv's (or /usr/bin/python3 for
        # Debian's ansible-core).
        for candidate in (self.bin / "python3", self.bin / "python"):
            if candidate.exists():
                return str(candidate)
        return "/usr/bin/python3"

    def write_inventory(self, order=HOSTS) -> Path:
        hosts = {}
        for name in order:
            d = self.daemons.get(name)  # None: a host of another engine, all in host_vars
            hosts[name] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": self.interpreter(),
                "gpu_host_state_dir": str(self.state_dir(name)),
                "gpu_host_timeout": 20,
                "gpu_host_executable": str(NVDOCKER2),
                **({"gpu_host_config": str(d.config_file),
                    "gpu_host_docker_host": d.host,
                    "gpu_host_pidfile": str(d.pidfile),
                    "gpu_host_reload": "signal",
                    "gpu_host_set_default": True} if d else {}),
                **self.host_vars.get(name, {}),
            }
        path = self.root / "inventory.yml"
        path.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": hosts}}}}))
        return path

    def play(self, playbook: Path, *args: str, order=HOSTS) -> "Run":
        self.runs += 1
        record = self.root / f"record-{self.runs}.jsonl"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DOCKER_HOST", "NVDOCKER2_STATE_DIR", "NVDOCKER2_DEBUG")
        }
        env.update(
            ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
            ANSIBLE_CALLBACK_PLUGINS=str(HERE / "callback_plugins"),
            ANSIBLE_CALLBACKS_ENABLED="record",
            ANSIBLE_LOCAL_TEMP=str(self.root / "ansible-tmp"),
            ANSIBLE_REMOTE_TEMP=str(self.root / "ansible-remote-tmp"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_HOST_KEY_CHECKING="False",
            ANSIBLE_RETRY_FILES_ENABLED="False",
            NVD2_ANSIBLE_RECORD=str(record),
            # The managed hosts' environment must not steer the module (it ignores these).
            DOCKER_HOST="unix:///nonexistent/docker.sock",
            NVDOCKER2_STATE_DIR=str(self.root / "must-not-be-used"),
        )
        inventory = self.write_inventory(order)
        started = time.monotonic()
        proc = subprocess.run(
            [str(self.bin / "ansible-playbook"), "-i", str(inventory), str(playbook), *args],
            capture_output=True, text=True, timeout=600, env=env, check=False,
        )
        return Run(proc, record, time.monotonic() - started)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, record: Path, seconds: float) -> None:
        self.proc = proc
        self.seconds = seconds
        self.events = [json.loads(line) for line in record.read_text().splitlines()] \
            if record.exists() else []
        stats = [e["stats"] for e in self.events if "stats" in e]
        self.stats = stats[-1] if stats else {}

    def result(self, host: str, task: str = MODULE_TASK) -> dict:
        found = [e for e in self.events if e.get("host") == host and e.get("task") == task]
        assert found, f"no result of {task!r} for {host}\n{self.output()}"
        return {"status": found[-1]["status"], **found[-1]["result"]}

    def tasks_of(self, host: str) -> list[str]:
        return [e["task"] for e in self.events if e.get("host") == host]

    def output(self) -> str:
        return self.proc.stdout[-6000:] + self.proc.stderr[-3000:]


@pytest.fixture(scope="module")
def fleet(e2e_prerequisites, tmp_path_factory):
    ansible_bin = _ansible_bin()
    root = tmp_path_factory.mktemp("fleet")
    f = Fleet(root, ansible_bin)
    try:
        for name in HOSTS:
            d = PrivateDockerd(FLAGS.get(name, ()), config=ORIGINAL[name])
            f.daemons[name] = d
            d.start()
        f.daemons["echo"].stop()
        yield f
    finally:
        for d in f.daemons.values():
            d.cleanup()
        print(f"\nfleet: {f.runs} ansible-playbook runs")


def baked_bin(dest: Path, stand_ins: Path, env: dict) -> Path:
    """A bin directory of wrappers, one per program in `stand_ins`, that run it with `env` set:
    the way a test's stand-in gets its variables through the module's allow-list."""
    dest.mkdir(parents=True)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    for program in stand_ins.iterdir():
        wrapper = dest / program.name
        wrapper.write_text(f"#!/bin/sh\n{exports}exec {shlex.quote(str(program))} \"$@\"\n")
        wrapper.chmod(0o755)
    return dest


def _files(fleet: Fleet) -> dict[str, bytes]:
    return {name: d.config_file.read_bytes() for name, d in fleet.daemons.items()}


def _backups(fleet: Fleet, host: str) -> list[str]:
    d = fleet.state_dir(host) / "backups"
    return sorted(p.name for p in d.glob("*.meta.json")) if d.exists() else []


def _runtimes(fleet: Fleet, host: str) -> dict:
    return fleet.daemons[host].info().get("Runtimes") or {}


def test_the_managed_python_lacks_nvdocker2s_libraries(fleet):
    probe = subprocess.run([fleet.interpreter(), "-c", "import typer"], capture_output=True)
    assert probe.returncode != 0


def test_check_apply_reapply_and_absent_on_the_fleet(fleet):
    started = time.monotonic()
    playbook = HERE / "fleet.yml"

    # --check --diff: exact changed per host, the runtime in the diff, nothing written.
    check = fleet.play(playbook, "--check", "--diff")
    assert _files(fleet) == ORIGINAL, check.output()
    assert not any(fleet.state_dir(h).exists() for h in HOSTS)
    assert not (fleet.root / "must-not-be-used").exists()
    predicted = {}
    for host in GOOD:
        r = check.result(host)
        assert r["status"] == "ok" and r["changed"] is True and r["dry_run"] is True, r
        assert r["diff"]["before"] == ORIGINAL[host].decode()
        after = r["diff"]["after"]
        assert '"nvidia"' in after and '"default-runtime": "nvidia"' in after
        assert '+' in r["unified_diff"] and '"nvidia"' in r["unified_diff"]
        assert check.stats[host]["changed"] == 1 and check.stats[host]["failures"] == 0
        predicted[host] = r["diff"]["after"]
    assert '"nvidia": {' in check.proc.stdout  # the diff is shown per host
    # The dry run runs the flag check: charlie fails in check mode as its apply will.
    r = check.result("charlie")
    assert r["status"] == "failed" and r["rc"] == 2 and r["rolled_back"] is False
    assert r["msg"].startswith(f'error: {fleet.daemons["charlie"].config_file}: "default-runtime" '
                               "(flag --default-runtime) also set on the command line of dockerd")
    r = check.result("echo")
    assert r["status"] == "failed" and r["rc"] == 3
    assert r["msg"].startswith("error: dockerd does not answer")

    # Apply: good hosts verified by their dockerd; charlie refused with the reason, its file
    # byte-identical; echo fails with exit 3's message, nothing written.
    apply = fleet.play(playbook, "--diff")
    assert apply.proc.returncode != 0
    for host in GOOD:
        r = apply.result(host)
        assert r["status"] == "ok" and r["changed"] is True and r["verified"] is True, r
        assert r["reload"] == "signal" and r["rc"] == 0 and r["rolled_back"] is False
        written = fleet.daemons[host].config_file.read_bytes()
        assert written.decode() == predicted[host], "check mode's after is what apply wrote"
        path = json.loads(written)["runtimes"]["nvidia"]["path"]
        info = fleet.daemons[host].info()
        assert info["Runtimes"]["nvidia"]["path"] == path and info["DefaultRuntime"] == "nvidia"
        assert len(_backups(fleet, host)) == 1
    r = apply.result("charlie")
    assert r["status"] == "failed" and r["rc"] == 2 and r["rolled_back"] is False
    assert "also set on the command line of dockerd" in r["msg"]
    assert r["hint"].startswith("remove the key from daemon.json, or the flag")
    assert "nvidia" not in _runtimes(fleet, "charlie")
    r = apply.result("echo")
    assert r["status"] == "failed" and r["rc"] == 3 and r["rolled_back"] is False
    assert r["msg"].startswith("error: dockerd does not answer on ")
    for host in ("charlie", "echo"):
        assert fleet.daemons[host].config_file.read_bytes() == ORIGINAL[host]
        assert _backups(fleet, host) == []
        assert apply.stats[host]["failures"] == 1

    # Second apply: changed=0 on every host, nothing written.
    files = _files(fleet)
    again = fleet.play(playbook)
    for host in HOSTS:
        assert again.stats[host]["changed"] == 0, again.output()
    for host in GOOD:
        assert again.result(host)["status"] == "ok"
        assert len(_backups(fleet, host)) == 1
    assert _files(fleet) == files

    # state: absent: the original bytes everywhere, and dockerd no longer lists the runtime.
    absent = fleet.play(playbook, "-e", "gpu_host_state=absent")
    for host in GOOD:
        r = absent.result(host)
        assert r["status"] == "ok" and r["changed"] is True and r["verified"] is True, r
        assert "nvidia" not in _runtimes(fleet, host)
        assert fleet.daemons[host].info()["DefaultRuntime"] == "runc"
    assert _files(fleet) == ORIGINAL
    assert not (fleet.root / "must-not-be-used").exists()
    print(f"\nfleet test (check, apply, reapply, absent on {len(HOSTS)} hosts): "
          f"{time.monotonic() - started:.1f}s; ansible-playbook runs: "
          f"{check.seconds:.1f}s {apply.seconds:.1f}s {again.seconds:.1f}s {absent.seconds:.1f}s")


def test_rollout_in_serial_batches_stops_at_the_first_failing_host(fleet):
    for host in HOSTS:
        fleet.daemons[host].config_file.write_bytes(ORIGINAL[host])
    before = {h: _backups(fleet, h) for h in HOSTS}
    rollout = fleet.play(COLLECTION / "playbooks" / "rollout.yml",
                         "-e", "nvdocker2_hosts=gpu_hosts", "-e", "nvdocker2_serial=1",
                         "-e", "nvdocker2_become=false")
    assert rollout.proc.returncode != 0
    for host in ("alpha", "bravo"):
        assert rollout.result(host)["changed"] is True
        doctor = rollout.result(host, "Fail the host when a runtime check of doctor fails")
        assert doctor["status"] == "ok", doctor
        assert "nvidia" in _runtimes(fleet, host)
    r = rollout.result("charlie")
    assert r["status"] == "failed" and "also set on the command line of dockerd" in r["msg"]
    assert fleet.daemons["charlie"].config_file.read_bytes() == ORIGINAL["charlie"]
    # max_fail_percentage 0: the hosts after the failing one are not touched.
    for host in ("delta", "echo"):
        assert rollout.tasks_of(host) == []
        assert fleet.daemons[host].config_file.read_bytes() == ORIGINAL[host]
        assert _backups(fleet, host) == before[host]
    assert "nvidia" not in _runtimes(fleet, "delta")


def test_rollout_doctor_fails_a_host_whose_runtime_checks_fail(fleet):
    """verify off and no reload: the file has the runtime, dockerd does not: doctor catches it."""
    host = "delta"
    fleet.daemons[host].config_file.write_bytes(ORIGINAL[host])
    rollout = fleet.play(COLLECTION / "playbooks" / "rollout.yml",
                         "-e", "nvdocker2_hosts=delta", "-e", "nvdocker2_become=false",
                         "-e", "gpu_host_reload=none", "-e", "gpu_host_verify=false")
    assert rollout.result(host)["changed"] is True
    doctor = rollout.result(host, "Fail the host when a runtime check of doctor fails")
    assert doctor["status"] == "failed"
    assert doctor["msg"].startswith("nvdocker2 doctor: dockerd.runtimes: ")
    assert "no nvidia runtime loaded" in doctor["msg"]
    assert rollout.stats[host]["failures"] == 1


def test_a_refusal_seen_only_after_the_reload_fails_the_host_rolled_back(fleet, make_dockerd,
                                                                         tmp_path):
    """systemd runs foxtrot's dockerd and hides its pid, and its API is reached over tcp (no
    SO_PEERCRED), so its --default-runtime flag cannot be seen before writing: dockerd refuses
    the file on reload, nvdocker2 puts the old one back and exits 4: the host fails with
    rolled_back true."""
    flag, tcp = tcp_host()
    daemon = make_dockerd(extra_args=["--default-runtime=runc", flag], config=ORIGINAL["alpha"])
    fleet.daemons["foxtrot"] = daemon
    # The module passes PATH on but not the stand-in's NVD2_* variables: wrappers carry them.
    env = systemd_env(make_stand_ins(tmp_path), daemon, NVD2_FAKE_HIDE_PID="1")
    path = env.pop("PATH").split(":", 1)
    fleet.host_vars["foxtrot"] = {
        "gpu_host_docker_host": tcp,
        "gpu_host_reload": "systemd",
        "gpu_host_pidfile": None,
        "fleet_environment": {"PATH": f"{baked_bin(tmp_path / 'baked', Path(path[0]), env)}:"
                                      f"{path[1]}"},
    }
    try:
        run = fleet.play(HERE / "fleet.yml", order=("foxtrot",))
    finally:
        del fleet.daemons["foxtrot"]
    r = run.result("foxtrot")
    assert r["status"] == "failed" and r["rc"] == 4 and r["rolled_back"] is True, r
    assert r["msg"].startswith(f"error: dockerd did not take the new {daemon.config_file}: ")
    assert "previous file was restored" in r["msg"]
    assert daemon.config_file.read_bytes() == ORIGINAL["alpha"]
    assert "nvidia" not in daemon.info()["Runtimes"]


def test_a_host_without_nvdocker2_fails_saying_what_to_install(fleet):
    run = fleet.play(HERE / "fleet.yml", "--check", "-l", "alpha",
                     "-e", "gpu_host_executable=nvdocker2-not-installed")
    r = run.result("alpha")
    assert r["status"] == "failed" and r["rc"] == 127
    assert r["msg"] == ("error: nvdocker2-not-installed not found on the managed host (looked on "
                        "PATH and in /usr/bin, /usr/local/bin, /usr/sbin, /usr/local/sbin)")
    assert "install the nvdocker2 package" in r["hint"]


def test_rollout_passes_syntax_check_with_no_extra_vars(fleet):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS))
    proc = subprocess.run(
        [str(fleet.bin / "ansible-playbook"), "--syntax-check",
         str(COLLECTION / "playbooks" / "rollout.yml")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_collection_builds(fleet, tmp_path):
    proc = subprocess.run(
        [str(fleet.bin / "ansible-galaxy"), "collection", "build", str(COLLECTION),
         "--output-path", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "nvdocker2-gpu-0.3.0.tar.gz").is_file()
    assert shutil.which("tar") is None or "plugins/modules/docker_runtime.py" in subprocess.run(
        ["tar", "-tzf", str(tmp_path / "nvdocker2-gpu-0.3.0.tar.gz")],
        capture_output=True, text=True, check=True,
    ).stdout


def test_the_role_refuses_a_package_that_is_neither_deb_nor_rpm(fleet):
    before = fleet.daemons["alpha"].config_file.read_bytes()
    run = fleet.play(HERE / "fleet.yml", "-l", "alpha", "-e", "gpu_host_package=/tmp/nvdocker2.tgz")
    r = run.result("alpha", "nvdocker2.gpu.gpu_host : Check the package variables")
    assert r["status"] == "failed"
    assert r["msg"] == "gpu_host_package must name a .deb or .rpm file, not /tmp/nvdocker2.tgz"
    assert fleet.daemons["alpha"].config_file.read_bytes() == before
    assert MODULE_TASK not in run.tasks_of("alpha")


def test_the_role_refuses_the_removed_package_destination(fleet):
    run = fleet.play(HERE / "fleet.yml", "-l", "alpha", "-e", "gpu_host_package_dest=/tmp")
    r = run.result("alpha", "nvdocker2.gpu.gpu_host : Check the package variables")
    assert r["status"] == "failed"
    assert r["msg"].startswith("gpu_host_package_dest is gone: the package is copied to a new "
                               "directory only root can enter")
    assert MODULE_TASK not in run.tasks_of("alpha")


def test_nvdocker2_warnings_become_ansible_warnings(fleet):
    missing = "/nonexistent/nvidia-container-runtime"
    run = fleet.play(HERE / "fleet.yml", "--check", "-l", "bravo",
                     "-e", f"gpu_host_runtime_path={missing}",
                     "-e", "gpu_host_allow_missing_runtime=true")
    r = run.result("bravo")
    assert r["status"] == "ok" and r["changed"] is True
    warning = f"--runtime-path {missing} is not an executable file (yet)"
    assert r["warnings"] == [warning]
    assert f"[WARNING]: {warning}" in run.proc.stdout + run.proc.stderr
    assert f'+\t\t\t"path": "{missing}"' in r["unified_diff"] and "diff" not in r  # tabs kept


# --- the package: a local user cannot swap it (issue: the role's fixed name under /tmp) ---------

ATTACKER = r'''
import os, sys, time
fixed, planted, log, stop = sys.argv[1:5]
name = os.path.basename(fixed)
def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
os.mkdir(fixed, 0o755)  # the old fixed name, taken first as a directory of our own
note("took %s" % fixed)
swapped = False
deadline = time.monotonic() + 300
while not os.path.exists(stop) and time.monotonic() < deadline:
    inner = os.path.join(fixed, name)
    try:
        ready = not swapped and os.stat(inner).st_mode & 0o777 == 0o644
    except OSError:
        ready = False
    if ready:  # root's copy landed in our directory and the copy task is done with it
        time.sleep(0.05)
        os.rename(fixed, fixed + ".moved")
        with open(fixed, "xb") as f:
            f.write(open(planted, "rb").read())
        swapped = True
        note("swapped %s" % fixed)
    for entry in os.listdir(os.path.dirname(fixed)):  # any name we can see, we try
        path = os.path.join(os.path.dirname(fixed), entry)
        if entry.startswith("nvdocker2-package.") and os.path.isdir(path):
            try:
                with open(os.path.join(path, name), "wb") as f:
                    f.write(open(planted, "rb").read())
                note("planted in %s" % path)
            except OSError as e:
                note("refused in %s: %s" % (path, e.strerror))
    time.sleep(0.001)
'''

# The install step of ansible.builtin.apt runs `dpkg ... -i FILE` from PATH: this stand-in takes
# its place and records the file it was given and that file's sha256 (the bytes it would have
# installed). Every other dpkg call (`--field`) goes to the real dpkg.
DPKG_STAND_IN = """#!/bin/sh
case " $* " in *" -i "*) ;; *) exec /usr/bin/dpkg "$@" ;; esac
for last; do :; done
printf '%s %s\\n' "$last" "$(sha256sum < "$last" | cut -d' ' -f1)" >> {record}
"""


def _deb(where: Path, version: str, note: str) -> Path:
    """A real .deb (no maintainer scripts) named like a release of nvdocker2."""
    root = where / f"pkg-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: nvdocker2-role-test\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: nvdocker2 tests <dev@nvdocker2.invalid>\nDescription: role test package\n")
    (root / "usr/share/doc/nvdocker2-role-test").mkdir(parents=True)
    (root / "usr/share/doc/nvdocker2-role-test/note").write_text(note)
    out = where / f"build-{version}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
                   check=True, capture_output=True)
    return out


class PackageRun:
    """The role with a .deb on alpha: the install step goes to the dpkg stand-in, and the module
    to a throwaway daemon.json (no reload, no verify), so the fleet's files stay as they are."""

    def __init__(self, fleet: Fleet, tmp_path: Path) -> None:
        self.fleet = fleet
        self.tmp = tmp_path
        self.record = tmp_path / "dpkg-installs"
        bindir = tmp_path / "dpkg-bin"
        bindir.mkdir()
        (bindir / "dpkg").write_text(DPKG_STAND_IN.format(record=shlex.quote(str(self.record))))
        (bindir / "dpkg").chmod(0o755)
        # A name no other run uses: the old role's fixed name is /tmp/<this name>.
        self.name = f"nvdocker2_0.2.0-{os.getpid()}-{time.monotonic_ns()}_all.deb"
        self.genuine = tmp_path / "dist" / self.name
        self.genuine.parent.mkdir()
        shutil.copyfile(_deb(tmp_path, "0.2.0", "genuine"), self.genuine)
        self.sha = hashlib.sha256(self.genuine.read_bytes()).hexdigest()
        (tmp_path / "daemon.json").write_bytes(b"{}\n")
        fleet.host_vars["alpha"] = {
            "fleet_environment": {"PATH": f"{bindir}:{os.environ['PATH']}"},
            "gpu_host_config": str(tmp_path / "daemon.json"),
            "gpu_host_state_dir": str(tmp_path / "state"),
            "gpu_host_reload": "none", "gpu_host_verify": False,
            "gpu_host_docker_host": f"unix://{tmp_path}/no-dockerd.sock", "gpu_host_pidfile": None,
        }

    def play(self, *args: str) -> Run:
        try:
            return self.fleet.play(HERE / "fleet.yml", "-l", "alpha",
                                   "-e", f"gpu_host_package={self.genuine}", *args)
        finally:
            del self.fleet.host_vars["alpha"]

    def installs(self) -> list[tuple[str, str]]:
        text = self.record.read_text() if self.record.exists() else ""
        return [tuple(line.split(" ")) for line in text.splitlines()]


def test_a_local_user_cannot_swap_the_package_the_role_installs(fleet, tmp_path):
    """nobody takes the role's old fixed name (/tmp/<package>) first, as a directory of their
    own, and swaps root's copy for their own .deb as soon as it lands there; they also try to
    write into every package directory of the role they can see. The .deb that reaches the
    install step is the genuine one, and the role's directory is gone afterwards."""
    pkg = PackageRun(fleet, tmp_path)
    den = Path(tempfile.mkdtemp(prefix="nvd2-attacker-", dir="/tmp"))
    try:
        os.chmod(den, 0o755)
        shutil.copyfile(_deb(tmp_path, "6.6.6", "planted by nobody"), den / "planted.deb")
        (den / "attacker.py").write_text(ATTACKER)
        log, stop = den / "log" / "attacker.log", den / "log" / "stop"
        (den / "log").mkdir()
        os.chown(den / "log", 65534, 65534)
        planted_sha = hashlib.sha256((den / "planted.deb").read_bytes()).hexdigest()
        fixed = Path("/tmp") / pkg.name
        attacker = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-I", str(den / "attacker.py"), str(fixed), str(den / "planted.deb"), str(log),
             str(stop)], cwd="/")
        try:
            deadline = time.monotonic() + 30
            while not fixed.is_dir() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert fixed.is_dir() and fixed.stat().st_uid == 65534
            run = pkg.play()
        finally:
            stop.touch()
            attacker.wait(timeout=30)
        installs = pkg.installs()
        assert installs and [sha for _, sha in installs] == [pkg.sha], (
            f"installed {installs}; genuine {pkg.sha}, planted {planted_sha}\n"
            f"{log.read_text() if log.exists() else ''}\n{run.output()}")
        installed = Path(installs[0][0])
        # The module's temp directory is the playbook's (local connection): TMPDIR or /tmp.
        assert installed.parent.parent == Path(tempfile.gettempdir())
        assert installed.parent.name.startswith("nvdocker2-package.")
        assert not installed.parent.exists()  # removed after the run
        assert list(fixed.iterdir()) == []  # root wrote nothing into nobody's directory
        assert "planted in" not in (log.read_text() if log.exists() else "")
        deb = run.result("alpha", "nvdocker2.gpu.gpu_host : Install the nvdocker2 .deb")
        assert deb["status"] == "ok" and deb["changed"] is True, deb
        r = run.result("alpha")
        assert r["status"] == "ok", (r.get("msg"), r.get("stderr"))
    finally:
        for leftover in (Path("/tmp") / pkg.name, Path(f"/tmp/{pkg.name}.moved")):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
        shutil.rmtree(den)


def test_a_package_whose_checksum_differs_is_not_installed(fleet, tmp_path):
    pkg = PackageRun(fleet, tmp_path)
    run = pkg.play("-e", "gpu_host_package_sha256=" + "0" * 64)
    r = run.result("alpha", "nvdocker2.gpu.gpu_host : Check that the copy is the package and "
                            "only its owner can reach it")
    assert r["status"] == "failed"
    assert f"(sha256 {pkg.sha}, expected {'0' * 64}; directory mode 0700)" in r["msg"]
    assert r["msg"].endswith("nothing was installed")
    assert pkg.installs() == []
    removed = run.result("alpha", "nvdocker2.gpu.gpu_host : Remove the private package directory")
    assert removed["status"] == "ok" and removed["changed"] is True
    assert not Path(removed["path"]).exists()
    assert MODULE_TASK not in run.tasks_of("alpha")


# --- the role's argument spec ---------------------------------------------------------------

def test_the_role_refuses_variables_of_the_wrong_kind_before_any_task(fleet):
    before = _files(fleet)
    run = fleet.play(HERE / "fleet.yml", "-l", "alpha", "-e", "gpu_host_state=gone",
                     "-e", "gpu_host_timeout=soon", "-e", "gpu_host_engine=podman")
    assert run.proc.returncode != 0
    (task,) = run.tasks_of("alpha")  # the first task of the role, and the only one that ran
    assert task.startswith("nvdocker2.gpu.gpu_host : Validating arguments against arg spec 'main'")
    r = run.result("alpha", task)
    assert r["status"] == "failed"
    errors = "\n".join(r["argument_errors"])
    assert "value of gpu_host_state must be one of: present, absent, got: gone" in errors
    assert "value of gpu_host_engine must be one of: docker, containerd, crio, got: podman" \
        in errors
    assert "gpu_host_timeout" in errors and "float" in errors
    assert _files(fleet) == before


def test_ansible_doc_shows_the_roles_variables(fleet):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(fleet.bin / "ansible-doc"), "-t", "role", "--json",
                           "nvdocker2.gpu.gpu_host"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)["nvdocker2.gpu.gpu_host"]["entry_points"]["main"]["options"]
    defaults = (COLLECTION / "roles/gpu_host/defaults/main.yml").read_text()
    documented = {line.split(":")[0] for line in defaults.splitlines()
                  if line.startswith("gpu_host_")}
    assert set(spec) == documented
    assert spec["gpu_host_engine"]["choices"] == ["docker", "containerd", "crio"]


# --- the module's environment ------------------------------------------------------------------

ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
           "LC_MESSAGES", "TZ", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
           "PYTHONIOENCODING", "NVDOCKER2_STATE_DIR"}


def test_only_the_documented_environment_reaches_nvdocker2(fleet, tmp_path):
    """The task's environment sets variables that would steer nvdocker2 (the dockerd it runs,
    a command run as root, Python's import path, the daemon, debug output): none reaches it."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil-dockerd"
    evil.write_text(f"#!/bin/sh\necho dockerd \"$@\" >> {marker}\nexit 0\n")
    evil.chmod(0o755)
    seen = tmp_path / "seen-env"
    spy = tmp_path / "nvdocker2-spy"
    spy.write_text(  # Python adds no variable of its own, as a shell would (PWD)
        "#!/usr/bin/python3 -I\nimport json, os, sys\n"
        f"json.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n"
        f"os.execv({str(NVDOCKER2)!r}, [{str(NVDOCKER2)!r}] + sys.argv[1:])\n")
    spy.chmod(0o755)
    steer = {
        "NVDOCKER2_DOCKERD": str(evil),
        "NVDOCKER2_TEST_RUN_BEFORE_RENAME": f"echo rename >> {marker}",
        "NVDOCKER2_DEBUG": "1",
        "PYTHONPATH": str(tmp_path),
        "DOCKER_CONTEXT": "elsewhere",
        "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(tmp_path / "config.toml"),
        "NVD2_ANYTHING": "x",
    }
    fleet.host_vars["alpha"] = {"fleet_environment": steer,
                                "gpu_host_executable": str(spy)}
    before = fleet.daemons["alpha"].config_file.read_bytes()
    try:
        run = fleet.play(HERE / "fleet.yml", "--check", "-l", "alpha")
    finally:
        del fleet.host_vars["alpha"]
    r = run.result("alpha")
    assert r["status"] == "ok" and r["dry_run"] is True, r.get("msg")
    env = json.loads(seen.read_text())
    assert set(env) <= ALLOWED, set(env) - ALLOWED
    assert env["NVDOCKER2_STATE_DIR"] == str(fleet.state_dir("alpha"))
    assert "PATH" in env
    assert not marker.exists()
    assert fleet.daemons["alpha"].config_file.read_bytes() == before


def test_the_documented_allow_list_is_the_modules(fleet):
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import docker_runtime as m, re; "
             "print(' '.join(m.ALLOWED_ENV)); "
             "d = m.DOCUMENTATION.split('allow-list')[1].split('The module sets')[0]; "
             "print(' '.join(re.findall(r'E\\(([A-Z_]+)\\)', d)))")
    out = subprocess.run([fleet.interpreter(), "-c", probe,
                          str(COLLECTION / "plugins/modules")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    code, documented = out[0].split(), out[1].split()
    assert code == documented
    assert set(code) | {"PYTHONIOENCODING", "NVDOCKER2_STATE_DIR"} == ALLOWED


# --- state: absent with mode: cdi ---------------------------------------------------------------

def test_absent_with_mode_cdi_undoes_cdi_mode(fleet, tmp_path):
    """CDI mode needs Docker 25 or later and the fleet's dockerd is 20.10, so alpha's host gets a
    `dockerd` stand-in on PATH that reports Docker 26.1 (and accepts --validate), a daemon.json of
    its own (no reload, no verify: the running 20.10 has no CDI to verify) and the fake driver
    tree. Install in CDI mode writes the spec and turns features.cdi on; state: absent with
    mode: cdi must take both back."""
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures.fake_driver import build_fake_driver

    build_fake_driver(tmp_path / "driver")
    (tmp_path / "config.toml").write_text(
        f'[nvidia-container-runtime]\ndriver-root = "{tmp_path / "driver"}"\n')
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dockerd").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && echo "Docker version 26.1.5+dfsg1, build a72d7cd"\n'
        "exit 0\n")
    (bindir / "dockerd").chmod(0o755)
    spec_dir = tmp_path / "cdi"
    daemon_json = tmp_path / "daemon.json"
    original = f'{{\n  "debug": true,\n  "cdi-spec-dirs": ["{spec_dir}"]\n}}\n'.encode()
    daemon_json.write_bytes(original)
    fleet.host_vars["alpha"] = {
        "fleet_environment": {"PATH": f"{bindir}:{os.environ['PATH']}"},
        "gpu_host_config": str(daemon_json), "gpu_host_state_dir": str(tmp_path / "state"),
        "gpu_host_reload": "none", "gpu_host_verify": False, "gpu_host_set_default": False,
        "gpu_host_mode": "cdi", "gpu_host_cdi_spec_dir": str(spec_dir),
        "gpu_host_runtime_config": str(tmp_path / "config.toml"),
        "gpu_host_docker_host": f"unix://{tmp_path}/no-dockerd.sock", "gpu_host_pidfile": None,
    }
    try:
        present = fleet.play(HERE / "fleet.yml", "-l", "alpha")
        r = present.result("alpha")
        assert r["status"] == "ok" and r["changed"] is True and r["mode"] == "cdi", r.get("msg")
        assert (spec_dir / "nvidia.yaml").is_file()
        assert json.loads(daemon_json.read_bytes())["features"] == {"cdi": True}
        absent = fleet.play(HERE / "fleet.yml", "-l", "alpha", "-e", "gpu_host_state=absent")
    finally:
        del fleet.host_vars["alpha"]
    r = absent.result("alpha")
    assert r["status"] == "ok" and r["changed"] is True and r["mode"] == "cdi", r
    assert "--mode" in r["cmd"] and r["cmd"][r["cmd"].index("--mode") + 1] == "cdi"
    assert not (spec_dir / "nvidia.yaml").exists()
    assert daemon_json.read_bytes() == original


# --- engine: containerd -------------------------------------------------------------------------

def test_the_role_adds_the_runtime_to_a_private_containerd_and_takes_it_out(fleet, tmp_path):
    sys.path.insert(0, str(HERE.parent))
    from privatecontainerd import PrivateContainerd, missing_prerequisites

    from nvdocker2.engines.containerd import service

    missing = missing_prerequisites()
    if missing:
        _unmet("private containerd needs: " + ", ".join(missing))
    c = PrivateContainerd()
    try:
        c.start()
        before = c.config.read_bytes()
        pid0 = c.pid()
        env = c.env()
        # The stand-in systemctl finds the containerd through NVD2_CONTAINERD_ROOT, which the
        # module does not pass on: wrappers carry it.
        path = env["PATH"].split(":", 1)
        baked = baked_bin(tmp_path / "baked", Path(path[0]),
                          {"NVD2_CONTAINERD_ROOT": env["NVD2_CONTAINERD_ROOT"]})
        fleet.host_vars["golf"] = {
            "gpu_host_engine": "containerd",
            "gpu_host_config": str(c.config),
            "gpu_host_containerd_address": c.address,
            "fleet_environment": {"PATH": f"{baked}:{path[1]}"},
        }
        try:
            present = fleet.play(HERE / "fleet.yml", order=("golf",))
            r = present.result("golf")
            assert r["status"] == "ok" and r["changed"] is True and r["verified"] is True, r
            assert r["cmd"][3:5] == ["--engine", "containerd"]
            assert c.pid() != pid0  # restarted through systemctl
            dump = service.config_dump(c.exe, c.config)
            runtimes = dump["plugins"][service.dump_cri(dump)[1]]["containerd"]["runtimes"]
            assert runtimes["nvidia"]["options"]["BinaryName"].endswith(
                "nvidia-container-runtime")
            again = fleet.play(HERE / "fleet.yml", order=("golf",))
            assert again.result("golf")["changed"] is False
            absent = fleet.play(HERE / "fleet.yml", "-e", "gpu_host_state=absent",
                                order=("golf",))
        finally:
            del fleet.host_vars["golf"]
        r = absent.result("golf")
        assert r["status"] == "ok" and r["changed"] is True and r["verified"] is True, r
        assert c.config.read_bytes() == before
    finally:
        c.cleanup()
