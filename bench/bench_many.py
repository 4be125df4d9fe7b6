#!/usr/bin/env python3
"""Many GPU containers started at once, and the first one after the page cache is dropped
(a script, not a test).

Run as root on a machine that can run the e2e tests:

    .venv/bin/python bench/bench_many.py [--only concurrent|cold-start] [--sizes 16,64]
        [--rounds 3] [--repeat 3] [--anchor DIR] [--no-containerd] [--json]

Variants, set up as bench/bench_runtime.py sets them up (which see): `runc` alone;
`nvdocker2`, the launchers the packages write (nvdocker2.runtime.launcher), legacy mode: the
shim, our prestart hook and the static recorder (bench/recorder.c) as nvidia-container-cli;
`NVIDIA Go` (with --anchor DIR): NVIDIA's runtime and hook with the same recorder. No GPU: in
legacy mode the recorder is all that stands for the driver.

concurrent: SIZE containers started at the same moment (threads released by one barrier),
`docker run --rm --network=none --runtime X` on one private dockerd (tests/e2e/privatedockerd.py:
vfs storage, the busybox rootfs by `docker import`), and `ctr run --rm --runc-binary X` on one
private containerd (tests/e2e/privatecontainerd.py; ctr, not the CRI: the runtime binary is the
one the shim execs, as BinaryName makes it). Per batch: p50 and p95 of the containers' wall
times and the makespan (first start to last exit). Every round runs each variant once, the
order rotated each round, and the ratios pair a batch with runc's (and NVIDIA's) of the same
round. Then one batch per GPU variant through a recorder placed before the runtime (its create
start) and the cli recorder (the hook's end): the peak number of GPU `create`s in flight at
once; and one batch under `strace -f -e trace=flock,fcntl`: every lock call of every runtime
process, the hook included (fcntl F_SETLK/F_SETLKW/F_OFD_*, flock).

cold-start: each round, for each variant in rotated order, `sync; echo 3 >
/proc/sys/vm/drop_caches` (checked to work: runc's pages are gone after it, else
posix_fadvise(DONTNEED) on the files every variant runs) and one GPU `docker run`: wall, its
ratio to runc's of the same round, and the CPU of every runtime call and the hook (getrusage at
the recorders).

With --repeat N every figure is given per repeat and as the median of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO))

import privatecontainerd as pc  # noqa: E402
from bench_runtime import (GPU, Log, build_recorders, check_anchor, compile_recorder,  # noqa: E402
                           nvidia_config, one_run, packaged_config, print_table, run_rounds,
                           spread, write_package_launchers)
from privatedockerd import PrivateDockerd, missing_prerequisites, remove_rootfs_tar  # noqa: E402


OURS, NVIDIA = "nvdocker2", "NVIDIA Go"
LOCK_CALL = re.compile(r"\b(flock\(|fcntl\([^,]*, F_(SETLK|SETLKW|OFD_SETLK|OFD_SETLKW)\b)")
# The lock calls that can wait: F_SETLKW, F_OFD_SETLKW, and flock without LOCK_NB.
WAITING = re.compile(r"\bfcntl\([^,]*, F_(OFD_)?SETLKW\b|\bflock\((?![^)]*LOCK_NB)")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between the closest ranks (statistics' 'inclusive')."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 \
        else values[0]


def batch(argvs: list[list[str]], env: dict | None = None) -> dict:
    """Run every argv at the same moment (one thread each, released together); each one's wall
    time (s) and the makespan. Any failure ends the bench with its stderr."""
    gate = threading.Barrier(len(argvs))
    spans: list[tuple[int, int]] = [(0, 0)] * len(argvs)
    errors: list[str] = []

    def one(i: int) -> None:
        gate.wait()
        start = time.monotonic_ns()
        proc = subprocess.run(argvs[i], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=env, timeout=900)
        spans[i] = (start, time.monotonic_ns())
        if proc.returncode != 0:
            errors.append(f"{' '.join(argvs[i][:6])}...: exited {proc.returncode}: "
                          f"{proc.stderr.decode(errors='replace').strip()[-300:]}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(argvs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"bench_many.py: error: {len(errors)} of {len(argvs)} failed; "
                         f"{errors[0]}")
    walls = [(end - start) / 1e9 for start, end in spans]
    return {"walls": walls, "makespan": (max(e for _, e in spans) - min(s for s, _ in spans))
            / 1e9}


def batch_figures(b: dict) -> dict:
    return {"p50 ms": percentile(b["walls"], 50) * 1000, "p95 ms": percentile(b["walls"], 95)
            * 1000, "makespan s": b["makespan"],
            "cpu ms per container": b["cpu"] * 1000 / len(b["walls"])}


def summarize_batches(results: dict[str, list[dict]]) -> dict[str, dict]:
    """Per variant: medians over the rounds of each batch's figures and of their ratios to the
    batch of runc (and of NVIDIA's) in the same round."""
    out: dict[str, dict] = {}
    for name, batches in results.items():
        figs = [batch_figures(b) for b in batches]
        fig = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
        for other in ("runc", NVIDIA):
            if other in results and other != name:
                base = [batch_figures(b) for b in results[other]]
                for k in ("p50 ms", "p95 ms", "makespan s"):
                    fig[f"{k.split()[0]} / {other}"] = statistics.median(
                        f[k] / g[k] for f, g in zip(figs, base))
        out[name] = fig
    return out


def all_keys(summary: dict[str, dict]) -> list[str]:
    """Every figure's name in a summary, in first-seen order (the table's columns)."""
    return list(dict.fromkeys(k for fig in summary.values() for k in fig))


def clocked(path: Path) -> list[tuple[int, list[str]]]:
    """A clock recorder's log: [(CLOCK_MONOTONIC ns, args)]."""
    out = []
    for line in path.read_text().splitlines():
        _, *args = line.split("\t")
        out.append((int(args[-1].removeprefix("clock=")), args[:-1]))
    return out


def peak_in_flight(starts: list[int], ends: list[int]) -> int:
    """Most intervals open at once, from their start and end times alone (no pairing needed:
    at any moment the open ones are the starts so far less the ends so far)."""
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def lock_calls(trace_dir: Path) -> list[str]:
    """Every lock syscall strace logged under `trace_dir` (one file per runtime call)."""
    found = []
    for f in sorted(trace_dir.iterdir()):
        found += [line.strip() for line in f.read_text(errors="replace").splitlines()
                  if LOCK_CALL.search(line)]
    return found


def wait_for_tracers(trace_dir: Path, timeout: float = 120) -> None:
    """Until no strace writing under `trace_dir` runs (they outlive the calls they trace)."""
    mark = str(trace_dir).encode()
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"/") and b"strace" in cmdline.split(b"\0")[0] \
                    and mark in cmdline:
                alive.append(pid)
        if not alive:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_many.py: error: strace {', '.join(alive)} still running "
                             f"after {timeout:.0f} s")
        time.sleep(0.1)


