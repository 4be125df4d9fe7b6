#!/usr/bin/env python3
"""What the runtime shim and the hook cost a container start (a script, not a test).

Run as root on a machine that can run the e2e tests: `.venv/bin/python bench/bench_runtime.py`.
It starts a private dockerd (tests/e2e/privatedockerd.py) whose runtimes are this package's
launchers as the .deb writes them (`nvidia`) and as `pip install` ships them (`nvidia-pip`, from
a venv this script builds with `pip install .`), with a no-op TEST FIXTURE
nvidia-container-cli standing in for libnvidia-container (no GPU needed; it only counts its
calls, so what is measured is our part), then prints:

1. GPU-requesting `docker run --rm` through the shim + hook vs the same run with
   `--runtime=runc` (no hook), alternating, the median of the per-pair ratios (and the
   ratio of the fastest runs, steadier on a busy machine); likewise
   `--gpus all` (dockerd injects our hook) vs runc without a GPU request.
2. Per invocation, wall and CPU time: `nvidia-container-runtime state` (a pass-through),
   `create` up to the exec of a stand-in runc, and the hook's prestart (a GPU request,
   cli = /bin/true), against `runc state` itself. CPU is user + system time of the children
   (getrusage), not wall time.
3. Shim + hook CPU per GPU container start: create + hook prestart + each pass-through call
   containerd makes per `docker run` (counted through a wrapper runtime) less runc's own
   CPU for that call.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO))

from privatedockerd import PrivateDockerd, remove_rootfs_tar  # noqa: E402

from nvdocker2.runtime.launcher import write_launchers  # noqa: E402



def pip_install(work: Path) -> Path:
    """A venv with this checkout installed as `pip install .` does (the libraries from the
    system, so no network); returns its bin directory."""
    venv = work / "pip-venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                    str(REPO)], check=True, stdout=subprocess.DEVNULL)
    return venv / "bin"


def timed(argv, **kw) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 and kw.get("check", True):
        raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{proc.stderr.decode()}")
    return elapsed


def pairs(daemon, a_args, b_args, n) -> tuple[list[float], list[float]]:
    """Alternate a and b (swapping which goes first each pair); seconds per run."""
    a, b = [], []
    base = ["docker", "-H", daemon.host, "run", "--rm", "--network=none"]
    for i in range(n):
        order = [(a, a_args), (b, b_args)] if i % 2 == 0 else [(b, b_args), (a, a_args)]
        for out, args in order:
            out.append(timed([*base, *args, daemon.image, "true"]))
    return a, b


def loop(argv, n, env=None, stdin=None, before=None) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of the process tree) per run. CPU time is the steadier
    figure on a shared machine: it does not count waiting for a core."""
    wall, cpu = [], []
    for _ in range(n):
        if before:
            before()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, input=stdin, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall.append(time.perf_counter() - start)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return wall, cpu


