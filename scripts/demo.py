"""The demo: nvdocker2's main job on a private dockerd.

Starts a private dockerd whose daemon.json already holds an operator's settings, runs a
long-lived container, installs the nvidia runtime (signal reload + verification through the
Engine API), shows what dockerd reports, runs a container through the nvidia runtime, then
uninstalls and shows the file byte-identical to before. Nothing of the host's Docker is touched.
The last line says in one sentence what the run proved (or what it did not).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests/e2e"))

from privatedockerd import PrivateDockerd, remove_rootfs_tar  # noqa: E402

BIN = Path(sys.executable).parent
OPERATOR_CONFIG = (
    b'{\n'
    b'    "log-level": "warn",\n'
    b'    "log-opts": {"max-size": "10m", "max-file": "3"},\n'
    b'    "labels": ["site=z\xc3\xbcrich", "rack=42"],\n'
    # 2**53 + 1: a tool that parses numbers as floats writes 9007199254740992.
    b'    "max-download-attempts": 9007199254740993\n'
    b'}\n'
)


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}", flush=True)


def run(*argv: str, check: bool = True, env: dict | None = None,
        capture: bool = False) -> subprocess.CompletedProcess:
    """Run and show a command (`capture`: its output is also returned, then printed)."""
    print("$ " + " ".join(argv), flush=True)
    proc = subprocess.run(list(argv), text=True, env=env, capture_output=capture)
    if capture:
        print(proc.stdout + proc.stderr, end="", flush=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: {argv[0]} exited {proc.returncode}")
    return proc


def main() -> int:
    state = Path(tempfile.mkdtemp(prefix="nvd2-demo-state-"))
    env = dict(os.environ, NVDOCKER2_STATE_DIR=str(state))
    env.pop("DOCKER_HOST", None)
    daemon = PrivateDockerd(config=OPERATOR_CONFIG)
    proved: dict[str, bool] = {}
    try:
        demo(daemon, env, proved)
    finally:
        step("cleanup: stop the private dockerd (by its pid) and remove its files")
        daemon.cleanup()
        remove_rootfs_tar()
        subprocess.run(["rm", "-rf", str(state)], check=False)
        print()
        print(conclusion(proved), flush=True)
    return 0 if proved and all(proved.values()) else 1


CLAIMS = {
    "installed": "nvidia runtime installed into a live dockerd and verified",
    "kept_running": "a running container untouched",
    "ran": "a container ran through it",
    "refused": "a hostile GPU request refused",
    "idempotent": "re-install a no-op",
    "restored": "uninstall restored daemon.json byte for byte",
}


def conclusion(proved: dict[str, bool]) -> str:
    """One line: what this run proved, or which claims it could not show."""
    if len(proved) == len(CLAIMS) and all(proved.values()):
        return "demo: proved: " + "; ".join(CLAIMS.values()) + "."
    missed = [CLAIMS[k] for k in CLAIMS if not proved.get(k)]
    return "demo: FAILED to show: " + "; ".join(missed) + "."


def demo(daemon: PrivateDockerd, env: dict, proved: dict[str, bool]) -> None:
    step("a private dockerd with an operator's daemon.json")
    daemon.start()
    print(f"dockerd pid {daemon.pid}, socket {daemon.socket}")
    print(daemon.config_file.read_text(), end="")

    step("a long-running container, started before the install")
    cid = daemon.docker("run", "-d", "--network=none", daemon.image, "sleep", "3600").stdout
    cid = cid.strip()
    print(f"container {cid[:12]} running")

    nvdocker2 = str(BIN / "nvdocker2")
    daemon_flags = ["--config", str(daemon.config_file), "--docker-host", daemon.host,
                    "--pidfile", str(daemon.pidfile)]
    step("nvdocker2 install --dry-run: the change, as a diff")
    run(nvdocker2, "install", *daemon_flags, "--dry-run", env=env)

    step("nvdocker2 install: merge, back up, write atomically, SIGHUP dockerd, verify")
    done = run(nvdocker2, "install", *daemon_flags, "--reload", "signal", env=env, check=False)
    print(daemon.config_file.read_text(), end="")

    step("what dockerd reports now")
    info = daemon.info()
    for name, runtime in sorted(info["Runtimes"].items()):
        print(f"  runtime {name}: {runtime.get('path')}")
    print(f"  default runtime: {info['DefaultRuntime']}")
    proved["installed"] = done.returncode == 0 and "nvidia" in info["Runtimes"]
    state_of = daemon.docker("inspect", "-f", "{{.State.Status}}", cid).stdout.strip()
    print(f"  the container started before the install: {state_of}")
    proved["kept_running"] = state_of == "running"

    step("a container through the nvidia runtime (no GPU requested: no hook is added)")
    hello = "hello from a container started by nvidia-container-runtime"
    out = daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", daemon.image,
                        "echo", hello, check=False)
    print(out.stdout, end="")
    proved["ran"] = out.returncode == 0 and out.stdout.strip() == hello

    step("a hostile GPU request is refused before the container starts, with its reason")
    bad = daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia",
                        "-e", "NVIDIA_VISIBLE_DEVICES=0,--root=/tmp", daemon.image, "true",
                        check=False)
    print(f"docker run exited {bad.returncode}; dockerd said:")
    for line in bad.stderr.strip().splitlines():
        if line.strip() and "docker run --help" not in line:
            print("  " + line)
    proved["refused"] = bad.returncode != 0 and "nvidia-container-runtime-hook" in bad.stderr

    step("nvdocker2 install again: idempotent, nothing written, dockerd not signalled")
    before = daemon.config_file.read_bytes()
    again = run(nvdocker2, "install", *daemon_flags, "--reload", "signal", env=env, check=False,
                capture=True)
    proved["idempotent"] = (again.returncode == 0 and "unchanged" in again.stdout
                            and daemon.config_file.read_bytes() == before)

    step("nvdocker2 doctor: this host has no GPU, so the driver checks fail with their fixes")
    run(nvdocker2, "doctor", "--config", str(daemon.config_file),
        "--docker-host", daemon.host, check=False, env=env)

    step("nvdocker2 backups")
    run(nvdocker2, "backups", "--config", str(daemon.config_file), env=env)

    step("nvdocker2 uninstall: back to exactly the operator's file")
    run(nvdocker2, "uninstall", *daemon_flags, "--reload", "signal", env=env, check=False)
    same = daemon.config_file.read_bytes() == OPERATOR_CONFIG
    print(f"daemon.json byte-identical to before the install: {same}")
    info = daemon.info()
    print(f"runtimes dockerd reports: {', '.join(sorted(info['Runtimes']))}; "
          f"default: {info['DefaultRuntime']}")
    proved["restored"] = same and "nvidia" not in info["Runtimes"]


if __name__ == "__main__":
    sys.exit(main())