def strace_runtime(path: Path, target: str, trace_dir: Path) -> Path:
    """An executable that runs `target` under strace -f, logging lock calls to trace_dir."""
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("bench_many.py: error: no strace on PATH\nhint: apt-get install strace")
    # -D: strace runs as a grandchild, so `create` returns (to the shim) while strace still
    # follows `runc init`, which waits for `start`: without it the two would wait on each other.
    path.write_text(f'#!/bin/sh\nexec {strace} -D -f -qq -e trace=flock,fcntl -o '
                    f'"{trace_dir}/$$" {target} "$@"\n')
    path.chmod(0o755)
    return path


class Engines:
    """The private dockerd and containerd, every runtime each variant needs registered, and the
    recorders' logs."""

    def __init__(self, work: Path, anchor: Path | None, containerd: bool) -> None:
        runc = shutil.which("runc")
        if runc is None:
            raise SystemExit("bench_many.py: error: no runc on PATH")
        self.work = work
        self.runc_dir, cli, runc_log, self.cli_path = build_recorders(work, runc, clock=True,
                                                                      children=True)
        self.runc_log, self.cli_log = Log(runc_log), Log(self.cli_path)
        bindir = work / "bin"
        bindir.mkdir()
        write_package_launchers(bindir)
        config = work / "config.toml"
        config.write_text(packaged_config(cli))
        self.env = {"NVIDIA_CONTAINER_RUNTIME_CONFIG": str(config)}
        # The runtime binary of each variant (as containerd's shim execs it).
        self.binary = {"runc": str(self.runc_dir / "runc"),
                       OURS: str(bindir / "nvidia-container-runtime")}
        if anchor is not None:
            nv_config = work / "nvidia-config.toml"
            nv_config.write_text(nvidia_config(cli, anchor))
            self.env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(nv_config)
            self.binary[NVIDIA] = str(anchor / "nvidia-container-runtime")
        # Evidence runtimes: a clock recorder before the runtime, and the runtime under strace.
        self.front_log = work / "front.tsv"
        self.traces = work / "traces"
        self.traces.mkdir()
        runtimes = {}
        for i, (name, binary) in enumerate(self.binary.items()):
            front = work / f"front{i}"
            compile_recorder(front, self.front_log, binary, clock=True)
            runtimes[self.runtime(name)] = {"path": binary}
            runtimes[self.runtime(name, "stamped")] = {"path": str(front)}
            runtimes[self.runtime(name, "strace")] = {
                "path": str(strace_runtime(work / f"strace{i}", binary, self.traces))}
        runtimes.pop("runc")
        env = dict(os.environ, **self.env)
        # The recorder named runc first on PATH: every runtime, runc included, execs it.
        self.dockerd = PrivateDockerd(config=json.dumps({"runtimes": runtimes}).encode(),
                                      env=env, path_prepend=[self.runc_dir, bindir])
        self.dockerd.start()
        self.containerd = None
        if containerd:
            missing = pc.missing_prerequisites()
            if missing:
                raise SystemExit(f"bench_many.py: error: a private containerd needs "
                                 f"{', '.join(missing)}\nhint: or --no-containerd")
            path = os.pathsep.join([str(self.runc_dir), os.environ.get("PATH", os.defpath)])
            self.containerd = pc.PrivateContainerd(unit_env={**self.env, "PATH": path})
            self.containerd.start()
            self.containerd.import_busybox()

    @staticmethod
    def runtime(name: str, how: str = "") -> str:
        base = {"runc": "runc", OURS: "nvidia", NVIDIA: "nvidia-go"}[name]
        return f"{base}-{how}" if how else base

    def docker_argv(self, runtime: str) -> list[str]:
        return ["docker", "-H", self.dockerd.host, "run", "--rm", "--network=none",
                f"--runtime={runtime}", *GPU, self.dockerd.image, "true"]

    def ctr_argv(self, name: str) -> list[str]:
        assert self.containerd is not None
        return ["ctr", "--address", self.containerd.address, "-n", pc.NS, "run", "--rm",
                "--runc-binary", self.binary[name], "--env", "NVIDIA_VISIBLE_DEVICES=all",
                pc.IMAGE, f"m-{uuid.uuid4().hex[:12]}", "true"]

    def run_batch(self, engine: str, name: str, size: int, how: str = "") -> dict:
        """One batch of `size` GPU containers of variant `name`; checks the hook ran once for
        each GPU container (the cli recorder) and never for runc. Adds "cpu": the CPU of every
        runtime call and hook of the batch (getrusage at the recorders, children included)."""
        self.cli_log.new()
        self.runc_log.new()
        if engine == "docker":
            argvs = [self.docker_argv(self.runtime(name, how)) for _ in range(size)]
            b = batch(argvs)
        else:
            assert self.containerd is not None
            b = batch([self.ctr_argv(name) for _ in range(size)], self.containerd.env())
        hook_calls = self.cli_log.new()
        hooks = len(hook_calls)
        b["cpu"] = sum(c for c, _ in self.runc_log.new()) + sum(c for c, _ in hook_calls)
        want = 0 if name == "runc" else size
        if hooks != want:
            raise SystemExit(f"bench_many.py: error: {engine} {name}: {hooks} hook calls for "
                             f"{size} containers (want {want})")
        return b

    def cleanup(self) -> None:
        if self.containerd is not None:
            self.containerd.cleanup()
        self.dockerd.cleanup()


