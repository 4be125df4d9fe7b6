#!/usr/bin/env python3
"""What a GPU node's own chores cost: the CDI spec and its refresh, and the agent (a script,
not a test).

Run as root (the TEST FIXTURE fake driver makes its nodes with mknod; a C compiler builds the
stand-in NVML):

    .venv/bin/python bench/bench_node.py --part spec [--rounds 20] [--repeat 3] [--anchor DIR]
                                         [--json]
    .venv/bin/python bench/bench_node.py --part agent [--repeat 3] [--idle 600] [--storm 100]
                                         [--storm-seconds 10] [--settle 120] [--json]

`--part spec`: two fake driver trees (tests/fixtures/fake_driver.py, the stand-in NVML
compiled over their libnvidia-ml): 16 GPUs, and 8 GPUs x 7 MIG devices with every capability
(bench_direct.py's big node). Each round runs, in a rotating order: `nvdocker2 cdi generate`
on each tree, NVIDIA's `nvidia-ctk cdi generate` on each (with --anchor, where it runs: its
exit and last line are reported where it does not), `nvdocker2 cdi refresh` on a host where
`install --mode cdi` wrote the spec of the 16-GPU tree (a private daemon.json, spec directory
and state directory; the install alone asks a stand-in Engine API for Docker's version, as
the unit tests' FakeEngine answers, since the refresh asks no engine), once through this
checkout's nvdocker2 and once as the packages run it (`pip install .` into a venv, the
script run by `python3 -I`: no editable install's import hook; the target, 50 ms; and the
same through the CLI's parser, `nvdocker2.cli.main`, which the console script skips), and a bare
`python3 -I -c pass` (that venv's), the floor every figure is paired with in its round.
Reported: wall and CPU (getrusage of the finished child) medians, each repeat's; for the
refresh also that it wrote nothing: the spec's inode, mtime and bytes before and after
every run, and one run under `strace -f -e trace=openat,rename,renameat,renameat2` listing
every file opened for writing and every rename.

`--part agent`: `nvdocker2 agent --engine docker --host-root DIR --reload none --no-verify`
on a host root of private files (no engine: install's `--reload none`), then from /proc of
the agent's own process: VmRSS and VmHWM, and utime+stime (its own, and its waited
children's: the install runs) over an idle period of --idle seconds, then during a drift
storm: another writer puts back the config without the runtime --storm times in
--storm-seconds (temp file and rename, as a config manager writes), and the agent's log
lines count the re-applies the back-off allowed. After the storm the agent gets --settle
seconds to put the runtime back, then SIGTERM: it must uninstall and exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from bench_direct import big_driver  # noqa: E402
from bench_runtime import pip_install, run_rounds  # noqa: E402
from fixtures.fake_driver import build_fake_driver, build_fake_nvml, default_gpus  # noqa: E402
from unit.fake_engine import FakeEngine  # noqa: E402

GEN_16, GEN_MIG = "cdi generate, 16 GPUs", "cdi generate, 8 GPUs x 7 MIG"
CTK_16, CTK_MIG = "nvidia-ctk cdi generate, 16 GPUs", "nvidia-ctk cdi generate, 8 GPUs x 7 MIG"
REFRESH = "cdi refresh, nothing changed (16 GPUs)"
REFRESH_PIP = "cdi refresh, nothing changed (16 GPUs), pip install ., python3 -I"
REFRESH_CLI = "the same through the CLI's parser (nvdocker2.cli.main)"
FLOOR = "python3 -I -c pass"
REFRESH_TARGET_MS = 50.0
RSS_TARGET_KB = 40 * 1024
IDLE_CPU_TARGET = 0.1  # % of one core
DAEMON_JSON = b'{\n    "log-level": "info",\n    "live-restore": true\n}\n'
TICK = os.sysconf("SC_CLK_TCK")


def nvdocker2() -> list[str]:
    script = Path(sys.executable).parent / "nvdocker2"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nvdocker2"]


def timed(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One run: wall seconds, CPU seconds of the child (getrusage), exit code, last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
    return {"wall": wall, "cpu": cpu, "rc": proc.returncode, "last": last[0]}


# --- the spec and its refresh ---------------------------------------------------------------


class Node:
    """The two driver trees, a host where install --mode cdi wrote the 16-GPU tree's spec,
    and the command line of every variant."""

    def __init__(self, work: Path, anchor: Path | None) -> None:
        self.work = work
        small = build_fake_driver(work / "driver-16", default_gpus(16))
        (work / "nvml-16").mkdir()
        build_fake_nvml(small, work / "nvml-16")
        (work / "nvml-mig").mkdir()
        big = big_driver(work / "driver-mig", work / "nvml-mig")
        self.trees = {"16": small.root, "mig": big.root}
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        runtime = "/usr/bin/nvidia-container-runtime"
        out = work / "out"
        out.mkdir()
        self.runs: dict[str, list[str]] = {}
        for key, name in (("16", GEN_16), ("mig", GEN_MIG)):
            self.runs[name] = nvdocker2() + [
                "cdi", "generate", "--driver-root", str(self.trees[key]), "--runtime-path",
                runtime, "--output", str(out / f"nvdocker2-{key}.yaml")]
        for name, gpus in ((GEN_16, 16), (GEN_MIG, 8)):  # it works, on the GPUs meant
            got = subprocess.run(self.runs[name], env=self.env, cwd="/", capture_output=True,
                                 text=True, timeout=120)
            if got.returncode != 0 or f": {gpus} GPU(s)," not in got.stdout:
                raise SystemExit(f"bench_node.py: error: {name}: exit {got.returncode}: "
                                 f"{(got.stdout + got.stderr).strip()[-300:]}")
        self.ctk_failed: dict[str, str] = {}
        if anchor is not None:
            for key, name in (("16", CTK_16), ("mig", CTK_MIG)):
                argv = [str(anchor / "nvidia-ctk"), "cdi", "generate", "--driver-root",
                        str(self.trees[key]), "--dev-root", str(self.trees[key]), "--output",
                        str(out / f"nvidia-{key}.yaml")]
                got = timed(argv, self.env)
                if got["rc"] == 0:
                    self.runs[name] = argv
                else:
                    self.ctk_failed[name] = f"exit {got['rc']}: {got['last']}"
        self.host = work / "host"
        self.spec = self.host / "cdi" / "nvidia.yaml"
        self.config = self.host / "docker" / "daemon.json"
        self._install(runtime)
        self.runs[REFRESH] = nvdocker2() + ["cdi", "refresh", "--config", str(self.config)]
        # As the packages run it: installed, not editable, and `python3 -I` (debian/rules).
        pip = pip_install(work)
        self.runs[REFRESH_PIP] = [str(pip / "python"), "-I", str(pip / "nvdocker2"),
                                  *self.runs[REFRESH][-4:]]
        self.runs[REFRESH_CLI] = [str(pip / "python"), "-I", "-c",
                                  "from nvdocker2.cli import main; main()",
                                  *self.runs[REFRESH][-4:]]
        self.runs[FLOOR] = [str(pip / "python"), "-I", "-c", "pass"]  # no editable hook

    def _install(self, runtime: str) -> None:
        self.config.parent.mkdir(parents=True)
        self.config.write_bytes(DAEMON_JSON[:-3] + b',\n    "cdi-spec-dirs": ["' +
                                str(self.spec.parent).encode() + b'"]\n}\n')
        toml = self.host / "config.toml"
        toml.write_text(f'[nvidia-container-runtime]\ndriver-root = "{self.trees["16"]}"\n')
        self.env.update(NVDOCKER2_STATE_DIR=str(self.host / "state"),
                        NVIDIA_CONTAINER_RUNTIME_CONFIG=str(toml))
        engine = FakeEngine(self.work / "api.sock").start()
        try:
            engine.info["ServerVersion"] = "28.5.2"
            engine.info["CDISpecDirs"] = [str(self.spec.parent)]
            proc = subprocess.run(nvdocker2() + [
                "install", "--mode", "cdi", "--config", str(self.config), "--cdi-spec-dir",
                str(self.spec.parent), "--reload", "none", "--docker-host",
                f"unix://{engine.socket_path}", "--runtime-path", runtime,
                "--allow-missing-runtime"], env=self.env, capture_output=True, text=True,
                timeout=120)
        finally:
            engine.stop()
        if proc.returncode != 0 or not self.spec.is_file():
            raise SystemExit(f"bench_node.py: error: install --mode cdi exited "
                             f"{proc.returncode}: {proc.stderr.strip()[-300:]}")

    def spec_state(self) -> tuple[int, int, bytes]:
        st = self.spec.stat()
        return st.st_ino, st.st_mtime_ns, self.spec.read_bytes()

    def writes_under_strace(self) -> list[str]:
        """The files one `cdi refresh` opened for writing and the renames it made (strace)."""
        if shutil.which("strace") is None:
            return ["not checked: no strace"]
        log = self.work / "refresh.strace"
        subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e",
                        "trace=openat,rename,renameat,renameat2", *self.runs[REFRESH]],
                       env=self.env, cwd="/", capture_output=True, check=True, timeout=120)
        out = []
        for line in log.read_text().splitlines():
            if "rename" in line or re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", line):
                out.append(line.split(None, 1)[1] if line[:1].isdigit() else line)
        return out


def spec_round(runs: dict[str, list[str]], rounds: int, env: dict[str, str]) -> dict[str, Any]:
    results = run_rounds(runs, rounds, lambda argv: timed(argv, env))
    for name, got in results.items():
        bad = [g for g in got if g["rc"] != 0]
        if bad:
            raise SystemExit(f"bench_node.py: error: {name} exited {bad[0]['rc']}: "
                             f"{bad[0]['last']}")
    floor = results[FLOOR]
    out = {}
    for name, got in results.items():
        out[name] = {"wall ms": statistics.median(g["wall"] for g in got) * 1000,
                     "cpu ms": statistics.median(g["cpu"] for g in got) * 1000,
                     "ratio to python3 -I": statistics.median(
                         g["wall"] / f["wall"] for g, f in zip(got, floor))}
    return out


def part_spec(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    node = Node(work, args.anchor)
    before = node.spec_state()
    summaries = []
    for n in range(args.repeat):
        summaries.append(spec_round(node.runs, args.rounds, node.env))
        print_summary(summaries[-1], f"run {n + 1} of {args.repeat}: {args.rounds} rounds")
    after = node.spec_state()
    unchanged = {"inode": before[0] == after[0], "mtime": before[1] == after[1],
                 "bytes": before[2] == after[2]}
    writes = node.writes_under_strace()
    final = node.spec_state()
    unchanged["after strace"] = final == before
    return {"figures": over_runs(summaries), "nvidia-ctk failed": node.ctk_failed,
            "refresh left the spec": unchanged, "refresh writes": writes,
            "refresh runs": args.rounds * args.repeat + 1}


def over_runs(summaries: list[dict[str, dict]]) -> dict[str, dict]:
    """Every figure over the repeats: median, lowest, highest, and each run's value."""
    out: dict[str, dict] = {}
    for name in summaries[0]:
        out[name] = {}
        for key in summaries[0][name]:
            values = [s[name][key] for s in summaries]
            out[name][key] = {"median": statistics.median(values), "low": min(values),
                              "high": max(values), "runs": values}
    return out


