#!/usr/bin/env python3
"""Benchmarks of what users feel, measured in one run on this machine; writes bench/RESULTS.md.

Every figure is a median of at least --runs (default 10) runs or a ratio of two such medians.
The dockerd figures use a private dockerd (tests/e2e/privatedockerd.py: its own config, data
root and socket; the host's Docker is never touched), so they need root, dockerd, containerd,
runc and busybox-static; without them those figures are reported as not measured, with why.

    .venv/bin/python bench/run.py [--runs N] [--out bench/RESULTS.md] [--no-dockerd]

Not a test: nothing here fails on a slow figure. The targets are printed beside the figures
and RESULTS.md says which were missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import nvdocker2  # noqa: E402
from nvdocker2.engines import docker as docker_engine  # noqa: E402
from nvdocker2.engines.docker.daemonjson import validate  # noqa: E402

# A daemon.json as a host might have it before install.
TYPICAL = (
    b'{\n    "log-driver": "json-file",\n    "log-opts": {"max-size": "10m", "max-file": "3"},\n'
    b'    "data-root": "/var/lib/docker",\n    "live-restore": true\n}\n'
)
# A 45-line daemon.json of a configured host (log options, storage, address pools, a runtimes
# table): issue 22's install figure.
DAEMON_45 = (REPO / "tests" / "fixtures" / "daemon-45-lines.json").read_bytes()
RUNTIME_SIZES = (1250, 2500, 5000, 10000)
SECTIONS = ("installer", "scaling", "dockerd", "docker-run", "cdi", "direct-create", "per-size",
            "cdi-spec", "agent", "concurrent", "cold-start")
MIB_SIZES = (0.125, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class Figure:
    """One measured figure: `value` in `unit`; `target` and `ok` when the issue sets one."""

    section: str
    name: str
    value: float | None
    unit: str
    how: str
    target: str = ""
    ok: bool | None = None
    note: str = ""
    cpu: float | None = None  # median CPU seconds, for timed figures

    def cell(self) -> str:
        if self.value is None:
            return "not measured"
        if self.unit == "s":
            return f"{self.value:.3f} s"
        if self.unit == "ms":
            return f"{self.value:.2f} ms"
        if self.unit == "x":
            return f"{self.value:.3f}"
        return f"{self.value:.4g} {self.unit}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, f: Figure, cpu: float | None = None) -> None:
        if cpu is not None:
            f = dataclasses.replace(f, cpu=cpu)
        self.figures.append(f)
        status = "" if f.ok is None else ("  (target met)" if f.ok else "  (TARGET MISSED)")
        target = f"  target {f.target}" if f.target else ""
        cpu = f"  (CPU {f.cpu:.3f} s)" if f.cpu is not None else ""
        print(f"  {f.name}: {f.cell()}{cpu}{target}{status}{('  ' + f.note) if f.note else ''}",
              flush=True)


def median_time(fn: Callable[[], object], runs: int, setup: Callable[[], object] | None = None
                ) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system, this process and its children) of
    `fn` over `runs` runs (`setup` before each, not timed). The CPU figure does not count
    waiting for a core, so it stays steady on a shared machine when the wall time does not."""
    times, cpus = [], []
    for _ in range(runs):
        if setup is not None:
            setup()
        r0 = _cpu()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - r0)
    return statistics.median(times), statistics.median(cpus)


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def nvdocker2_argv() -> list[str]:
    """The installed `nvdocker2` beside this interpreter, else `python -m nvdocker2`."""
    script = Path(sys.executable).parent / "nvdocker2"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nvdocker2"]


def cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(nvdocker2_argv() + list(args), capture_output=True, text=True,
                       timeout=300, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"nvdocker2 {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares slope, intercept and R² of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    return slope, intercept, (1 - ss_res / ss_tot) if ss_tot else 1.0


# --- the installer without dockerd -------------------------------------------------------------


def bench_installer(report: Report, runs: int, work: Path, repeat: int = 3,
                    anchor: Path | None = None) -> None:
    print("installer, --reload none (no dockerd):", flush=True)
    config = work / "cli" / "daemon.json"
    config.parent.mkdir()
    env = {**os.environ, "NVDOCKER2_STATE_DIR": str(work / "cli-state")}
    base = ["--config", str(config), "--reload", "none", "--no-verify"]

    def fresh() -> None:
        config.write_bytes(TYPICAL)
        shutil.rmtree(work / "cli-state", ignore_errors=True)

    t, cpu = median_time(lambda: cli("install", *base, "--runtime-path", "/usr/bin/runc", env=env),
                    runs, fresh)
    report.add(Figure("installer", "install --reload none --no-verify (new entry, backup, "
                      "journal, atomic write)", t, "s", f"median of {runs} CLI runs"), cpu)
    t, cpu = median_time(lambda: cli("install", *base, "--runtime-path", "/usr/bin/runc", env=env),
                    runs)
    report.add(Figure("installer", "idempotent re-run of install (--reload none)", t, "s",
                      f"median of {runs} CLI runs", "≤ 0.3 s", t <= 0.3), cpu)
    t, cpu = median_time(lambda: cli("uninstall", *base, env=env), runs,
                    lambda: cli("install", *base, "--runtime-path", "/usr/bin/runc", env=env))
    report.add(Figure("installer", "uninstall --reload none --no-verify", t, "s",
                      f"median of {runs} CLI runs"), cpu)
    install_typical(report, runs, work, env)
    install_own_time(report, max(runs, 20), repeat, anchor)
    t, cpu = median_time(lambda: cli("--version", env=env), runs)
    report.add(Figure("installer", "nvdocker2 --version (interpreter start and imports)", t, "s",
                      f"median of {runs} CLI runs", note="the floor under every CLI figure"), cpu)
    # Start-up as the packages run it (`python3 -I`), against a bare interpreter, alternating.
    script = work / "nvdocker2-I"
    script.write_text(f"#!{sys.executable} -I\nimport sys\nfrom nvdocker2.cli import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    ours, bare = [], []
    for _ in range(max(runs, 20)):
        for out, argv in ((ours, [str(script), "--version"]),
                          (bare, [sys.executable, "-I", "-c", "pass"])):
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
            out.append(time.perf_counter() - t0)
    ratio = statistics.median(ours) / statistics.median(bare)
    report.add(Figure("installer", "nvdocker2 --version (python3 -I) / bare python3 -I -c pass",
                      ratio, "x", f"ratio of medians of {len(ours)} alternating runs", "≤ 8",
                      ratio <= 8, f"{statistics.median(ours) * 1000:.1f} ms vs "
                      f"{statistics.median(bare) * 1000:.1f} ms"))


# The libraries every install imports (the CLI's parser, loaded without rich as
# nvdocker2.cli.app loads it, and the lock), started alone: the floor under the install
# figure that nvdocker2's own code cannot lower.
LIBRARY_FLOOR = "import sys; sys.modules['rich'] = None; import typer, filelock"


def install_typical(report: Report, runs: int, work: Path, env: dict) -> None:
    """`install --reload none` as a person runs it (verify left on) on a 45-line daemon.json,
    a fresh file, backups and journal each run, alternating with a bare interpreter, with one
    that imports only typer (without rich, as the CLI does) and filelock, and with the
    `dockerd --validate` the install runs on the candidate (where a dockerd is found), so the
    figure can be read against each on a shared machine. The state directory keeps what a
    host's keeps between runs: the record of a dockerd without --validate (one run first
    makes it)."""
    config = work / "typical" / "daemon.json"
    config.parent.mkdir()
    state = work / "typical-state"
    argv = nvdocker2_argv() + ["install", "--config", str(config), "--reload", "none",
                               "--runtime-path", "/usr/bin/runc"]
    dockerd = validate.find_dockerd()
    rows: dict[str, list[float]] = {"install": [], "cpu": [], "bare": [], "libraries": [],
                                    "dockerd": []}
    config.write_bytes(DAEMON_45)
    subprocess.run(argv, env={**env, "NVDOCKER2_STATE_DIR": str(state)},
                   stdout=subprocess.DEVNULL, check=True)
    for _ in range(max(runs, 20)):
        config.write_bytes(DAEMON_45)
        for sub in ("backups", "journal"):
            shutil.rmtree(state / sub, ignore_errors=True)
        r0 = _cpu()
        t0 = time.perf_counter()
        subprocess.run(argv, env={**env, "NVDOCKER2_STATE_DIR": str(state)},
                       stdout=subprocess.DEVNULL, check=True)
        rows["install"].append(time.perf_counter() - t0)
        rows["cpu"].append(_cpu() - r0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        rows["bare"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", LIBRARY_FLOOR], check=True)
        rows["libraries"].append(time.perf_counter() - t0)
        if dockerd:
            config.write_bytes(DAEMON_45)
            t0 = time.perf_counter()
            subprocess.run([dockerd, "--validate", "--config-file", str(config)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rows["dockerd"].append(time.perf_counter() - t0)
    ms = {k: statistics.median(v) * 1000 for k, v in rows.items() if v}
    note = (f"bare python3 -I -c pass {ms['bare']:.1f} ms; typer (without rich) and filelock "
            f"imported alone {ms['libraries']:.1f} ms")
    note += (f"; {dockerd} --validate alone {ms['dockerd']:.1f} ms" if dockerd
             else "; no dockerd found, so no dockerd --validate")
    report.add(Figure("installer", "install --reload none, 45-line daemon.json (new entry)",
                      ms["install"], "ms", f"median of {len(rows['install'])} CLI runs, "
                      "alternating with a bare interpreter", "≤ 100 ms", ms["install"] <= 100,
                      note), ms["cpu"] / 1000)


def install_own_time(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """The install's own time above the library floor (bench/bench_install.py, which see):
    the install's median minus LIBRARY_FLOOR's over the same alternating rounds, wall and CPU,
    net of a `dockerd --validate` the install ran (shown on its own), with NVIDIA's
    `nvidia-ctk runtime configure` in the same rounds where `anchor` has it."""
    if anchor is not None and not (anchor / "nvidia-ctk").is_file():
        anchor = None
    name = "install's own time above the library floor (45-line daemon.json)"
    try:
        data = run_bench_script("bench_install.py", rounds, repeat, anchor)
    except ValueError as e:
        report.add(Figure("installer", name, None, "ms", "", "≤ 30 ms", None,
                          f"bench_install.py failed: {e}"))
        return
    own, spread = median_and_runs(data["own wall ms"])
    cpu, cpu_spread = median_and_runs(data["own cpu ms"])
    dockerd = data["dockerd --validate ran"]
    note = (f"wall {spread}; CPU {cpu:.1f} ms, {cpu_spread}; install "
            f"{data['install wall ms']['median']:.1f} ms vs floor "
            f"{data['library floor wall ms']['median']:.1f} ms; ")
    note += (f"{dockerd} --validate ran in the install, taken out: "
             f"{data['dockerd --validate wall ms']['median']:.1f} ms wall alone" if dockerd
             else "no dockerd --validate ran in the install (none found, or the state "
             "directory records it lacking the flag)")
    if "NVIDIA nvidia-ctk wall ms" in data:
        note += (f"; NVIDIA nvidia-ctk runtime configure "
                 f"{data['NVIDIA nvidia-ctk wall ms']['median']:.1f} ms wall, "
                 f"{data['NVIDIA nvidia-ctk cpu ms']['median']:.1f} ms CPU")
    report.add(Figure("installer", name, own, "ms",
                      f"median of {rounds} alternating rounds, ×{repeat} runs", "≤ 30 ms",
                      own <= 30, note), cpu / 1000)


# --- scaling -------------------------------------------------------------------------------------


def _runtimes_doc(n: int) -> bytes:
    rts = {f"rt{i:05d}": {"path": f"/opt/vendor{i:05d}/bin/runc"} for i in range(n)}
    return json.dumps({"log-level": "info", "runtimes": rts}, indent=4).encode() + b"\n"


def _labels_doc(mib: float) -> bytes:
    # Each label string is 40 bytes with its quotes, comma, newline and indent.
    count = int(mib * 1024 * 1024 / 40)
    labels = [f"label-{i:08d}=value-{i:08d}" for i in range(count)]
    return json.dumps({"log-level": "info", "labels": labels}, indent=4).encode() + b"\n"


def bench_scaling(report: Report, runs: int, work: Path) -> None:
    print("scaling (in-process install --reload none: parse, edit, validate, backup, write):",
          flush=True)
    state = work / "scale-state"
    config = work / "scale" / "daemon.json"
    config.parent.mkdir()

    def measure(data: bytes) -> tuple[float, float]:
        def setup() -> None:
            config.write_bytes(data)
            shutil.rmtree(state, ignore_errors=True)
        return median_time(lambda: docker_engine.install(config, runtime_path="/usr/bin/runc",
                                                       state=state), runs, setup)

    def series(unit: str, sizes: Sequence[tuple[float, bytes, str]]) -> None:
        """Measure each size, then fit wall and CPU time against it (linear growth)."""
        xs, walls, cpus = [], [], []
        for x, data, label in sizes:
            t, cpu = measure(data)
            xs.append(x)
            walls.append(t)
            cpus.append(cpu)
            report.add(Figure("scaling", label, t, "s", f"median of {runs}"), cpu)
        slope, icept, r2 = linear_fit(xs, walls)
        cslope, cicept, cr2 = linear_fit(xs, cpus)
        report.add(Figure("scaling", f"time per {unit} (least-squares slope over "
                          f"{len(xs)} sizes)", slope, "s", "wall: " + f"intercept {icept:.3f} s, "
                          f"R² {r2:.4f}", note=f"CPU: {cslope:.3f} s per {unit}, intercept "
                          f"{cicept:.3f} s, R² {cr2:.4f}"), cslope)

    runtimes = []
    for n in RUNTIME_SIZES:
        data = _runtimes_doc(n)
        runtimes.append((n / 1000, data, f"install into a daemon.json with {n} runtimes "
                         f"({len(data) / 1048576:.2f} MiB)"))
    series("1000 runtimes", runtimes)
    labels = []
    for mib in MIB_SIZES:
        data = _labels_doc(mib)
        labels.append((len(data) / 1048576, data, f"install into a {len(data) / 1048576:.3f} MiB "
                       "daemon.json (long labels list)"))
    series("MiB", labels)

    # What a user feels on the largest files: the whole CLI, idempotent re-run included.
    env = {**os.environ, "NVDOCKER2_STATE_DIR": str(state)}
    base = ["--config", str(config), "--reload", "none", "--no-verify",
            "--runtime-path", "/usr/bin/runc"]
    for label, data in (("10000 runtimes", _runtimes_doc(10000)), ("1 MiB", _labels_doc(1.0))):
        t, cpu = median_time(lambda: cli("install", *base, env=env), runs,
                             lambda d=data: (config.write_bytes(d), shutil.rmtree(state, True)))
        report.add(Figure("scaling", f"CLI install, {label} daemon.json", t, "s",
                          f"median of {runs} CLI runs"), cpu)
        t, cpu = median_time(lambda: cli("install", *base, env=env), runs)
        report.add(Figure("scaling", f"CLI idempotent re-run, {label} daemon.json", t, "s",
                          f"median of {runs} CLI runs"), cpu)


# --- on a running dockerd -------------------------------------------------------------------------


def _private_dockerd():
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    import privatedockerd  # type: ignore[import-not-found]

    return privatedockerd


def _supports_reload(d, env: dict, work: Path) -> tuple[list[str], str]:
    """The daemon flags for install-to-verified, or the --reload none fallback and why."""
    flags = ["--reload", "signal", "--pidfile", str(d.pidfile), "--docker-host", d.host,
             "--timeout", "30"]
    probe = cli("install", "--config", str(d.config_file), "--runtime-path", "/usr/bin/runc",
                "--dry-run", *flags, env=env, check=False)
    if probe.returncode == 0:
        return flags, ""
    why = (probe.stderr.strip().splitlines() or ["?"])[0]
    return ["--reload", "none", "--no-verify"], f"--reload signal unavailable in this build ({why})"


def bench_dockerd(report: Report, runs: int, work: Path) -> None:
    try:
        pd = _private_dockerd()
    except ImportError as e:
        report.notes.append(f"dockerd figures not measured: {e}")
        return
    missing = pd.missing_prerequisites()
    if missing:
        report.notes.append("dockerd figures not measured: missing " + ", ".join(missing))
        print(f"dockerd figures skipped: missing {', '.join(missing)}", flush=True)
        return
    print("on a private dockerd:", flush=True)
    d = pd.PrivateDockerd()
    try:
        d.start()
        env = {**os.environ, "NVDOCKER2_STATE_DIR": str(work / "dockerd-state"),
               "DOCKER_HOST": d.host}
        flags, fallback = _supports_reload(d, env, work)
        base = ["--config", str(d.config_file), *flags]
        runtime = shutil.which("runc") or "/usr/bin/runc"

        def install() -> None:
            cli("install", *base, "--runtime-path", runtime, env=env)

        def uninstall() -> None:
            cli("uninstall", *base, env=env)

        if fallback:
            report.notes.append(fallback + "; install measured with --reload none")
            t, cpu = median_time(install, runs, uninstall)
            report.add(Figure("dockerd", "install, --reload none (no dockerd wiring in this build)",
                              t, "s", f"median of {runs} CLI runs", "≤ 1.5 s to verified", None,
                              "not the target figure: no reload, no verify"), cpu)
        else:
            t, cpu = median_time(install, runs, uninstall)
            report.add(Figure("dockerd", "install to verified (write, SIGHUP, /info reports it)",
                              t, "s", f"median of {runs} CLI runs", "≤ 1.5 s", t <= 1.5), cpu)
            info = d.info()
            assert "nvidia" in info.get("Runtimes", {}), info.get("Runtimes")
            t, cpu = median_time(install, runs)
            report.add(Figure("dockerd", "idempotent re-run of install (no write, no reload)", t,
                              "s", f"median of {runs} CLI runs", "≤ 0.3 s", t <= 0.3), cpu)
            t, cpu = median_time(uninstall, runs, install)
            report.add(Figure("dockerd", "uninstall to verified (transitional file, SIGHUP, "
                              "/info no longer lists it)", t, "s",
                              f"median of {runs} CLI runs"), cpu)
        doctor = cli("doctor", "--help", env=env, check=False)
        if doctor.returncode == 0:
            args = ["doctor", "--config", str(d.config_file), "--docker-host", d.host]
            t, cpu = median_time(lambda: cli(*args, env=env, check=False), runs)
            report.add(Figure("dockerd", "doctor", t, "s", f"median of {runs} CLI runs",
                              "≤ 2 s", t <= 2.0), cpu)
        else:
            report.add(Figure("dockerd", "doctor", None, "s", "", "≤ 2 s", None,
                              "nvdocker2 doctor is not in this build"))
    finally:
        d.cleanup()
        pd.remove_rootfs_tar()


def median_and_runs(spread: dict) -> tuple[float, str]:
    """A figure of bench_runtime.py's or bench_cdi.py's --json over repeated runs: its median,
    and each run's value as a note."""
    return spread["median"], f"runs: {', '.join(f'{v:.3f}' for v in spread['runs'])}"


def run_bench_script(name: str, rounds: int, repeat: int, anchor: Path | None,
                     extra: Sequence[str] = ()) -> dict:
    """Run bench/NAME with --json (and `extra`), print its table, return its figures
    (ValueError: why not)."""
    print(f"{name}:", flush=True)
    argv = [sys.executable, str(REPO / "bench" / name), "--rounds", str(rounds), "--repeat",
            str(repeat), "--json", *extra]
    if anchor is not None:
        argv += ["--anchor", str(anchor)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    out = r.stdout
    if r.returncode != 0:
        raise ValueError(f"exited {r.returncode}: {(r.stderr or out).strip()[-300:]}")
    data = json.loads(out[out.index("\n{") + 1:])
    print(out[:out.index("\n{")], flush=True)
    return data


def bench_docker_run(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """GPU `docker run`s through runc, nvdocker2 (pip install and the packages' launchers,
    and `--gpus all`) and, with `anchor`, NVIDIA's Go runtime and hook, interleaved in the same
    rounds on one private dockerd (bench/bench_runtime.py, which see): wall time ratios paired
    per round, and the CPU of the shim and the hook from getrusage of the real processes."""
    try:
        data = run_bench_script("bench_runtime.py", rounds, repeat, anchor)
    except ValueError as e:
        report.add(Figure("docker run", "GPU docker run / runc", None, "x", "", "≤ 1.04", None,
                          f"bench_runtime.py failed: {e}"))
        return
    fig = data["figures"]
    how = f"median of {rounds} interleaved rounds, ×{repeat} runs"

    def cell(name: str, key: str) -> tuple[float, str]:
        return median_and_runs(fig[name][key])

    ours = ("nvdocker2 (pip)", "nvdocker2 (packages)")
    for name in fig:
        if name == "runc":
            continue
        ratio, spread = cell(name, "ratio to runc")
        target = "≤ 1.04" if name in ours else ""
        report.add(Figure("docker run", f"GPU docker run / runc: {name}", ratio, "x", how,
                          target, ratio <= 1.04 if target else None,
                          f"{spread}; {fig[name]['wall ms']['median']:.0f} ms vs runc "
                          f"{fig['runc']['wall ms']['median']:.0f} ms"))
        if anchor is not None and name != "NVIDIA Go":
            ratio, spread = cell(name, "ratio to NVIDIA Go")
            target = "≤ 0.97" if name in ours else ""
            report.add(Figure("docker run", f"GPU docker run / NVIDIA Go: {name}", ratio, "x",
                              how, target, ratio <= 0.97 if target else None, spread))
        total, spread = cell(name, "shim + hook cpu ms")
        target = "≤ 15 ms" if name in ours else ""
        report.add(Figure("docker run", f"shim + hook CPU per GPU container start: {name}",
                          total, "ms", "getrusage of the real processes, " + how, target,
                          total <= 15 if target else None,
                          f"shim {fig[name]['shim cpu ms']['median']:.2f} ms (all "
                          f"{fig[name]['runtime calls']['median']:.0f} runtime calls), hook "
                          f"{fig[name]['hook cpu ms']['median']:.2f} ms; {spread}"))
    floor = data.get("floor")
    if floor:
        report.notes.append(
            "interpreter floor (CPU, net of the recorder's start, median of "
            f"{max(rounds, 30)} runs): " + "; ".join(f"{k} {v:.2f} ms" for k, v in floor.items())
            + "; what a Python `create` costs before any nvdocker2 module is imported")
    for n, summary in enumerate(data["runs"], 1):
        for name, f in summary.items():
            calls = ", ".join(f"{k} {v:.2f} ms" for k, v in f["cpu ms by call"].items())
            report.notes.append(f"run {n}, {name}: CPU by runtime call {calls}; hook "
                                f"{f['hook cpu ms']:.2f} ms; wall {f['wall ms']:.0f} ms")
    report.notes.append(
        "docker run figures: no GPU here; a static recorder (bench/recorder.c) stands in for "
        "runc (it then execs the real one) and for nvidia-container-cli, and logs the CPU the "
        "runtime or hook had used when it exec'd it; the recorder's own start, measured on the "
        "runc runs, is subtracted from each call")


def bench_cdi(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """CDI mode on Docker 28.5 (the sid tree of the platform matrix, bench/bench_cdi.py, which
    see): `docker run --device nvidia.com/gpu=all` with our spec, the same spec with NVIDIA's
    nvidia-cdi-hook in place of ours (with `anchor`) and with no hook (the floor), interleaved
    with runc in the same rounds."""
    if anchor is not None and not (anchor / "nvidia-cdi-hook").is_file():
        anchor = None
    try:
        data = run_bench_script("bench_cdi.py", rounds, repeat, anchor)
    except ValueError as e:
        report.add(Figure("CDI mode", "CDI docker run / runc: nvdocker2", None, "x", "",
                          "≤ 1.05", None, f"bench_cdi.py failed: {e}"))
        return
    fig = data["figures"]
    how = f"median of {rounds} interleaved rounds, ×{repeat} runs, Docker {data['docker']}"
    for name, f in fig.items():
        if name == "runc":
            continue
        ratio, spread = median_and_runs(f["ratio to runc"])
        ours = name == "nvdocker2 CDI"
        report.add(Figure("CDI mode", f"CDI docker run / runc: {name}", ratio, "x",
                          how, "≤ 1.05" if ours else "", ratio <= 1.05 if ours else None,
                          f"{spread}; {f['wall ms']['median']:.0f} ms vs runc "
                          f"{fig['runc']['wall ms']['median']:.0f} ms"))
        if "ratio to NVIDIA hook" in f and name != "NVIDIA hook":
            ratio, spread = median_and_runs(f["ratio to NVIDIA hook"])
            report.add(Figure("CDI mode", f"CDI docker run / NVIDIA hook: {name}", ratio, "x",
                              how, "", None, spread))
    report.notes.append(
        "CDI mode figures: the TEST FIXTURE fake driver (no GPU) in the Debian sid tree; "
        "'no hook' is the same spec without any hook (device nodes and mounts alone), the "
        "floor a hook adds to")


def bench_direct_create(report: Report, rounds: int, repeat: int) -> None:
    """Direct mode's `create` on a big node (8 GPUs x 7 MIG devices, every capability: the
    graphics libraries and files, DRI nodes) against one GPU with compute alone, paired in the
    same rounds (bench/bench_direct.py, which see): CPU up to the exec of runc."""
    try:
        data = run_bench_script("bench_direct.py", rounds, repeat, None)
    except ValueError as e:
        report.add(Figure("direct create", "direct create CPU: 8 GPUs x 7 MIG / 1 GPU", None,
                          "x", "", "≤ 1.3", None, f"bench_direct.py failed: {e}"))
        return
    how = f"median of {rounds} paired rounds, ×{repeat} runs"
    small = "1 GPU, compute"
    for name, (devices, mounts) in data["devices, mounts"].items():
        value, spread = median_and_runs(data[name])
        report.add(Figure("direct create", f"direct create CPU: {name}", value, "ms",
                          "getrusage at the exec of runc (a recorder), " + how, "", None,
                          f"{devices} device nodes, {mounts} driver mounts; {spread}"))
    for key in data:
        if key.startswith("ratio: "):
            ratio, spread = median_and_runs(data[key])
            report.add(Figure("direct create", f"direct create CPU: {key[7:]} / {small}", ratio,
                              "x", "paired per round, " + how, "≤ 1.3", ratio <= 1.3, spread))
    report.notes.append(
        "direct create figures: the TEST FIXTURE fake driver (no GPU); the runtime's whole "
        "`create` (launcher, interpreter, config.toml, discovery, the spec written) up to its "
        "exec of runc, net of the recorder's own start")


def bench_node(report: Report, part: str, rounds: int, repeat: int, anchor: Path | None,
               idle: float) -> None:
    """A node's chores (bench/bench_node.py, which see): `cdi generate` on 16 GPUs and on
    8 GPUs x 7 MIG beside NVIDIA's `nvidia-ctk cdi generate` (`anchor`), `cdi refresh` that
    changes nothing (part "spec"); the agent's memory and CPU idle and in a drift storm
    (part "agent")."""
    section = {"spec": "CDI spec and refresh", "agent": "agent"}[part]
    if anchor is not None and not (anchor / "nvidia-ctk").is_file():
        anchor = None
    extra = ["--part", part] + (["--idle", f"{idle:g}"] if part == "agent" else [])
    try:
        data = run_bench_script("bench_node.py", rounds, repeat, anchor, extra)
    except ValueError as e:
        report.add(Figure(section, f"{section}: bench_node.py --part {part}", None, "", "", "",
                          None, f"bench_node.py failed: {e}"))
        return
    fig = data["figures"]
    if part == "spec":
        how = f"median of {rounds} rotating rounds, ×{repeat} runs"
        for name, f in fig.items():
            wall, spread = median_and_runs(f["wall ms"])
            ratio, _ = median_and_runs(f["ratio to python3 -I"])
            refresh = name.startswith("cdi refresh") and name.endswith("python3 -I")
            report.add(Figure(section, name, wall, "ms", how, "≤ 50 ms" if refresh else "",
                              wall <= 50 if refresh else None,
                              f"{ratio:.2f}× python3 -I of the same round; {spread}"),
                       f["cpu ms"]["median"] / 1000)
        for name, why in data["nvidia-ctk failed"].items():
            report.add(Figure(section, name, None, "ms", "", "", None, why))
        left = data["refresh left the spec"]
        writes = [w for w in data["refresh writes"] if "/state/lock" not in w]
        report.add(Figure(section, "cdi refresh, nothing changed: the spec left alone",
                          float(all(left.values()) and not writes), "", "1 = inode, mtime and "
                          f"bytes the same over {data['refresh runs']} runs, no write or rename "
                          "but the state's lock under strace", "1", all(left.values())
                          and not writes, "; ".join(writes) or "strace: opens for writing "
                          "only the state directory's lock; no rename"))
        return
    how = (f"{repeat} agents, each {data['idle']:g} s idle, then {data['storm']} rewrites in "
           f"{data['storm seconds']:g} s; /proc of the agent's process")
    targets = {"VmRSS kB": ("≤ 40 MB", 40.0), "VmHWM kB": ("≤ 40 MB", 40.0),
               "idle cpu %": ("≤ 0.1 %", 0.1)}
    for key, f in fig.items():
        value, spread = median_and_runs(f)
        target, limit = targets.get(key, ("", None))
        unit = next((u for u in ("kB", "%", "s") if key.endswith(" " + u)), "")
        if unit == "kB":
            value, spread = median_and_runs({"median": f["median"] / 1024,
                                             "runs": [v / 1024 for v in f["runs"]]})
            unit, key = "MB", key.replace(" kB", "")
        report.add(Figure(section, f"agent: {key}", value, unit, how, target,
                          value <= limit if limit is not None else None, spread))
    report.notes.append(
        f"agent figures: `nvdocker2 agent --engine docker --host-root DIR --reload none "
        f"--no-verify --backoff {data['backoff']:g}` on private files (no engine); exits "
        f"{data['exits']}, config restored on SIGTERM: {data['restored']}")
def bench_per_size(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """The start path at 1, 8 and 16 GPUs, 8 GPUs x 7 MIG and with the graphics libraries,
    ours beside NVIDIA's on the same fake tree (bench/bench_scale.py, which see): CPU per
    call of create, the prestart hook and the CDI hooks, ours / NVIDIA's per round, the growth
    from 1 to 16 GPUs and the cost per added GPU."""
    section = "per size"
    if anchor is None:
        report.add(Figure(section, "CPU per call: ours / NVIDIA's", None, "x", "", "≤ 1.0",
                          None, "needs --anchor (NVIDIA's binaries on the same trees)"))
        return
    try:
        data = run_bench_script("bench_scale.py", rounds, repeat, anchor)
    except ValueError as e:
        report.add(Figure(section, "CPU per call: ours / NVIDIA's", None, "x", "", "≤ 1.0",
                          None, f"bench_scale.py failed: {e}"))
        return
    how = f"median of {rounds} interleaved rounds, ×{repeat} runs"
    for key, spread in data["figures"].items():
        value, runs = median_and_runs(spread)
        stage, size, what = key.split(" | ")
        if what.endswith("cpu ms"):
            report.add(Figure(section, f"{stage} CPU, {size}: {what[:-7]}", value, "ms",
                              "getrusage of the real processes, " + how, "", None, runs))
        elif what == "ours / NVIDIA":
            report.add(Figure(section, f"{stage} CPU, {size}: ours / NVIDIA's", value, "x",
                              "paired per round, " + how, "≤ 1.0", value <= 1.0, runs))
        elif size == "growth 16/1":
            ours = what == "ours"
            report.add(Figure(section, f"{stage} CPU, 16 GPUs / 1 GPU: {what}", value, "x",
                              "ratio of the medians, " + how, "≤ 1.3" if ours else "",
                              value <= 1.3 if ours else None, runs))
        else:
            report.add(Figure(section, f"{stage} CPU per added GPU: {what}", value, "ms",
                              "least-squares slope over 1, 8 and 16 GPUs, " + how, "", None,
                              runs))
    for key, why in data["NVIDIA failed"].items():
        report.notes.append(f"per size, NVIDIA's {key} not measured: {why}")
    report.notes.append(
        "per size figures: the TEST FIXTURE fake driver (no GPU) with the fixture's stand-in "
        "NVML (plus the calls NVIDIA's jit-cdi makes); graphics: "
        + "; ".join(data["graphics"].values()))
def bench_concurrent(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """16 and 64 GPU containers started at once on one private dockerd and one private
    containerd (ctr run), runc, nvdocker2 and NVIDIA's Go interleaved in the same rounds
    (bench/bench_many.py, which see): p50, p95 and makespan, paired per round; the peak of
    creates in flight and the lock calls of every runtime process, as the evidence that
    nothing serialises the starts."""
    try:
        data = run_bench_script("bench_many.py", rounds, repeat, anchor, ["--only", "concurrent"])
    except ValueError as e:
        report.add(Figure("concurrent", "concurrent GPU starts p50 / NVIDIA Go: nvdocker2",
                          None, "x", "", "≤ 1.0", None, f"bench_many.py failed: {e}"))
        return
    many = data["concurrent"]
    how = f"median of {rounds} interleaved rounds, ×{repeat} runs"
    for key, fig in many["figures"].items():
        ours = key.endswith(": nvdocker2")
        cpu = fig["cpu ms per container"]["median"]
        for unit_key, unit in (("p50 ms", "ms"), ("p95 ms", "ms"), ("makespan s", "s")):
            value, runs = median_and_runs(fig[unit_key])
            report.add(Figure("concurrent", f"{key}: {unit_key.split()[0]}", value, unit, how,
                              note=f"{runs}; CPU of the runtime calls and the hook {cpu:.1f} "
                              "ms per container"))
        for ratio_key in [k for k in fig if " / " in k]:
            value, runs = median_and_runs(fig[ratio_key])
            target = "≤ 1.0" if ours and ratio_key in ("p50 / NVIDIA Go", "p95 / NVIDIA Go") \
                else ""
            report.add(Figure("concurrent", f"{key}: {ratio_key}", value, "x",
                              "paired per round, " + how, target,
                              value <= 1.0 if target else None, runs))
    size = max(data["sizes"])
    peaks: dict[str, list[int]] = {}
    for run in many["in flight"]:
        for name, peak in run.items():
            peaks.setdefault(name, []).append(peak)
    for name, values in peaks.items():
        ours = name == "nvdocker2"
        nvidia = statistics.median(peaks["NVIDIA Go"]) if "NVIDIA Go" in peaks else size
        value = statistics.median(values)
        report.add(Figure("concurrent", f"peak GPU creates in flight of {size} started at once:"
                          f" {name}", value, "", f"one docker batch per run, ×{repeat} runs",
                          "≥ NVIDIA Go's" if ours else "", value >= nvidia if ours else None,
                          f"runs: {', '.join(map(str, values))}; from CLOCK_MONOTONIC at each "
                          "runtime create (a recorder before the runtime) and at the hook's "
                          "exec of nvidia-container-cli (the cli recorder)"))
    locks = many["lock calls"]
    for name, f in locks.items():
        ours = name == "nvdocker2"
        report.add(Figure("concurrent", f"lock calls that can wait, one batch: {name}",
                          f["waiting lock calls"], "", f"strace -f -e trace=flock,fcntl of "
                          f"every runtime call of {min(data['sizes'])} containers started at once",
                          "0" if ours else "", f["waiting lock calls"] == 0 if ours else None,
                          f"{f['runtime calls traced']} runtime calls traced (the hook and runc "
                          f"within them); all lock calls {f['lock calls']} (runc alone "
                          f"{locks['runc']['lock calls']}): {'; '.join(f['examples']) or 'none'}"))
    report.notes.append(
        "concurrent figures: no GPU; the static recorder (bench/recorder.c) stands in for "
        "nvidia-container-cli (legacy mode) and for runc (it execs the real one); containerd "
        "through `ctr run --runc-binary`, the runtime the shim execs as BinaryName makes it")


def bench_cold_start(report: Report, rounds: int, repeat: int, anchor: Path | None) -> None:
    """The first GPU container after the page cache is dropped (bench/bench_many.py): runc,
    nvdocker2 and NVIDIA's Go in rotated order, wall paired with runc's of the round, CPU of
    every runtime call and the hook (getrusage at the recorders)."""
    try:
        data = run_bench_script("bench_many.py", rounds, repeat, anchor, ["--only", "cold-start"])
    except ValueError as e:
        report.add(Figure("cold start", "cold GPU docker run / runc: nvdocker2", None, "x", "",
                          "", None, f"bench_many.py failed: {e}"))
        return
    cold = data["cold-start"]
    how = f"median of {rounds} rounds, each after dropping the page cache, ×{repeat} runs"
    for name, fig in cold["figures"].items():
        value, runs = median_and_runs(fig["wall ms"])
        cpu, cpu_runs = median_and_runs(fig["cpu ms"])
        report.add(Figure("cold start", f"cold GPU docker run: {name}", value, "ms", how,
                          note=f"{runs}; CPU of the runtime calls and the hook {cpu:.1f} ms "
                          f"({cpu_runs})"))
        for key in [k for k in fig if k.startswith("wall / ")]:
            value, runs = median_and_runs(fig[key])
            ours = name == "nvdocker2" and key == "wall / NVIDIA Go"
            report.add(Figure("cold start", f"cold GPU docker run {key}: {name}", value, "x",
                              "paired per round, " + how, "≤ 1.0" if ours else "",
                              value <= 1.0 if ours else None, runs))
    report.notes.append(f"cold start figures: the page cache emptied by {cold['how']}")


# --- the report ----------------------------------------------------------------------------------


def _version(argv: list[str], lines: int = 1) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    return "\n".join(out.strip().splitlines()[:lines]) or "?"


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def settle(limit: float) -> None:
    """Wait (up to `limit` s) until the 1-minute load average is below the number of cores."""
    cores = os.cpu_count() or 1
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= cores and time.monotonic() < deadline:
        print(f"waiting for a quieter machine: load {_load()}, {cores} cores", flush=True)
        time.sleep(15)


def machine() -> list[tuple[str, str]]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return [
        ("date (UTC)", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("CPU", model),
        ("cores", str(os.cpu_count())),
        ("load average at the start (1, 5, 15 min)", _load()),
        ("kernel", platform.release()),
        ("Python", platform.python_version()),
        ("nvdocker2", nvdocker2.__version__),
        ("dockerd", _version(["dockerd", "--version"])),
        ("containerd", _version(["containerd", "--version"])),
        ("runc", _version(["runc", "--version"])),
    ]


def _load_warning(info: list[tuple[str, str]]) -> list[str]:
    """A paragraph saying so when other work loaded the machine during the run."""
    facts = dict(info)
    cores = int(facts.get("cores") or 1)
    loads = [facts.get(k, "?").split()[0] for k in ("load average at the start (1, 5, 15 min)",
                                                    "load average at the end")]
    try:
        loaded = max(float(x) for x in loads) >= cores
    except ValueError:
        return []
    if not loaded:
        return []
    return [f"**Measured on a loaded machine**: the 1-minute load average was {loads[0]} at the "
            f"start and {loads[1]} at the end, on {cores} cores. Wall and CPU times are inflated "
            "and spread widely; read the ratios measured in the same rounds (docker run), and "
            "rerun on a quiet machine for the absolute figures.", ""]


def write_results(path: Path, report: Report, info: list[tuple[str, str]], runs: int,
                  elapsed: float, merge: bool = False) -> None:
    """RESULTS.md of this run; with `merge`, only this run's sections replaced in the file
    there is (merge_results)."""
    lines = [
        "# Benchmark results",
        "",
        f"Written by `bench/run.py` (`make bench`) in one run of {elapsed:.0f} s. Every figure is "
        f"the median of {runs} runs, or a ratio or least-squares fit of such medians, measured in "
        "that run on this machine. Value is wall time (what a user waits); CPU is the median "
        "user + system time of the same runs, which does not count waiting for a core and so "
        "shows the cost itself when the machine is shared (see the load average). Targets are "
        "judged on wall time. Do not edit by hand: rerun.",
        "",
        *_load_warning(info),
        "| machine | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in info],
        "",
    ]
    for section in dict.fromkeys(f.section for f in report.figures):
        lines += [f"## {section}", "", "| figure | value | CPU | target | how | note |",
                  "|---|---|---|---|---|---|"]
        for f in report.figures:
            if f.section != section:
                continue
            target = f.target + ("" if f.ok is None else (" met" if f.ok else " **missed**"))
            cpu = f"{f.cpu:.3f} s" if f.cpu is not None else ""
            lines.append(f"| {f.name} | {f.cell()} | {cpu} | {target} | {f.how} | {f.note} |")
        lines.append("")
    missed = [f for f in report.figures if f.ok is False]
    lines += ["## Targets missed", ""]
    lines += [f"- {f.name}: {f.cell()} (target {f.target})" for f in missed] or ["- none"]
    lines.append("")
    if report.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    text = "\n".join(lines)
    if merge and path.exists():
        text = merge_results(path.read_text(), text, dict(info))
    path.write_text(text)


def _blocks(text: str) -> list[list[str]]:
    """The text's lines cut before each `## ` heading (the first block is the preamble)."""
    blocks: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.startswith("## "):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def _figure_names(block: list[str]) -> set[str]:
    return {line.split(" | ")[0][2:] for line in block[4:] if line.startswith("| ")}


def merge_results(old: str, new: str, info: dict[str, str]) -> str:
    """`old` (a RESULTS.md) with the sections of `new` in place of its own of the same name,
    each saying when and at what load it was measured; the missed targets of the replaced
    sections are dropped and the new ones added, the new notes appended (but for those it
    has). The preamble and every other section stay as `old` has them (measured in the run
    its preamble describes)."""
    keep, fresh = _blocks(old), _blocks(new)
    special = ("## Targets missed", "## Notes")
    sections = [b for b in fresh[1:] if b[0] not in special]
    stamp = (f"Measured {info.get('date (UTC)', '?')} with `run.py --merge` (load average "
             f"{info.get('load average at the start (1, 5, 15 min)', '?')} at the start, "
             f"{info.get('load average at the end', '?')} at the end); the other sections "
             "are from the run the top of this file describes.")
    replaced: set[str] = set()
    for block in sections:
        block[1:1] = ["", stamp]
        at = next((i for i, b in enumerate(keep) if b[0] == block[0]), None)
        if at is None:
            at = next((i for i, b in enumerate(keep) if b[0] in special), len(keep))
            keep.insert(at, block)
        else:
            replaced |= _figure_names(keep[at])
            keep[at] = block
    new_missed = [line for b in fresh if b[0] == special[0] for line in b[1:]
                  if line.startswith("- ") and line != "- none"]
    new_notes = [line for b in fresh if b[0] == special[1] for line in b[1:]
                 if line.startswith("- ")]
    for block in keep:
        if block[0] == special[0]:
            # a figure's name may hold ": " itself ("create CPU, 1 GPU: ours / NVIDIA's")
            old_missed = [line for line in block[1:] if line.startswith("- ")
                          and line != "- none"
                          and not any(line.startswith(f"- {name}: ") for name in replaced)]
            block[1:] = ["", *(old_missed + new_missed or ["- none"]), ""]
        elif block[0] == special[1]:
            while block and block[-1] == "":
                block.pop()
            block += [note for note in new_notes if note not in block] + [""]
    return "\n".join(line for b in keep for line in b)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per median (at least 10)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    ap.add_argument("--no-dockerd", action="store_true", help="skip the private-dockerd figures")
    ap.add_argument("--settle", type=float, default=300, metavar="SECONDS",
                    help="first wait up to this long for the 1-minute load average to drop "
                    "below the number of cores (a shared machine skews wall times)")
    ap.add_argument("--rounds", type=int, default=30,
                    help="docker run: interleaved rounds per run (default 30)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="docker run: runs of all the rounds, for the spread (default 3)")
    ap.add_argument("--cdi-rounds", type=int, default=20,
                    help="CDI mode: interleaved rounds per run (default 20)")
    ap.add_argument("--many-rounds", type=int, default=3,
                    help="concurrent: interleaved rounds (batches of 16 and 64) per run")
    ap.add_argument("--cold-rounds", type=int, default=10,
                    help="cold start: interleaved rounds per run (default 10)")
    ap.add_argument("--anchor", type=Path, metavar="DIR",
                    help="NVIDIA's nvidia-container-runtime and nvidia-container-runtime-hook"
                    " (docker run), nvidia-cdi-hook (CDI mode) and nvidia-ctk (installer,"
                    " cdi-spec), run in the same rounds")
    ap.add_argument("--agent-idle", type=float, default=600, metavar="SECONDS",
                    help="agent: the idle period each agent is measured over (default 600)")
    ap.add_argument("--only", choices=SECTIONS,
                    action="append",
                    help="run only these sections (repeatable)")
    ap.add_argument("--merge", action="store_true",
                    help="put this run's sections into the --out file there is, in place of"
                    " its own, and keep its other sections (with --only)")
    args = ap.parse_args(argv)
    if args.runs < 10:
        ap.error("--runs must be at least 10: every figure is a median of at least 10 runs")
    settle(args.settle)
    info = machine()
    if args.anchor is not None and {"docker-run", "concurrent", "cold-start"} & set(
            args.only or SECTIONS):
        info.append(("NVIDIA Go toolkit (--anchor)", " ".join(_version(
            [str(args.anchor / "nvidia-container-runtime"), "--version"], lines=2).split())))
    for k, v in info:
        print(f"{k}: {v}")
    report = Report()
    t0 = time.monotonic()
    sections = args.only or list(SECTIONS)
    with tempfile.TemporaryDirectory(prefix="nvd2-bench-") as tmp:
        work = Path(tmp)
        os.environ["NVDOCKER2_STATE_DIR"] = str(work / "state")
        if "installer" in sections:
            bench_installer(report, args.runs, work, args.repeat, args.anchor)
        if "scaling" in sections:
            bench_scaling(report, args.runs, work)
        if "dockerd" in sections:
            if args.no_dockerd:
                report.notes.append("dockerd figures not measured: --no-dockerd")
            else:
                bench_dockerd(report, args.runs, work)
        if "docker-run" in sections:
            if args.no_dockerd:
                report.notes.append("docker run figures not measured: --no-dockerd")
            else:
                bench_docker_run(report, args.rounds, args.repeat, args.anchor)
        if "cdi" in sections:
            if args.no_dockerd:
                report.notes.append("CDI mode figures not measured: --no-dockerd")
            else:
                bench_cdi(report, args.cdi_rounds, args.repeat, args.anchor)
        if "direct-create" in sections:
            bench_direct_create(report, args.rounds, args.repeat)
        for part in ("cdi-spec", "agent"):
            if part in sections:
                bench_node(report, part.replace("cdi-", ""), args.cdi_rounds, args.repeat,
                           args.anchor, args.agent_idle)
        if "per-size" in sections:
            bench_per_size(report, args.rounds, args.repeat, args.anchor)
        for name, bench, rounds in (("concurrent", bench_concurrent, args.many_rounds),
                                    ("cold-start", bench_cold_start, args.cold_rounds)):
            if name in sections:
                if args.no_dockerd:
                    report.notes.append(f"{name} figures not measured: --no-dockerd")
                else:
                    bench(report, rounds, args.repeat, args.anchor)
    info.append(("load average at the end", _load()))
    write_results(args.out, report, info, args.runs, time.monotonic() - t0, args.merge)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
