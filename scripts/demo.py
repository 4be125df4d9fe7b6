"""The demo: nvdocker2's main job on a private dockerd.

Starts a private dockerd whose daemon.json already holds an operator's settings, runs a
long-lived container, installs the nvidia runtime (signal reload + verification through the
Engine API), shows what dockerd reports, runs a container through the nvidia runtime, then
uninstalls and shows the file byte-identical to before. Nothing of the host's Docker is touched.
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


def run(*argv: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    print("$ " + " ".join(argv), flush=True)
    proc = subprocess.run(list(argv), text=True, env=env)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: {argv[0]} exited {proc.returncode}")
    return proc


def main() -> int:
    state = Path(tempfile.mkdtemp(prefix="nvd2-demo-state-"))
    env = dict(os.environ, NVDOCKER2_STATE_DIR=str(state))
    env.pop("DOCKER_HOST", None)
    daemon = PrivateDockerd(config=OPERATOR_CONFIG)
    try:
        step("a private dockerd with an operator's daemon.json")
        daemon.start()
        print(f"dockerd pid {daemon.pid}, socket {daemon.socket}")
        print(daemon.config_file.read_text(), end="")

        step("a long-running container, started before the install")
        cid = daemon.docker("run", "-d", "--network=none", daemon.image, "sleep", "3600").stdout
        print(f"container {cid.strip()[:12]} running")

        daemon_flags = ["--config", str(daemon.config_file), "--docker-host", daemon.host,
                        "--pidfile", str(daemon.pidfile)]
        step("nvdocker2 install --dry-run: the change, as a diff")
        run(str(BIN / "nvdocker2"), "install", *daemon_flags, "--dry-run", env=env)

        step("nvdocker2 install: merge, back up, write atomically, SIGHUP dockerd, verify")
        run(str(BIN / "nvdocker2"), "install", *daemon_flags, "--reload", "signal", env=env)
        print(daemon.config_file.read_text(), end="")

        step("what dockerd reports now")
        info = daemon.info()
        for name, runtime in sorted(info["Runtimes"].items()):
            print(f"  runtime {name}: {runtime.get('path')}")
        print(f"  default runtime: {info['DefaultRuntime']}")
        state_of = daemon.docker("inspect", "-f", "{{.State.Status}}", cid.strip()).stdout.strip()
        print(f"  the container started before the install: {state_of}")

        step("a container through the nvidia runtime (no GPU requested: the hook does nothing)")
        print(daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia", daemon.image,
                            "echo", "hello from a container started by nvidia-container-runtime"
                            ).stdout, end="")

        step("a hostile GPU request is refused by the hook, with its reason")
        bad = daemon.docker("run", "--rm", "--network=none", "--runtime=nvidia",
                            "-e", "NVIDIA_VISIBLE_DEVICES=0,--root=/tmp", daemon.image, "true",
                            check=False)
        print(f"docker run exited {bad.returncode}; dockerd said:")
        for line in bad.stderr.strip().splitlines():
            if "docker run --help" not in line:
                print("  " + line)

        step("nvdocker2 install again: idempotent, nothing written, dockerd not signalled")
        run(str(BIN / "nvdocker2"), "install", *daemon_flags, "--reload", "signal", env=env)

        step("nvdocker2 doctor: this host has no GPU, so the driver checks fail with their fixes")
        run(str(BIN / "nvdocker2"), "doctor", "--config", str(daemon.config_file),
            "--docker-host", daemon.host, check=False, env=env)

        step("nvdocker2 backups")
        run(str(BIN / "nvdocker2"), "backups", "--config", str(daemon.config_file), env=env)

        step("nvdocker2 uninstall: back to exactly the operator's file")
        run(str(BIN / "nvdocker2"), "uninstall", *daemon_flags, "--reload", "signal", env=env)
        same = daemon.config_file.read_bytes() == OPERATOR_CONFIG
        print(f"daemon.json byte-identical to before the install: {same}")
        info = daemon.info()
        print(f"runtimes dockerd reports: {', '.join(sorted(info['Runtimes']))}; "
              f"default: {info['DefaultRuntime']}")
        return 0 if same and "nvidia" not in info["Runtimes"] else 1
    finally:
        step("cleanup: stop the private dockerd (by its pid) and remove its files")
        daemon.cleanup()
        remove_rootfs_tar()
        subprocess.run(["rm", "-rf", str(state)], check=False)


if __name__ == "__main__":
    sys.exit(main())