def print_summary(summary: dict[str, dict], title: str) -> None:
    print(title, flush=True)
    for name, fig in summary.items():
        cells = "; ".join(f"{k} {v:.3f}" for k, v in fig.items())
        print(f"  {name:44s} {cells}", flush=True)


# --- the agent --------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) of the process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1])
    return out


def proc_cpu(pid: int) -> tuple[float, float]:
    """(utime+stime, cutime+cstime) of the process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime is field 14, cstime field 17.
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return own / TICK, children / TICK


class AgentRun:
    """One agent on a private host root, its log, and the writer that drifts its config."""

    def __init__(self, work: Path, backoff: float) -> None:
        self.root = work / "host"
        self.config = self.root / "etc" / "docker" / "daemon.json"
        self.config.parent.mkdir(parents=True)
        self.root.chmod(0o755)
        self.config.write_bytes(DAEMON_JSON)
        self.log = work / "agent.log"
        self.ready = work / "ready"
        argv = nvdocker2() + [
            "agent", "--engine", "docker", "--host-root", str(self.root), "--reload", "none",
            "--no-verify", "--ready-file", str(self.ready), "--backoff", f"{backoff:g}"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log, cwd="/",
                                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                              "LANG": "C.UTF-8"})

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def wait_for(self, test: Callable[[], bool], limit: float, what: str) -> float:
        """Seconds until `test()` held (checked every 50 ms); exits when the agent died."""
        t0 = time.monotonic()
        while not test():
            if self.proc.poll() is not None:
                raise SystemExit(f"bench_node.py: error: the agent exited {self.proc.returncode}"
                                 f" before {what}:\n" + "\n".join(self.lines()[-5:]))
            if time.monotonic() - t0 > limit:
                raise SystemExit(f"bench_node.py: error: no {what} within {limit:g} s:\n"
                                 + "\n".join(self.lines()[-5:]))
            time.sleep(0.05)
        return time.monotonic() - t0

    def installed(self) -> bool:
        return b'"nvidia"' in self.config.read_bytes()

    def drift(self, count: int, seconds: float) -> None:
        """`count` rewrites of the config without the runtime, evenly over `seconds`."""
        tmp = self.config.with_name(".daemon.json.writer")
        start = time.monotonic()
        for n in range(count):
            tmp.write_bytes(DAEMON_JSON)
            os.rename(tmp, self.config)
            due = start + (n + 1) * seconds / count
            time.sleep(max(0.0, due - time.monotonic()))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def reapplies(lines: list[str]) -> dict[str, int]:
    return {"re-applied": sum(": re-applied: " in line for line in lines),
            "backing off": sum("backing off" in line for line in lines),
            "still in place": sum("still in place" in line for line in lines)}


def one_agent(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    run = AgentRun(work, args.backoff)
    try:
        start_s = run.wait_for(run.ready.exists, 120, "ready file")
        pid = run.proc.pid
        out: dict[str, Any] = {"start s": start_s, "after start": proc_status(pid)}
        own0, kids0 = proc_cpu(pid)
        t0 = time.monotonic()
        time.sleep(args.idle)
        idle = time.monotonic() - t0
        own1, kids1 = proc_cpu(pid)
        out["after idle"] = proc_status(pid)
        out["idle s"] = idle
        out["idle cpu %"] = (own1 - own0) / idle * 100
        out["idle children cpu s"] = kids1 - kids0
        seen = len(run.lines())
        t0 = time.monotonic()
        run.drift(args.storm, args.storm_seconds)
        storm = time.monotonic() - t0
        own2, kids2 = proc_cpu(pid)
        out["storm s"] = storm
        out["storm cpu s"] = own2 - own1
        out["storm children cpu s"] = kids2 - kids1
        out["storm counts"] = reapplies(run.lines()[seen:])
        out["put back after storm s"] = run.wait_for(run.installed, args.settle,
                                                     "re-apply after the storm")
        out["after storm"] = proc_status(pid)
    finally:
        code = run.stop()
    # Counted once the agent exited: a re-apply's line follows its write of the config.
    out["all counts"] = reapplies(run.lines()[seen:])
    out["exit"] = code
    out["restored"] = run.config.read_bytes() == DAEMON_JSON
    out["log tail"] = run.lines()[-3:]
    return out


def part_agent(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    runs = []
    for n in range(args.repeat):
        d = work / f"agent-{n}"
        d.mkdir()
        got = one_agent(args, d)
        runs.append(got)
        print(f"agent run {n + 1} of {args.repeat}: RSS {got['after storm']['VmRSS']} kB, HWM "
              f"{got['after storm']['VmHWM']} kB, idle CPU {got['idle cpu %']:.4f} % over "
              f"{got['idle s']:.0f} s, storm CPU {got['storm cpu s']:.2f} s, re-applies "
              f"{got['storm counts']['re-applied']} in the storm, "
              f"{got['all counts']['re-applied']} from the storm to the stop; exit {got['exit']}",
              flush=True)
    keys = {"VmRSS kB": lambda r: r["after storm"]["VmRSS"],
            "VmHWM kB": lambda r: r["after storm"]["VmHWM"],
            "VmRSS after idle kB": lambda r: r["after idle"]["VmRSS"],
            "idle cpu %": lambda r: r["idle cpu %"],
            "storm cpu s": lambda r: r["storm cpu s"],
            "storm children cpu s": lambda r: r["storm children cpu s"],
            "re-applies in the storm": lambda r: r["storm counts"]["re-applied"],
            "re-applies, storm to stop": lambda r: r["all counts"]["re-applied"],
            "put back after storm s": lambda r: r["put back after storm s"]}
    figures = {}
    for key, get in keys.items():
        values = [get(r) for r in runs]
        figures[key] = {"median": statistics.median(values), "low": min(values),
                        "high": max(values), "runs": values}
    return {"figures": figures, "idle": args.idle, "storm": args.storm,
            "storm seconds": args.storm_seconds, "backoff": args.backoff,
            "exits": [r["exit"] for r in runs], "restored": [r["restored"] for r in runs],
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("spec", "agent"), required=True)
    ap.add_argument("--rounds", type=int, default=20, help="spec: rotating rounds per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs (agent: agents started)")
    ap.add_argument("--anchor", type=Path, metavar="DIR", help="NVIDIA's nvidia-ctk is here")
    ap.add_argument("--idle", type=float, default=600.0, metavar="SECONDS",
                    help="agent: the idle period measured (default 600)")
    ap.add_argument("--storm", type=int, default=100, help="agent: rewrites of the config")
    ap.add_argument("--storm-seconds", type=float, default=10.0, metavar="SECONDS",
                    help="agent: over this long (default 10)")
    ap.add_argument("--backoff", type=float, default=10.0, metavar="SECONDS",
                    help="agent: its --backoff (default 10, the agent's own)")
    ap.add_argument("--settle", type=float, default=400.0, metavar="SECONDS",
                    help="agent: the longest wait for the runtime put back after the storm")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1 or args.idle <= 0 or args.storm < 1:
        ap.error("--rounds, --repeat, --storm must be at least 1 and --idle above 0")
    if os.geteuid() != 0:
        raise SystemExit("bench_node.py: error: needs root (the fake driver's mknod)"
                         "\nhint: run it with sudo, as the e2e tests run")
    if args.anchor is not None:
        args.anchor = args.anchor.resolve()
        if not (args.anchor / "nvidia-ctk").is_file():
            raise SystemExit(f"bench_node.py: error: --anchor {args.anchor}: no nvidia-ctk"
                             "\nhint: build NVIDIA's binaries as docs/benchmarks.md says")
    with tempfile.TemporaryDirectory(prefix="nvd2-bench-node-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        result = part_spec(args, work) if args.part == "spec" else part_agent(args, work)
    if args.part == "spec":
        fig = result["figures"][REFRESH_PIP]["wall ms"]
        verdict = "met" if fig["median"] <= REFRESH_TARGET_MS else "MISSED"
        print(f"{REFRESH_PIP}: {fig['median']:.1f} ms (target <= {REFRESH_TARGET_MS:g} ms: "
              f"{verdict}); runs {', '.join(f'{v:.1f}' for v in fig['runs'])}")
        print(f"refresh left the spec: {result['refresh left the spec']}; writes under strace:"
              f" {result['refresh writes'] or 'none'}")
        for name, why in result["nvidia-ctk failed"].items():
            print(f"{name}: not measured: {why}")
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
