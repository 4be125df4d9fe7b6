#!/usr/bin/env python3
"""What the Ansible module nvdocker2.gpu.docker_runtime costs per host over a bare
`nvdocker2 install`, measured in one run on one private dockerd (tests/e2e/privatedockerd.py).

    .venv/bin/python bench/bench_ansible.py [--runs N]

Each figure is the median of N runs of an install that changes the file, reloads dockerd by
signal and verifies (the file is put back, untimed, between runs):
  bare     `nvdocker2 install --json ...` on its own
  module   ansible-playbook: one local host, one task of the module
  command  ansible-playbook: one local host, one `ansible.builtin.command: nvdocker2 install`
  empty    ansible-playbook: one local host, one `ansible.builtin.debug` task (Ansible's own
           start-up and play, no module on the host)
The per-host overhead of the module is (module - empty) - bare: what a host's task costs beyond
the install itself. Needs root, dockerd and the pinned ansible-core (scripts/ansible-test.sh
sanity makes .venv-ansible; or NVDOCKER2_ANSIBLE_BIN). Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from privatedockerd import PrivateDockerd, missing_prerequisites  # noqa: E402

NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
ORIGINAL = b'{\n    "log-level": "info"\n}\n'


def playbook(task: dict) -> str:
    return json.dumps([{"hosts": "bench", "gather_facts": False, "tasks": [task]}])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    missing = missing_prerequisites()
    ansible_bin = Path(os.environ.get("NVDOCKER2_ANSIBLE_BIN") or REPO / ".venv-ansible" / "bin")
    if not (ansible_bin / "ansible-playbook").exists():
        missing.append(f"ansible-playbook in {ansible_bin}")
    if missing:
        print("not measured: needs " + ", ".join(missing))
        return 3
    work = Path(tempfile.mkdtemp(prefix="nvd2-bench-ansible-"))
    daemon = PrivateDockerd(config=ORIGINAL)
    try:
        daemon.start()
        state = work / "state"
        flags = ["--config", str(daemon.config_file), "--docker-host", daemon.host,
                 "--pidfile", str(daemon.pidfile), "--reload", "signal"]
        env = dict(os.environ, NVDOCKER2_STATE_DIR=str(state))
        bare_argv = [str(NVDOCKER2), "install", "--json", *flags]
        module_task = {"nvdocker2.gpu.docker_runtime": {
            "config": str(daemon.config_file), "docker_host": daemon.host,
            "pidfile": str(daemon.pidfile), "reload": "signal", "state_dir": str(state),
            "executable": str(NVDOCKER2)}}
        books = {
            "module": module_task,
            "command": {"ansible.builtin.command": {"argv": bare_argv},
                        "environment": {"NVDOCKER2_STATE_DIR": str(state)}},
            "empty": {"ansible.builtin.debug": {"msg": "nothing"}},
        }
        inventory = work / "inventory.yml"
        inventory.write_text(json.dumps({"all": {"hosts": {"bench": {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(ansible_bin / "python3")}}}}))
        aenv = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "ansible"),
                    ANSIBLE_LOCAL_TEMP=str(work / "tmp"), ANSIBLE_REMOTE_TEMP=str(work / "rtmp"))

        def reset() -> None:
            out = subprocess.run([str(NVDOCKER2), "uninstall", "--json", *flags], env=env,
                                 capture_output=True, text=True, check=False)
            assert out.returncode == 0, out.stderr
            assert daemon.config_file.read_bytes() == ORIGINAL

        def timed(argv: list[str], e: dict, changes: bool) -> float:
            start = time.perf_counter()
            out = subprocess.run(argv, env=e, capture_output=True, text=True, check=False)
            took = time.perf_counter() - start
            assert out.returncode == 0, out.stdout + out.stderr
            if changes:
                assert b'"nvidia"' in daemon.config_file.read_bytes()
                reset()
            return took

        figures: dict[str, list[float]] = {name: [] for name in ("bare", *books)}
        for name, task in books.items():
            (work / f"{name}.yml").write_text(playbook(task))
        for _ in range(args.runs):  # interleaved, so load changes hit every figure alike
            figures["bare"].append(timed(bare_argv, env, True))
            for name in books:
                argv = [str(ansible_bin / "ansible-playbook"), "-i", str(inventory),
                        str(work / f"{name}.yml")]
                figures[name].append(timed(argv, aenv, name != "empty"))
        med = {k: statistics.median(v) for k, v in figures.items()}
        version = subprocess.run([str(ansible_bin / "ansible"), "--version"],
                                 capture_output=True, text=True).stdout.splitlines()[0]
        print(f"runs: {args.runs} each (median), {version}")
        for name in ("bare", "module", "command", "empty"):
            print(f"  {name:<8} {med[name]:6.2f} s")
        per_host = (med["module"] - med["empty"]) - med["bare"]
        vs_command = med["module"] - med["command"]
        print(f"per-host overhead of the module over a bare nvdocker2 install: {per_host:.2f} s "
              f"(the module's task {med['module'] - med['empty']:.2f} s = "
              f"{(med['module'] - med['empty']) / med['bare']:.2f}x the bare install)")
        print(f"module vs ansible.builtin.command running the same install: {vs_command:+.2f} s")
        return 0
    finally:
        daemon.cleanup()


if __name__ == "__main__":
    sys.exit(main())
