#!/usr/bin/env python3
"""What a big GPU node costs direct mode's `create` (a script, not a test).

Run as root (the TEST FIXTURE fake driver makes its nodes with mknod; a C compiler builds the
recorder):

    .venv/bin/python bench/bench_direct.py [--rounds 30] [--repeat 3] [--json]

Two fake driver trees (tests/fixtures/fake_driver.py) and one OCI bundle of a small image:

- `1 GPU, compute`: one GPU, the default capabilities (compute, utility),
  `NVIDIA_VISIBLE_DEVICES=0`;
- `8 GPUs x 7 MIG, all capabilities`: eight GPUs with seven MIG devices each (GPU instances 1
  to 7, one compute instance each: 56 MIG devices, 112 caps nodes), each GPU's DRI nodes, the
  graphics, EGL and NGX libraries, Vulkan/EGL JSON files and Xorg modules;
  `NVIDIA_VISIBLE_DEVICES=all` with `NVIDIA_DRIVER_CAPABILITIES=all` (no NVML: `all` is read
  from /proc);
- `... one MIG device by UUID`: the same tree, one MIG device named `MIG-<uuid>` (as a device
  plugin names it), which loads the tree's libnvidia-ml (the fixture's compiled stand-in)
  through ctypes to find it.

Each round runs this checkout's `nvidia-container-runtime create --bundle B ID` (the launcher
the packages write, config.toml `mode = "direct"`) once per case, in a rotating order, with
a fresh copy of config.json. The recorder (bench/recorder.c, built with no target) stands in
for runc: the runtime execs it once it has written the edited config.json, and its first act,
getrusage(RUSAGE_SELF), is the CPU the runtime used up to then (CPU time survives exec). The
recorder's own start, measured alone, is subtracted. Reported: the median CPU of each case,
and the median over rounds of each big case's ratio to the small one in the same round (the
target: within 1.3x); with --repeat N
every figure is the median of N runs, with each run's value for the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fixtures.fake_driver import (  # noqa: E402
    FakeMig,
    add_dri,
    add_graphics,
    add_mig,
    build_fake_driver,
    build_fake_nvml,
    default_gpus,
    make_bundle,
)

from nvdocker2.runtime.launcher import write_launchers  # noqa: E402

SMALL, BIG = "1 GPU, compute", "8 GPUs x 7 MIG, all capabilities"
BY_UUID = "8 GPUs x 7 MIG, one MIG device by UUID, all capabilities"
LAST_MIG = "MIG-00000007-0000-1111-2222-000000000007"  # big_driver's GPU 7, GPU instance 7
CASES = {
    SMALL: ["NVIDIA_VISIBLE_DEVICES=0"],
    BIG: ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"],
    BY_UUID: [f"NVIDIA_VISIBLE_DEVICES={LAST_MIG}", "NVIDIA_DRIVER_CAPABILITIES=all"],
}
TARGET = 1.3  # issue 35: the big node's create within 1.3x of the small one's


def build_recorder(work: Path) -> tuple[Path, Path]:
    """(the recorder standing in for runc, its log)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("bench_direct.py: error: no C compiler (cc) to build the recorder"
                         "\nhint: apt-get install gcc libc6-dev")
    out, log = work / "recorder" / "runc", work / "runc-calls.tsv"
    out.parent.mkdir()
    for static in (["-static"], []):
        proc = subprocess.run([compiler, "-O2", *static, f'-DRECORDER_LOG="{log}"', "-o",
                               str(out), str(REPO / "bench" / "recorder.c")],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return out, log
    raise SystemExit(f"bench_direct.py: error: cannot build the recorder: "
                     f"{proc.stderr.strip()[-300:]}")


def big_driver(root: Path, work: Path):
    """Eight GPUs, seven 1-slice MIG devices on each, DRI nodes and the graphics files, and
    the stand-in libnvidia-ml (compiled) that names the MIG devices."""
    fake = build_fake_driver(root, default_gpus(8))
    migs = [FakeMig(g.minor, gi, 0, gi - 1, f"MIG-{g.minor:08x}-0000-1111-2222-{gi:012x}")
            for g in fake.gpus for gi in range(1, 8)]
    add_mig(fake, migs)
    add_dri(fake)
    add_graphics(fake)
    build_fake_nvml(fake, work)
    return fake


def config_toml(path: Path, driver_root: Path, runc: Path) -> Path:
    path.write_text(f'[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "{driver_root}"'
                    f'\nruntimes = ["{runc}"]\n'
                    '[nvidia-container-cli]\npath = "/nonexistent/nvidia-container-cli"\n')
    return path


def new_lines(log: Path, seen: int) -> tuple[list[tuple[float, list[str]]], int]:
    """The recorder's lines after the first `seen`: [(CPU seconds, args)], and the new count."""
    lines = log.read_text().splitlines() if log.exists() else []
    out = []
    for line in lines[seen:]:
        cpu, *args = line.split("\t")
        out.append((int(cpu) / 1e6, args))
    return out, len(lines)


class Case:
    """One case: its driver tree, config.toml, bundle and the environment of its container."""

    def __init__(self, work: Path, name: str, driver_root: Path, runc: Path) -> None:
        slug = {SMALL: "small", BIG: "big", BY_UUID: "by-uuid"}[name]
        self.name = name
        self.config = config_toml(work / f"{slug}.toml", driver_root, runc)
        self.bundle, _rootfs, spec = make_bundle(work / slug, env=[
            "PATH=/usr/bin:/bin", *CASES[name]])
        self.pristine = json.dumps(spec)

    def run(self, runtime: str, log: Path, seen: int) -> tuple[float, int, dict]:
        """(CPU of one `create` up to its exec of runc, the log's new count, the spec it
        wrote)."""
        (self.bundle / "config.json").write_text(self.pristine)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(self.config)}
        proc = subprocess.run([runtime, "create", "--bundle", str(self.bundle), "bench"],
                              env=env, cwd="/", capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise SystemExit(f"bench_direct.py: error: {self.name}: create exited "
                             f"{proc.returncode}: {proc.stderr.strip()[-300:]}")
        lines, seen = new_lines(log, seen)
        if len(lines) != 1 or "create" not in lines[0][1]:
            raise SystemExit(f"bench_direct.py: error: {self.name}: expected one runc create,"
                             f" the recorder logged {lines!r:.300}")
        return lines[0][0], seen, json.loads((self.bundle / "config.json").read_text())


def measure(cases: list[Case], runtime: str, recorder: Path, log: Path, rounds: int,
            seen: int) -> tuple[dict, int]:
    """One run of `rounds` rounds: per case the median CPU (ms, net of the recorder's start)
    and the median of the paired ratios of each big case to the small one."""
    start = []
    for _ in range(rounds):
        subprocess.run([str(recorder), "--version"], check=True)
        lines, seen = new_lines(log, seen)
        start.append(lines[0][0])
    base = statistics.median(start)
    cpu: dict[str, list[float]] = {c.name: [] for c in cases}
    ratios: dict[str, list[float]] = {c.name: [] for c in cases if c.name != SMALL}
    for n in range(rounds):
        order = cases[n % len(cases):] + cases[:n % len(cases)]
        got = {}
        for case in order:
            used, seen, _ = case.run(runtime, log, seen)
            got[case.name] = used - base
            cpu[case.name].append(used - base)
        for name in ratios:
            ratios[name].append(got[name] / got[SMALL])
    out = {name: statistics.median(v) * 1000 for name, v in cpu.items()}
    out.update({f"ratio: {name}": statistics.median(v) for name, v in ratios.items()})
    out["recorder start ms"] = base * 1000
    return out, seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30, help="paired rounds per run (default 30)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of all rounds (default 3)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench_direct.py: error: needs root (the fake driver's mknod)"
                         "\nhint: run it with sudo, as the e2e tests run")
    with tempfile.TemporaryDirectory(prefix="nvd2-bench-direct-") as tmp:
        work = Path(tmp)
        recorder, log = build_recorder(work)
        bindir = work / "bin"
        bindir.mkdir()
        write_launchers(str(bindir))
        runtime = str(bindir / "nvidia-container-runtime")
        small = build_fake_driver(work / "driver-small", default_gpus(1))
        big = big_driver(work / "driver-big", work)
        cases = [Case(work, name, root, recorder)
                 for name, root in ((SMALL, small.root), (BIG, big.root), (BY_UUID, big.root))]
        seen = 0
        sizes = {}
        for case in cases:  # one untimed create each: it works, and what it gives
            _, seen, spec = case.run(runtime, log, seen)
            sizes[case.name] = (len(spec["linux"]["devices"]), len(spec["mounts"]) - 1)
        runs = []
        for _ in range(args.repeat):
            figures, seen = measure(cases, runtime, recorder, log, args.rounds, seen)
            runs.append(figures)
    result = {key: {"median": statistics.median(r[key] for r in runs),
                    "runs": [r[key] for r in runs]} for key in runs[0]}
    result["devices, mounts"] = sizes
    print(f"direct-mode create CPU (median of {args.rounds} paired rounds, x{args.repeat} runs,"
          " net of the recorder's start):")
    for name in CASES:
        devices, mounts = sizes[name]
        print(f"  {name}: {result[name]['median']:.2f} ms ({devices} device nodes, {mounts}"
              f" driver mounts); runs {', '.join(f'{v:.2f}' for v in result[name]['runs'])}")
    for name in (BIG, BY_UUID):
        ratio = result[f"ratio: {name}"]
        verdict = "met" if ratio["median"] <= TARGET else "MISSED"
        print(f"  {name} / {SMALL}: {ratio['median']:.3f} (target <= {TARGET}: {verdict});"
              f" runs {', '.join(f'{v:.3f}' for v in ratio['runs'])}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