def concurrent(eng: Engines, sizes: list[int], rounds: int, repeat: int, engines: list[str]
               ) -> dict:
    names = list(eng.binary)
    repeats: list[dict[str, dict]] = []
    evidence: list[dict] = []
    for n in range(repeat):
        summary: dict[str, dict] = {}
        for engine in engines:
            for size in sizes:
                def one(name: str, engine: str = engine, size: int = size) -> dict:
                    return eng.run_batch(engine, name, size)

                results = run_rounds({k: k for k in names}, rounds, one)  # type: ignore[arg-type]
                for name, fig in summarize_batches(results).items():
                    summary[f"{engine} x{size}: {name}"] = fig
        repeats.append(summary)
        print_table(summary, f"repeat {n + 1} of {repeat}: {rounds} rounds, medians",
                    keys=all_keys(summary))
        evidence.append(in_flight(eng, max(sizes)))
        print(f"  in flight: {evidence[-1]}", flush=True)
    locks = strace_batch(eng, min(sizes))
    print(f"  lock calls under strace -f: {locks}", flush=True)
    return {"figures": spread(repeats), "repeats": repeats, "in flight": evidence,
            "lock calls": locks}


def in_flight(eng: Engines, size: int) -> dict[str, int]:
    """Per GPU variant, one docker batch through the clock recorder before the runtime: the
    peak number of creates (runtime create start to the hook's exec of the cli) in flight."""
    out = {}
    for name in eng.binary:
        if name == "runc":
            continue
        eng.front_log.unlink(missing_ok=True)
        eng.cli_path.unlink(missing_ok=True)
        eng.cli_log.offset = 0
        eng.run_batch("docker", name, size, "stamped")
        starts = [t for t, args in clocked(eng.front_log) if "create" in args]
        ends = [t for t, _ in clocked(eng.cli_path)]
        if len(starts) != size or len(ends) != size:
            raise SystemExit(f"bench_many.py: error: {name}: {len(starts)} creates and "
                             f"{len(ends)} hook ends logged for {size} containers")
        out[name] = peak_in_flight(starts, ends)
    return out


