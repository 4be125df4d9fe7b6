#!/usr/bin/env python3
"""The install's own time: what `nvdocker2 install --reload none` costs above the libraries it
imports (a script, not a test).

    .venv/bin/python bench/bench_install.py [--rounds 20] [--repeat 3] [--anchor DIR] [--json]

Each round runs, in turn, on a fresh copy of the 45-line daemon.json
(tests/fixtures/daemon-45-lines.json) and a state directory that keeps only what a host's keeps
between installs (the record of a dockerd without --validate; backups and journal are removed):

- `install`: this checkout's `install --reload none --runtime-path /usr/bin/runc`, started as
  the packages start it (`python3 -I` and the console script's two lines), verify left on;
- `library floor`: the same interpreter importing only typer (without rich, as the CLI loads
  it) and filelock (run.py's LIBRARY_FLOOR), the floor nvdocker2's own code cannot lower;
- `dockerd --validate`, alone on the same candidate, when the install runs one (a dockerd is
  found and the state directory does not record it lacking the flag: Debian 12's 20.10 has
  none), so that its time can be taken out of the install's;
- with `--anchor DIR`: NVIDIA's `nvidia-ctk runtime configure --runtime=docker --config F`
  on the same file (its Go binary has no interpreter floor: shown as it is).

Wall time is perf_counter around each process; CPU is the process's own getrusage (wait4).
The own time of a run is the install's median minus the floor's median over that run's rounds
(and minus the median `dockerd --validate` where one ran); with --repeat N each figure is the
median of N runs, with each run's value for the spread.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from run import DAEMON_45, LIBRARY_FLOOR  # noqa: E402

from nvdocker2.engines.docker.daemonjson import validate  # noqa: E402
from nvdocker2.store.probes import Probes, identity  # noqa: E402

TARGET_MS = 30.0
# The console script the packages install, run as they run it (python3 -I).
LAUNCHER = "import sys\nfrom nvdocker2.cli import main\nsys.exit(main())\n"


def timed(argv: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of `argv` (which must exit 0); CPU from the
    process's own rusage, so nothing else this script does is counted."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"bench_install.py: error: {argv[0]} exited {proc.returncode}: "
                         f"{err.decode(errors='replace').strip()[-300:]}")
    return wall * 1000, (ru.ru_utime + ru.ru_stime) * 1000


def validate_runs(state: Path) -> str | None:
    """The dockerd an install runs `--validate` with, or None where it runs none."""
    dockerd = validate.find_dockerd()
    found = identity(dockerd) if dockerd else None
    if found is None or Probes(state).lacks(found[0], found[1], "--validate"):
        return None
    return dockerd


def one_run(work: Path, rounds: int, anchor: Path | None) -> tuple[dict, str | None]:
    """One run of `rounds` rounds: each case's wall and CPU lists, and the dockerd whose
    --validate the install ran (None: none ran)."""
    config = work / "etc" / "daemon.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    script = work / "nvdocker2"
    script.write_text(LAUNCHER)
    env = {**os.environ, "NVDOCKER2_STATE_DIR": str(state)}
    install = [sys.executable, "-I", str(script), "install", "--config", str(config),
               "--reload", "none", "--runtime-path", "/usr/bin/runc"]
    cases: dict[str, list[str]] = {"install": install,
                                   "library floor": [sys.executable, "-I", "-c", LIBRARY_FLOOR]}
    if anchor is not None:
        cases["NVIDIA nvidia-ctk"] = [str(anchor / "nvidia-ctk"), "--quiet", "runtime",
                                      "configure", "--runtime=docker", f"--config={config}",
                                      "--nvidia-runtime-path=/usr/bin/runc"]
    config.write_bytes(DAEMON_45)
    timed(install, env)  # untimed: it works, and the state directory learns about dockerd
    dockerd = validate_runs(state)
    if dockerd is not None:
        cases["dockerd --validate"] = [dockerd, "--validate", "--config-file", str(config)]
    rows: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in cases}
    for i in range(rounds):
        names = list(cases)
        names = names[i % len(names):] + names[:i % len(names)]  # rotate who goes first
        for name in names:
            config.write_bytes(DAEMON_45)
            for sub in ("backups", "journal"):
                shutil.rmtree(state / sub, ignore_errors=True)
            wall, cpu = timed(cases[name], env)
            rows[name]["wall"].append(wall)
            rows[name]["cpu"].append(cpu)
    return rows, dockerd


def figures(rows: dict) -> dict[str, float]:
    """One run's figures (milliseconds): each case's median wall and CPU, and the install's
    own time above the floor (net of dockerd --validate where one ran)."""
    med = {f"{n} {k}": statistics.median(v) for n, r in rows.items() for k, v in r.items()}
    out = {k + " ms": v for k, v in med.items()}
    for kind in ("wall", "cpu"):
        own = med[f"install {kind}"] - med[f"library floor {kind}"]
        if "dockerd --validate" in rows:
            out[f"own {kind} ms (with dockerd --validate)"] = own
        out[f"own {kind} ms"] = own - med.get(f"dockerd --validate {kind}", 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds per run (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of all rounds (default 3)")
    ap.add_argument("--anchor", type=Path, metavar="DIR",
                    help="NVIDIA's nvidia-ctk, run in the same rounds")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    if args.anchor is not None and not (args.anchor / "nvidia-ctk").is_file():
        ap.error(f"--anchor {args.anchor}: no nvidia-ctk there")
    runs, dockerd = [], None
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="nvd2-bench-install-") as tmp:
            rows, dockerd = one_run(Path(tmp), args.rounds, args.anchor)
        runs.append(figures(rows))
    result: dict = {key: {"median": statistics.median(r[key] for r in runs),
                          "runs": [r[key] for r in runs]} for key in runs[0]}
    result["dockerd --validate ran"] = dockerd
    print(f"install --reload none, 45-line daemon.json (median of {args.rounds} rounds, "
          f"x{args.repeat} runs; dockerd --validate "
          f"{'ran: ' + dockerd if dockerd else 'did not run'}):")
    for key, f in result.items():
        if isinstance(f, dict):
            print(f"  {key}: {f['median']:.1f}; runs {', '.join(f'{v:.1f}' for v in f['runs'])}")
    own = result["own wall ms"]["median"]
    print(f"  own time {own:.1f} ms: target <= {TARGET_MS:.0f} ms "
          f"{'met' if own <= TARGET_MS else 'MISSED'}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
