#!/usr/bin/env python3
"""What the runtime shim and the hook cost a GPU container start (a script, not a test).

Run as root on a machine that can run the e2e tests:

    .venv/bin/python bench/bench_runtime.py [--rounds 30] [--repeat 3] [--anchor DIR] [--json]

It starts a private dockerd (tests/e2e/privatedockerd.py) and runs `docker run --rm IMAGE true`
asking for a GPU (`-e NVIDIA_VISIBLE_DEVICES=all`) through each of these, once per round, in a
rotating order, so that every figure is paired with runc in the same round:

- `runc`: `--runtime=runc`, no hook (the reference);
- `nvdocker2 (pip)`: the launchers `pip install .` ships (a venv this script builds);
- `nvdocker2 (packages)`: the launchers the .deb and .rpm write (nvdocker2.runtime.launcher);
- `nvdocker2 --gpus all`: no `--runtime`; dockerd adds the standalone hook itself;
- `NVIDIA Go` (with `--anchor DIR`): NVIDIA's `nvidia-container-runtime`, which adds its
  `nvidia-container-runtime-hook`, built from NVIDIA/nvidia-container-toolkit (see
  docs/benchmarks.md). DIR may also hold `nvidia-cdi-hook`, which bench_cdi.py runs.

There is no GPU: a static recorder (bench/recorder.c, built here with the C compiler) stands
in for runc and for nvidia-container-cli. CPU time survives exec, so the recorder's first act,
getrusage(RUSAGE_SELF), is the CPU the runtime (every call containerd makes) or the hook used
before exec'ing it: measured from the real processes, not estimated. As runc it then execs the
real runc; as the cli it exits 0, so the container starts unchanged. Both see the same
config.toml a package installs (nvdocker2/data/config.toml with the cli's path set); NVIDIA's
binaries get the equivalent file through NVIDIA_CTK_CONFIG_FILE_PATH.

Reported per variant: the median over rounds of the wall time ratio to runc in the same round
(and to NVIDIA's, with --anchor), the median CPU of the runtime calls less runc's own (the
recorder's start, measured on the runc runs), the median CPU of the hook, and their sum. With
--repeat N the whole set of rounds runs N times and every figure is given as the median of
each run and their spread (lowest to highest). Last, the interpreter floor: the CPU of a bare
`python3 -I -S` (the launchers' interpreter) exec'ing the recorder, with and without
`import os`, and behind /bin/sh: what a Python `create` costs before any of nvdocker2 runs.
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
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO))

from privatedockerd import PrivateDockerd, missing_prerequisites, remove_rootfs_tar  # noqa: E402

from nvdocker2.runtime.launcher import write_launchers  # noqa: E402

ANCHOR_BINARIES = ("nvidia-container-runtime", "nvidia-container-runtime-hook")
GPU = ["-e", "NVIDIA_VISIBLE_DEVICES=all"]
RUNC = "runc"


def compile_recorder(out: Path, log: Path, target: str | None = None, clock: bool = False,
                     children: bool = False) -> bool:
    """bench/recorder.c built as `out`, logging to `log` and exec'ing `target` (none: exit 0),
    with the CLOCK_MONOTONIC field when `clock`, counting the CPU of waited-for children when
    `children`; static where the C library allows it (the return value)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("bench: error: no C compiler (cc) to build the recorder"
                         "\nhint: apt-get install gcc libc6-dev")
    defines = [f'-DRECORDER_LOG="{log}"']
    if target is not None:
        defines.append(f'-DRECORDER_TARGET="{target}"')
    if clock:
        defines.append("-DRECORDER_CLOCK")
    if children:
        defines.append("-DRECORDER_CHILDREN")
    for static in (["-static"], []):
        proc = subprocess.run([compiler, "-O2", *static, *defines, "-o", str(out),
                               str(REPO / "bench" / "recorder.c")], capture_output=True,
                              text=True)
        if proc.returncode == 0:
            return bool(static)
    raise SystemExit(f"bench: error: cannot build the recorder: {proc.stderr.strip()[-300:]}")


