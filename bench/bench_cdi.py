#!/usr/bin/env python3
"""What CDI mode's createContainer hook costs a GPU container start (a script, not a test).

Run as root on a machine that can run the platform matrix (tests/platforms):

    .venv/bin/python bench/bench_cdi.py [--rounds 20] [--repeat 3] [--anchor DIR] [--deb PATH]
                                        [--json]

It opens the Debian sid tree of the matrix (Docker 28.5, which reads CDI specs by default),
installs the .deb (`make deb`, or `--deb`), puts the TEST FIXTURE fake driver at
/opt/nvd2-driver (real device nodes, tiny ELF libraries: there is no GPU), writes the spec with
`nvdocker2 install --mode cdi` and runs `docker run --rm --network=none IMAGE true` in
rotating order, once per round, through:

- `runc`: no device (the reference every figure is paired with, round by round);
- `nvdocker2 CDI`: `--device nvidia.com/gpu=all` with the spec as written (our hook);
- `NVIDIA hook` (with `--anchor DIR` holding `nvidia-cdi-hook`): the same spec under another
  kind, its hook replaced by NVIDIA's two (`create-symlinks` with the same links, then
  `update-ldcache` with the same folders), as NVIDIA's generated specs have them;
- `no hook`: the same spec without any hook: the floor (device nodes and mounts alone;
  the libraries are then neither linked nor in the ld cache).

Reported per variant: the median over rounds of the wall time and of its ratio to runc's run
in the same round (and to NVIDIA's hook, with --anchor); with --repeat N each figure is given
as the median of the runs' medians and their spread.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "platforms"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import trees  # noqa: E402
from bench_runtime import print_table, run_rounds, spread  # noqa: E402
from fixtures.fake_driver import build_fake_driver  # noqa: E402

from nvdocker2 import __version__  # noqa: E402

DRIVER = "/opt/nvd2-driver"
CONFIG = "/opt/nvd2/config.toml"
INSTALLED_SPEC = "/etc/cdi/nvidia.yaml"  # what `install --mode cdi` writes
KIND = "nvidia.com/gpu"
# The comparison specs: the same devices and edits under kinds of their own.
NVIDIA_KIND = "bench.nvdocker2.invalid/nvidia-hook"
BARE_KIND = "bench.nvdocker2.invalid/no-hook"
CDI_HOOK = "/usr/local/bin/nvidia-cdi-hook"
KEYS = ("wall ms", "ratio to runc", "ratio to NVIDIA hook")


def make_deb(work: Path) -> Path:
    dist = work / "dist"
    proc = subprocess.run(["make", "-C", str(REPO), "deb", f"DIST={dist}"], capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"bench_cdi.py: error: make deb failed: {proc.stderr.strip()[-300:]}")
    return dist / f"nvdocker2_{__version__}_all.deb"


def nvidia_hooks(ours: dict) -> list[dict]:
    """NVIDIA's createContainer hooks doing what our one hook entry does: the same soname
    links (theirs are TARGET::LINK, ours LINK::TARGET) and the same ld-cache folders."""
    args = ours["args"]
    links, folders = [], []
    for flag, value in zip(args, args[1:]):
        if flag == "--link":
            link, _, target = value.partition("::")
            links += ["--link", f"{target}::{link}"]
        elif flag == "--folder":
            folders += ["--folder", value]
    env = ours.get("env", [])
    hooks = []
    if links:
        hooks.append({"hookName": "createContainer", "path": CDI_HOOK,
                      "args": ["nvidia-cdi-hook", "create-symlinks", *links], "env": env})
    hooks.append({"hookName": "createContainer", "path": CDI_HOOK,
                  "args": ["nvidia-cdi-hook", "update-ldcache", *folders], "env": env})
    return hooks


def variant_spec(spec: dict, kind: str, hooks: list[dict] | None) -> dict:
    out = copy.deepcopy(spec)
    out["kind"] = kind
    edits = out["containerEdits"]
    edits.pop("hooks", None)
    if hooks:
        edits["hooks"] = hooks
    return out


def set_up(tree: trees.Tree, deb: Path, anchor: Path | None) -> dict[str, list[str]]:
    tree.install_deb(deb, env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
    build_fake_driver(tree.path(DRIVER))
    tree.path("/opt/nvd2").mkdir(parents=True, exist_ok=True)
    tree.path(CONFIG).write_text(f'[nvidia-container-runtime]\ndriver-root = "{DRIVER}"\n')
    env = {"NVIDIA_CONTAINER_RUNTIME_CONFIG": CONFIG}
    tree.ok("nvdocker2 install --mode cdi --json >/dev/null", env=env)
    spec = yaml.safe_load(tree.path(INSTALLED_SPEC).read_text())
    ours = spec["containerEdits"].get("hooks", [])
    if len(ours) != 1:
        raise SystemExit(f"bench_cdi.py: error: the spec has {len(ours)} hooks, not 1")
    specs = {BARE_KIND: variant_spec(spec, BARE_KIND, None)}
    if anchor is not None:
        shutil.copy(anchor / "nvidia-cdi-hook", tree.path(CDI_HOOK))
        tree.path(CDI_HOOK).chmod(0o755)
        specs[NVIDIA_KIND] = variant_spec(spec, NVIDIA_KIND, nvidia_hooks(ours[0]))
    for kind, doc in specs.items():
        name = kind.split("/")[1]
        tree.path(f"/etc/cdi/bench-{name}.json").write_text(json.dumps(doc, indent=1))
    runs = {"runc": [], "nvdocker2 CDI": ["--device", f"{KIND}=all"]}
    if anchor is not None:
        runs["NVIDIA hook"] = ["--device", f"{NVIDIA_KIND}=all"]
    runs["no hook"] = ["--device", f"{BARE_KIND}=all"]
    return runs


def one_run(dockerd, flags: list[str]) -> float:
    start = time.perf_counter()
    dockerd.docker("run", "--rm", "--network=none", *flags, dockerd.image, "true",
                   timeout=120)
    return time.perf_counter() - start


def check_libraries_load(dockerd, runs: dict[str, list[str]]) -> None:
    """Every variant but the floor must leave libcuda.so.1 linked and in the ld cache."""
    for name, flags in runs.items():
        if name in ("runc", "no hook"):
            continue
        out = dockerd.docker("run", "--rm", "--network=none", *flags, dockerd.image, "sh",
                             "-c", "ls -l /usr/lib/x86_64-linux-gnu/libcuda.so.1 && "
                             "grep -c libcuda.so.1 /etc/ld.so.cache").stdout
        if "libcuda.so.1 ->" not in out or out.strip().splitlines()[-1] == "0":
            raise SystemExit(f"bench_cdi.py: error: {name}: libcuda.so.1 not linked or not in"
                             f" the ld cache:\n{out}")


def summarize(results: dict[str, list[float]]) -> dict[str, dict]:
    base = results["runc"]
    anchor = results.get("NVIDIA hook")
    out = {}
    for name, walls in results.items():
        fig = {"wall ms": statistics.median(walls) * 1000,
               "ratio to runc": statistics.median(w / b for w, b in zip(walls, base))}
        if anchor is not None:
            fig["ratio to NVIDIA hook"] = statistics.median(w / a for w, a in zip(walls, anchor))
        out[name] = fig
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of all the rounds")
    parser.add_argument("--anchor", type=Path, metavar="DIR",
                        help="a directory holding NVIDIA's nvidia-cdi-hook, to run alongside")
    parser.add_argument("--deb", type=Path, help="the .deb to install (default: make deb)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.rounds < 10 or args.repeat < 1:
        parser.error("--rounds must be at least 10 and --repeat at least 1")
    anchor = args.anchor.resolve() if args.anchor else None
    if anchor is not None and not (anchor / "nvidia-cdi-hook").is_file():
        raise SystemExit(f"bench_cdi.py: error: --anchor {anchor}: no nvidia-cdi-hook"
                         "\nhint: build NVIDIA's binaries as docs/benchmarks.md says")
    work = Path(tempfile.mkdtemp(prefix="nvd2-bench-cdi-"))
    tree = None
    try:
        deb = args.deb.resolve() if args.deb else make_deb(work)
        tree = trees.Tree.create("sid")
        dockerd = trees.start_dockerd(tree)
        print(f"dockerd {dockerd.version}, nvdocker2 {__version__}", flush=True)
        runs = set_up(tree, deb, anchor)
        check_libraries_load(dockerd, runs)

        def one(flags: list[str]) -> float:
            return one_run(dockerd, flags)

        run_rounds(runs, 1, one)  # warm-up, not counted
        summaries = []
        for n in range(args.repeat):
            summary = summarize(run_rounds(runs, args.rounds, one))
            summaries.append(summary)
            print_table(summary, f"run {n + 1} of {args.repeat}: {args.rounds} rounds, medians",
                        KEYS)
        total = spread(summaries)
        print_table(total, f"over {args.repeat} runs: median [lowest-highest] of the runs' "
                    "medians", KEYS)
        if args.json:
            print(json.dumps({"rounds": args.rounds, "repeat": args.repeat,
                              "docker": dockerd.version, "anchor": str(anchor or ""),
                              "figures": total, "runs": summaries}, indent=2))
    except trees.TreeUnavailable as err:
        raise SystemExit(f"bench_cdi.py: error: {err}") from None
    finally:
        if tree is not None:
            tree.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
