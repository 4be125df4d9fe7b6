"""The Ansible collection nvdocker2.gpu on a fleet (SPEC §10): real `ansible-playbook` against
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

import json
import os
import shutil
import subprocess
import sys
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
MODULE_TASK = "nvdocker2.gpu.gpu_host : Configure the runtime in daemon.json"
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


def _ansible_bin() -> Path:
    where = Path(os.environ.get("NVDOCKER2_ANSIBLE_BIN") or REPO / ".venv-ansible" / "bin")
    if not (where / "ansible-playbook").exists():
        message = f"ansible-playbook not found in {where} (run: scripts/ansible-test.sh sanity)"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
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
            d = self.daemons[name]
            hosts[name] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": self.interpreter(),
                "gpu_host_config": str(d.config_file),
                "gpu_host_docker_host": d.host,
                "gpu_host_pidfile": str(d.pidfile),
                "gpu_host_state_dir": str(self.state_dir(name)),
                "gpu_host_reload": "signal",
                "gpu_host_set_default": True,
                "gpu_host_timeout": 20,
                "gpu_host_executable": str(NVDOCKER2),
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
    fleet.host_vars["foxtrot"] = {
        "gpu_host_docker_host": tcp,
        "gpu_host_reload": "systemd",
        "gpu_host_pidfile": None,
        "fleet_environment": systemd_env(make_stand_ins(tmp_path), daemon,
                                         NVD2_FAKE_HIDE_PID="1"),
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
    assert (tmp_path / "nvdocker2-gpu-0.1.0.tar.gz").is_file()
    assert shutil.which("tar") is None or "plugins/modules/docker_runtime.py" in subprocess.run(
        ["tar", "-tzf", str(tmp_path / "nvdocker2-gpu-0.1.0.tar.gz")],
        capture_output=True, text=True, check=True,
    ).stdout


def test_the_role_refuses_a_package_that_is_neither_deb_nor_rpm(fleet):
    before = fleet.daemons["alpha"].config_file.read_bytes()
    run = fleet.play(HERE / "fleet.yml", "-l", "alpha", "-e", "gpu_host_package=/tmp/nvdocker2.tgz")
    r = run.result("alpha", "nvdocker2.gpu.gpu_host : Check the package variable")
    assert r["status"] == "failed"
    assert r["msg"] == "gpu_host_package must name a .deb or .rpm file, not /tmp/nvdocker2.tgz"
    assert fleet.daemons["alpha"].config_file.read_bytes() == before
    assert MODULE_TASK not in run.tasks_of("alpha")


def test_nvdocker2_warnings_become_ansible_warnings(fleet):
    missing = "/nonexistent/nvidia-container-runtime"
    run = fleet.play(HERE / "fleet.yml", "--check", "-l", "bravo",
                     "-e", f"gpu_host_runtime_path={missing}")
    r = run.result("bravo")
    assert r["status"] == "ok" and r["changed"] is True
    warning = f"--runtime-path {missing} is not an executable file (yet)"
    assert r["warnings"] == [warning]
    assert f"[WARNING]: {warning}" in run.proc.stdout + run.proc.stderr
    assert f'+\t\t\t"path": "{missing}"' in r["unified_diff"] and "diff" not in r  # tabs kept