def build_recorders(work: Path, runc: str, clock: bool = False, children: bool = False
                    ) -> tuple[Path, Path, Path, Path]:
    """(directory holding the recorder named `runc`, the cli recorder, runc's log, the cli's
    log), compiled static where the C library allows it."""
    runc_dir = work / "recorder"
    runc_dir.mkdir()
    runc_log, cli_log = work / "runc-calls.tsv", work / "cli-calls.tsv"
    built = [compile_recorder(runc_dir / "runc", runc_log, runc, clock, children),
             compile_recorder(work / "nvidia-container-cli", cli_log, None, clock, children)]
    if not all(built):
        print("note: the recorder is not static (no static C library): each call's figure "
              "includes the dynamic loader, the same for every variant", flush=True)
    return runc_dir, work / "nvidia-container-cli", runc_log, cli_log


PACKAGE_PYTHON = "/usr/bin/python3"


def write_package_launchers(bindir: Path) -> list[str]:
    """The runtime's and the hook's launchers as the .deb writes them: naming /usr/bin/python3
    where that is the interpreter running this (a venv of it included), else this one. A
    launcher naming the venv's interpreter would follow its symlinks (one `readlink` and one
    `stat` more per link, on every create) where the package's follows one."""
    python = sys.executable
    if os.path.realpath(PACKAGE_PYTHON) == os.path.realpath(sys.executable):
        python = PACKAGE_PYTHON
    return write_launchers(str(bindir), python=python)


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


def packaged_config(cli: Path) -> str:
    """config.toml as a package installs it, with nvidia-container-cli at `cli`."""
    text = (REPO / "nvdocker2" / "data" / "config.toml").read_text()
    line = '#path = "/usr/bin/nvidia-container-cli"'
    if line not in text:
        raise SystemExit(f"bench_runtime.py: error: nvdocker2/data/config.toml has no {line!r}")
    return text.replace(line, f'path = "{cli}"')


def nvidia_config(cli: Path, anchor: Path) -> str:
    """The same settings for NVIDIA's binaries (legacy mode: runtime + prestart hook)."""
    return (f'[nvidia-container-cli]\npath = "{cli}"\nldconfig = "@/sbin/ldconfig"\n'
            'load-kmods = true\n\n[nvidia-container-runtime]\nmode = "legacy"\n\n'
            f'[nvidia-container-runtime-hook]\npath = "{anchor}/nvidia-container-runtime-hook"\n'
            "skip-mode-detection = true\n")


def check_anchor(anchor: Path) -> Path:
    anchor = anchor.resolve()
    missing = [n for n in ANCHOR_BINARIES if not os.access(anchor / n, os.X_OK)]
    if missing:
        raise SystemExit(f"bench_runtime.py: error: --anchor {anchor}: no executable "
                         f"{', '.join(missing)}\nhint: build NVIDIA's binaries as "
                         "docs/benchmarks.md says")
    return anchor


class Log:
    """New lines of a recorder's log since the last call: [(CPU seconds, [args])]."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> list[tuple[float, list[str]]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        out = []
        for line in data.decode("utf-8", "replace").splitlines():
            cpu, *args = line.split("\t")
            out.append((int(cpu) / 1e6, args))
        return out


SUBCOMMANDS = ("create", "start", "state", "kill", "delete", "features", "run", "exec", "ps",
               "pause", "resume", "update", "checkpoint", "restore", "events")


def subcommand(args: list[str]) -> str:
    return next((a for a in args if a in SUBCOMMANDS), "other")


def one_run(daemon: PrivateDockerd, args: list[str], runc_log: Log, cli_log: Log) -> dict:
    """One `docker run --rm`: its wall time, and the CPU each runtime call and the hook had
    used when they exec'd the recorders."""
    runc_log.new()
    cli_log.new()
    argv = ["docker", "-H", daemon.host, "run", "--rm", "--network=none", *args, daemon.image,
            "true"]
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench_runtime.py: error: {' '.join(args)}: docker run exited "
                         f"{proc.returncode}: {proc.stderr.decode().strip()[-400:]}")
    calls = runc_log.new()
    hooks = cli_log.new()
    return {"wall": wall, "calls": [(subcommand(a), cpu) for cpu, a in calls],
            "hook": [cpu for cpu, _ in hooks]}