def ms(xs) -> str:
    return f"{statistics.median(xs) * 1000:7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15, help="docker run pairs (>= 10)")
    parser.add_argument("--calls", type=int, default=60, help="per-invocation repetitions")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nvd2-bench-"))
    bindir = work / "bin"
    bindir.mkdir()
    write_launchers(str(bindir))
    pip_bin = pip_install(work)
    # A runtime that records each call, then runs the pip install's: how many times containerd
    # runs the runtime per `docker run`.
    counted = work / "counted-runtime"
    counted.write_text(f'#!/bin/sh\necho "$*" >> {work}/invocations\n'
                       f'exec {pip_bin}/nvidia-container-runtime "$@"\n')
    counted.chmod(0o755)
    # The GPU boundary as a no-op that counts its calls (one shell builtin), so that what is
    # measured is the shim and the hook, not a stand-in's work.
    record = work / "record"
    record.mkdir()
    cli = work / "nvidia-container-cli"
    cli.write_text(f"#!/bin/sh\n# TEST FIXTURE: a no-op nvidia-container-cli\n"
                   f"echo called >> {record}/calls\n")
    cli.chmod(0o755)
    config = work / "config.toml"
    config.write_text(f'[nvidia-container-cli]\npath = "{cli}"\n')
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(config))
    daemon_config = {"runtimes": {
        "nvidia": {"path": str(bindir / "nvidia-container-runtime")},
        "nvidia-pip": {"path": str(pip_bin / "nvidia-container-runtime")},
        "nvidia-counted": {"path": str(counted)},
    }}
    daemon = PrivateDockerd(config=json.dumps(daemon_config).encode(), env=env,
                            path_prepend=[bindir])
    results: dict[str, float] = {}
    try:
        daemon.start()
        gpu = ["-e", "NVIDIA_VISIBLE_DEVICES=all"]
        for warm in (["--runtime=nvidia", *gpu], ["--runtime=runc"], ["--gpus", "all"]):
            pairs(daemon, warm, warm, 1)
        print(f"docker run --rm IMAGE true, {args.pairs} alternating pairs, medians:")
        for name, a_args, b_args in (
            ("runtime=nvidia (launcher) + hook vs runc", ["--runtime=nvidia", *gpu],
             ["--runtime=runc", *gpu]),
            ("runtime=nvidia-pip (pip install) + hook vs runc",
             ["--runtime=nvidia-pip", *gpu], ["--runtime=runc", *gpu]),
            ("--gpus all (dockerd adds the hook) vs runc", ["--gpus", "all"], ["--runtime=runc"]),
        ):
            a, b = pairs(daemon, a_args, b_args, args.pairs)
            ratio = statistics.median(x / y for x, y in zip(a, b))
            fastest = min(a) / min(b)
            results[name] = ratio
            results[name + " (fastest runs)"] = fastest
            print(f"  {name:55s} {ms(a)} vs {ms(b)}  ratio {ratio:.3f}"
                  f"  (fastest {min(a) * 1000:.0f} vs {min(b) * 1000:.0f} ms: {fastest:.3f})")
        calls = (record / "calls").read_text().count("called")
        print(f"  (the no-op nvidia-container-cli ran {calls} times)")
        counted_runs = 3
        pairs(daemon, ["--runtime=nvidia-counted", *gpu], ["--runtime=nvidia-counted", *gpu], 1)
        pairs(daemon, ["--runtime=nvidia-counted", *gpu], ["--runtime=runc"], 1)
        invocations = (work / "invocations").read_text().splitlines()
        creates = sum(" create " in f" {line} " for line in invocations)
        passthrough = (len(invocations) - creates) / counted_runs
        results["runtime calls per docker run besides create"] = passthrough
        print(f"  (per docker run containerd ran the runtime {len(invocations) / counted_runs:.1f}"
              f" times, {creates / counted_runs:.1f} of them create)")
    finally:
        daemon.cleanup()
        remove_rootfs_tar()

    # Per invocation.
    state_root = work / "runc-root"
    state_root.mkdir()
    bundle = work / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"args": ["true"], "env": ["NVIDIA_VISIBLE_DEVICES=all"]}}))
    hook_config = work / "hook.toml"
    hook_config.write_text('[nvidia-container-cli]\npath = "/bin/true"\n')
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "status": "creating",
                        "pid": os.getpid(), "bundle": str(bundle)}).encode()
    runc = shutil.which("runc")
    plain = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    state_args = ["--root", str(state_root), "state", "nonexistent"]
    # `create` through the shim up to the exec of the low-level runtime (a stand-in that exits).
    fake = work / "fake-runc"
    fake.mkdir()
    (fake / "runc").write_text("#!/bin/sh\nexit 0\n")
    (fake / "runc").chmod(0o755)
    spec_bytes = (bundle / "config.json").read_bytes()

    def fresh_spec():
        (bundle / "config.json").write_bytes(spec_bytes)

    create_env = {"PATH": f"{fake}:/usr/bin:/bin", "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(config)}
    create_args = ["create", "--bundle", str(bundle), "ctr"]
    runs = {
        "stand-in runc (sh, exit 0)": loop([str(fake / "runc"), *create_args], args.calls,
                                           create_env),
        "runtime create (launcher)": loop([str(bindir / "nvidia-container-runtime"),
                                           *create_args], args.calls, create_env,
                                          before=fresh_spec),
        "runtime create (pip install)": loop([str(pip_bin / "nvidia-container-runtime"),
                                             *create_args], args.calls, create_env,
                                            before=fresh_spec),
        "runc state": loop([runc, *state_args], args.calls, plain),
        "runtime state (launcher)": loop([str(bindir / "nvidia-container-runtime"), *state_args],
                                         args.calls, plain),
        "runtime state (pip install)": loop(
            [str(pip_bin / "nvidia-container-runtime"), *state_args], args.calls, plain),
        "hook prestart (launcher)": loop(
            [str(bindir / "nvidia-container-runtime-hook"), "--config", str(hook_config),
             "prestart"], args.calls, {}, state),
        "hook prestart (pip install)": loop(
            [str(pip_bin / "nvidia-container-runtime-hook"), "--config", str(hook_config),
             "prestart"], args.calls, {}, state),
        "/bin/true": loop(["/bin/true"], args.calls, plain),
    }
    base = statistics.median(runs["runc state"][0])
    print(f"\nper invocation, {args.calls} calls, medians: wall (ratio to runc state), CPU")
    for name, (wall, cpu) in runs.items():
        results[name + " wall ms"] = statistics.median(wall) * 1000
        results[name + " cpu ms"] = statistics.median(cpu) * 1000
        print(f"  {name:30s} {ms(wall)} (x{statistics.median(wall) / base:.2f})"
              f"  cpu {ms(cpu)}")
    cpu = {name: statistics.median(c) * 1000 for name, (_, c) in runs.items()}
    k = results["runtime calls per docker run besides create"]
    print(f"\nshim + hook CPU per GPU container start (create + prestart + {k:.1f} pass-throughs"
          " less runc's own CPU):")
    for kind in ("launcher", "pip install"):
        total = (cpu[f"runtime create ({kind})"] + cpu[f"hook prestart ({kind})"]
                 + k * max(0.0, cpu[f"runtime state ({kind})"] - cpu["runc state"]))
        results[f"shim + hook cpu ms per GPU container start ({kind})"] = total
        print(f"  {kind:12s} {total:6.1f} ms")
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