def strace_batch(eng: Engines, size: int) -> dict[str, dict]:
    """Per variant, one docker batch with every runtime call under strace -f: its lock calls."""
    out = {}
    for name in eng.binary:
        for f in eng.traces.iterdir():
            f.unlink()
        eng.run_batch("docker", name, size, "strace")
        wait_for_tracers(eng.traces)
        calls = lock_calls(eng.traces)
        out[name] = {"runtime calls traced": len(list(eng.traces.iterdir())),
                     "lock calls": len(calls),
                     "waiting lock calls": sum(1 for c in calls if WAITING.search(c)),
                     "examples": sorted({c.split(None, 1)[1] for c in calls})[:3]}
    return out


# --- cold start ----------------------------------------------------------------------------------


def drop_caches_works(probe: str) -> bool:
    """Whether `sync; echo 3 > /proc/sys/vm/drop_caches` empties the page cache here: `probe`
    read (cached), dropped, and then none of its pages resident (fincore, util-linux)."""
    fincore = shutil.which("fincore")
    try:
        Path(probe).read_bytes()
        drop_caches()
    except OSError:
        return False
    if fincore is None:
        return True  # the write was accepted; nothing here to look further
    out = subprocess.run([fincore, "--bytes", "--noheadings", "--output", "RES", probe],
                         capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == "0"


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fadvise_dontneed(paths: list[str]) -> None:
    """The nearest substitute where drop_caches is not allowed: every file under `paths`
    evicted from the page cache with posix_fadvise(POSIX_FADV_DONTNEED)."""
    for top in paths:
        for root, _, files in os.walk(top) if os.path.isdir(top) else [("", [], [top])]:
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def cold_start(eng: Engines, rounds: int, repeat: int) -> dict:
    runc = shutil.which("runc") or "runc"
    if drop_caches_works(runc):
        evict: Callable[[], None] = drop_caches
        how = "sync; echo 3 > /proc/sys/vm/drop_caches (checked: runc has no page resident after)"
    else:
        files = [runc, os.path.realpath(sys.executable), os.path.dirname(os.__file__),
                 str(REPO / "nvdocker2"), *eng.binary.values(),
                 shutil.which("containerd-shim-runc-v2") or "", shutil.which("docker") or ""]
        files = [f for f in files if f]

        def evict() -> None:
            os.sync()
            fadvise_dontneed(files)
        how = "posix_fadvise(DONTNEED) on " + ", ".join(files) + " (drop_caches not allowed)"
    print(f"cold start: {how}", flush=True)
    flags = {name: [f"--runtime={eng.runtime(name)}", *GPU] for name in eng.binary}

    def one(args: list[str]) -> dict:
        evict()
        r = one_run(eng.dockerd, args, eng.runc_log, eng.cli_log)
        r["cpu"] = sum(cpu for _, cpu in r["calls"]) + sum(r["hook"])
        return r

    repeats = []
    for n in range(repeat):
        results = run_rounds(flags, rounds, one)
        summary = {}
        for name, runs in results.items():
            fig = {"wall ms": statistics.median(r["wall"] for r in runs) * 1000,
                   "cpu ms": statistics.median(r["cpu"] for r in runs) * 1000}
            for other in ("runc", NVIDIA):
                if other in results and other != name:
                    fig[f"wall / {other}"] = statistics.median(
                        r["wall"] / b["wall"] for r, b in zip(runs, results[other]))
                    fig[f"cpu - {other} ms"] = statistics.median(
                        (r["cpu"] - b["cpu"]) * 1000 for r, b in zip(runs, results[other]))
            summary[name] = fig
        repeats.append(summary)
        print_table(summary, f"cold start, repeat {n + 1} of {repeat}: {rounds} rounds, medians",
                    keys=all_keys(summary))
    return {"how": how, "figures": spread(repeats), "repeats": repeats}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("concurrent", "cold-start"), action="append",
                        help="run only this part (repeatable; default both)")
    parser.add_argument("--sizes", default="16,64", help="containers per batch (default 16,64)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per repeat: batches per variant and size "
                        "(concurrent), cold starts per variant (cold-start)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of all the rounds")
    parser.add_argument("--anchor", type=Path, metavar="DIR",
                        help="NVIDIA's nvidia-container-runtime and -hook, to run alongside")
    parser.add_argument("--no-containerd", action="store_true",
                        help="concurrent starts through the private dockerd alone")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: comma-separated numbers of containers")
    if args.rounds < 1 or args.repeat < 1 or min(sizes) < 2:
        parser.error("--rounds and --repeat must be at least 1, each size at least 2")
    missing = missing_prerequisites()
    if missing:
        raise SystemExit(f"bench_many.py: error: a private dockerd needs {', '.join(missing)}")
    anchor = check_anchor(args.anchor) if args.anchor else None
    parts = args.only or ["concurrent", "cold-start"]
    work = Path(tempfile.mkdtemp(prefix="nvd2-many-"))
    eng = None
    out: dict = {"rounds": args.rounds, "repeat": args.repeat, "sizes": sizes,
                 "anchor": str(anchor) if anchor else None}
    try:
        with_containerd = "concurrent" in parts and not args.no_containerd
        eng = Engines(work, anchor, with_containerd)
        if "concurrent" in parts:
            out["concurrent"] = concurrent(
                eng, sizes, args.rounds, args.repeat,
                ["docker", "containerd"] if with_containerd else ["docker"])
        if "cold-start" in parts:
            out["cold-start"] = cold_start(eng, args.rounds, args.repeat)
        if args.json:
            print(json.dumps(out, indent=2))
    finally:
        if eng is not None:
            eng.cleanup()
        remove_rootfs_tar()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