def variants(anchor: Path | None) -> dict[str, list[str]]:
    out = {
        "runc": [f"--runtime={RUNC}", *GPU],
        "nvdocker2 (pip)": ["--runtime=nvidia-pip", *GPU],
        "nvdocker2 (packages)": ["--runtime=nvidia", *GPU],
        "nvdocker2 --gpus all": ["--gpus", "all"],
    }
    if anchor is not None:
        out["NVIDIA Go"] = ["--runtime=nvidia-go", *GPU]
    return out


def run_rounds(runs: dict[str, list[str]], rounds: int, one: Callable[[list[str]], Any],
               ) -> dict[str, list[Any]]:
    """`one(flags)` for every variant once per round, in an order that rotates each round, so
    no variant always runs first or right after another; the results by variant."""
    names = list(runs)
    out: dict[str, list[Any]] = {n: [] for n in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            out[name].append(one(runs[name]))
    return out


def summarize(results: dict[str, list[dict]]) -> dict[str, dict]:
    """Per variant: medians over the rounds (ratios per round, paired with runc's run)."""
    base = results["runc"]
    per_call = statistics.median(cpu for r in base for _, cpu in r["calls"])
    anchor = results.get("NVIDIA Go")
    out = {}
    for name, runs in results.items():
        shim = [sum(cpu - per_call for _, cpu in r["calls"]) for r in runs]
        hook = [sum(cpu - per_call for cpu in r["hook"]) for r in runs]
        by_call: dict[str, list[float]] = {}
        for r in runs:
            for sub, cpu in r["calls"]:
                by_call.setdefault(sub, []).append(cpu - per_call)
        fig = {
            "wall ms": statistics.median(r["wall"] for r in runs) * 1000,
            "ratio to runc": statistics.median(r["wall"] / b["wall"] for r, b in zip(runs, base)),
            "runtime calls": statistics.median(len(r["calls"]) for r in runs),
            "shim cpu ms": statistics.median(shim) * 1000,
            "hook cpu ms": statistics.median(hook) * 1000,
            "shim + hook cpu ms": statistics.median(s + h for s, h in zip(shim, hook)) * 1000,
            "cpu ms by call": {k: statistics.median(v) * 1000 for k, v in sorted(by_call.items())},
        }
        if anchor is not None:
            fig["ratio to NVIDIA Go"] = statistics.median(
                r["wall"] / a["wall"] for r, a in zip(runs, anchor))
        out[name] = fig
    out["runc"]["recorder start cpu ms (subtracted from each call)"] = per_call * 1000
    return out


# What any Python `create` pays before nvdocker2 runs a line: the interpreter the packages'
# launchers run, started as they start it (-I -S), exec'ing the runc recorder at once.
FLOOR_CODE = "import {module}; {module}.execv({recorder!r}, ['runc', '--version'])"


def interpreter_floor(recorder: Path, runc_log: Log, runs: int) -> dict[str, float]:
    """Median CPU (ms, net of the recorder's own start) of a bare `python3 -I -S` that execs
    the recorder through `posix` alone, the same with `import os` (every runtime module needs
    it), and that one behind `/bin/sh` (as the launcher runs `create`): with the other
    runtime calls and the hook, the least a Python `create` can cost, whatever it imports."""
    python = os.path.realpath(sys.executable)
    cases = {
        "python -I -S": [python, "-I", "-S", "-c",
                         FLOOR_CODE.format(module="posix", recorder=str(recorder))],
        "python -I -S, import os": [python, "-I", "-S", "-c",
                                    FLOOR_CODE.format(module="os", recorder=str(recorder))],
    }
    cases["sh, then python -I -S, import os"] = [
        "/bin/sh", "-c", 'exec "$@"', "sh", *cases["python -I -S, import os"]]
    cases["recorder alone"] = [str(recorder), "--version"]
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    runc_log.new()
    for _ in range(runs):
        for name, argv in cases.items():
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
            cpu[name].extend(c for c, _ in runc_log.new())
    base = statistics.median(cpu.pop("recorder alone"))
    return {name: (statistics.median(v) - base) * 1000 for name, v in cpu.items()}


def spread(summaries: list[dict[str, dict]]) -> dict[str, dict]:
    """Every figure over the repeats: median, lowest, highest, and each run's value."""
    out: dict[str, dict] = {}
    for name in summaries[0]:
        out[name] = {}
        for key, value in summaries[0][name].items():
            if isinstance(value, dict):
                continue
            values = [s[name][key] for s in summaries]
            out[name][key] = {"median": statistics.median(values), "low": min(values),
                              "high": max(values), "runs": values}
    return out


TABLE_KEYS = ("wall ms", "ratio to runc", "ratio to NVIDIA Go", "shim cpu ms", "hook cpu ms",
              "shim + hook cpu ms", "runtime calls")


def print_table(summary: dict[str, dict], title: str, keys: Sequence[str] = TABLE_KEYS) -> None:
    print(title, flush=True)
    for name, fig in summary.items():
        cells = []
        for k in keys:
            if k in fig:
                v = fig[k]
                if isinstance(v, dict):
                    cells.append(f"{k} {v['median']:.3f} [{v['low']:.3f}-{v['high']:.3f}]")
                else:
                    cells.append(f"{k} {v:.3f}")
        print(f"  {name:22s} " + "; ".join(cells), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of all the rounds")
    parser.add_argument("--anchor", type=Path, metavar="DIR",
                        help="NVIDIA's nvidia-container-runtime and -hook, to run alongside")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.rounds < 10 or args.repeat < 1:
        parser.error("--rounds must be at least 10 and --repeat at least 1")
    missing = missing_prerequisites()
    if missing:
        raise SystemExit(f"bench_runtime.py: error: a private dockerd needs {', '.join(missing)}")
    anchor = check_anchor(args.anchor) if args.anchor else None
    runc = shutil.which("runc")
    if runc is None:
        raise SystemExit("bench_runtime.py: error: no runc on PATH")

    work = Path(tempfile.mkdtemp(prefix="nvd2-bench-"))
    daemon = None
    try:
        runc_dir, cli, runc_log, cli_log = build_recorders(work, runc)
        bindir = work / "bin"
        bindir.mkdir()
        write_launchers(str(bindir))
        pip_bin = pip_install(work)
        config = work / "config.toml"
        config.write_text(packaged_config(cli))
        env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(config))
        runtimes = {
            "nvidia": {"path": str(bindir / "nvidia-container-runtime")},
            "nvidia-pip": {"path": str(pip_bin / "nvidia-container-runtime")},
        }
        if anchor is not None:
            nv_config = work / "nvidia-config.toml"
            nv_config.write_text(nvidia_config(cli, anchor))
            env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(nv_config)
            runtimes["nvidia-go"] = {"path": str(anchor / "nvidia-container-runtime")}
        # The recorder named runc first on PATH: every runtime, runc included, execs it.
        daemon = PrivateDockerd(config=json.dumps({"runtimes": runtimes}).encode(), env=env,
                                path_prepend=[runc_dir, bindir])
        daemon.start()
        runs = variants(anchor)
        rl, cl = Log(runc_log), Log(cli_log)

        def one(flags: list[str]) -> dict:
            return one_run(daemon, flags, rl, cl)

        run_rounds(runs, 1, one)  # warm-up, not counted
        summaries = []
        for n in range(args.repeat):
            results = run_rounds(runs, args.rounds, one)
            summary = summarize(results)
            summaries.append(summary)
            print_table(summary, f"run {n + 1} of {args.repeat}: {args.rounds} rounds, "
                        "medians (CPU in ms, net of the recorder's start)")
            for name, fig in summary.items():
                calls = ", ".join(f"{k} {v:.2f}" for k, v in fig["cpu ms by call"].items())
                print(f"    {name:20s} CPU by runtime call: {calls}", flush=True)
        total = spread(summaries)
        print_table(total, f"over {args.repeat} runs: median [lowest-highest] of the runs' "
                    "medians")
        floor = interpreter_floor(runc_dir / "runc", rl, max(args.rounds, 30))
        print("interpreter floor, CPU ms: "
              + "; ".join(f"{k} {v:.2f}" for k, v in floor.items()), flush=True)
        if args.json:
            print(json.dumps({"rounds": args.rounds, "repeat": args.repeat,
                              "anchor": str(anchor) if anchor else None, "figures": total,
                              "runs": summaries, "floor": floor}, indent=2))
    finally:
        if daemon is not None:
            daemon.cleanup()
        remove_rootfs_tar()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
