#!/usr/bin/env python3
"""The platform matrix (`make matrix`): build the .deb once, then run tests/platforms once per
Debian tree (Debian 12, 13, sid: Docker 20.10, 26.1, 28.5), MATRIX_JOBS at a time (default 2),
and print one row per platform with pass/fail, the test counts and the time.

    scripts/matrix.py [SUITE ...]      default: every suite of tests/platforms/trees.py

Exit 0 when every platform passed; 1 when one failed (its row says why in one line, and the
end of its pytest output follows the table); 2 when the .deb does not build. Trees come from
the cache under /var/cache/nvdocker2-tests (NVDOCKER2_TEST_CACHE); the first run downloads
them. Under CI=true a platform that cannot be built or started fails; it is never skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "platforms"))

import trees  # noqa: E402


@dataclass
class Row:
    suite: trees.Suite
    result: str = "fail"
    counts: str = ""
    seconds: float = 0.0
    reason: str = ""
    log: Path | None = None


def build_deb(dist: Path) -> Path | None:
    proc = subprocess.run(["make", "-C", str(REPO), "--no-print-directory", "deb",
                           f"DIST={dist}"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        return None
    return Path(proc.stdout.strip().splitlines()[-1])


def first_problem(log: Path) -> str:
    """The first FAILED/ERROR/SKIPPED line of pytest's short summary, else the last line."""
    lines = log.read_text(errors="replace").splitlines()
    for prefix in ("FAILED ", "ERROR ", "SKIPPED "):
        for line in lines:
            if line.startswith(prefix):
                return line[:300]
    return (lines[-1] if lines else "no output")[:300]


def run_platform(suite: trees.Suite, deb: Path, work: Path) -> Row:
    row = Row(suite, log=work / f"{suite.name}.log")
    junit = work / f"{suite.name}.xml"
    env = dict(os.environ, NVDOCKER2_PLATFORMS=suite.name, NVDOCKER2_DEB=str(deb))
    started = time.monotonic()
    with open(row.log, "w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
             f"--junitxml={junit}", str(REPO / "tests" / "platforms")],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, check=False)
    row.seconds = time.monotonic() - started
    try:
        suites = ET.parse(junit).getroot()
        suite_el = suites if suites.tag == "testsuite" else suites[0]
        total, failed, errors, skipped = (int(suite_el.get(k, 0)) for k in
                                          ("tests", "failures", "errors", "skipped"))
        row.counts = f"{total - failed - errors - skipped}/{total}"
    except (OSError, ET.ParseError, IndexError):
        failed = errors = skipped = 0
        row.counts = "-"
    if proc.returncode == 0 and not skipped:
        row.result = "pass"
    elif proc.returncode == 0:
        row.result, row.reason = "skip", first_problem(row.log)
    else:
        row.reason = first_problem(row.log)
    return row


def table(rows: list[Row]) -> str:
    head = ("platform", "Docker", "containerd", "Python", "result", "tests", "time")
    body = [(r.suite.platform, r.suite.docker, r.suite.containerd, r.suite.python, r.result,
             r.counts, f"{r.seconds:.0f}s") for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
             for line in [head, *body]]
    for r in rows:
        if r.reason:
            lines.append(f"{r.suite.platform}: {r.result}: {r.reason}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names = argv or list(trees.SUITES)
    unknown = [n for n in names if n not in trees.SUITES]
    if unknown:
        print(f"error: unknown platform {', '.join(unknown)}", file=sys.stderr)
        print(f"hint: choose from {', '.join(trees.SUITES)}", file=sys.stderr)
        return 2
    jobs = max(1, int(os.environ.get("MATRIX_JOBS", "2")))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nvd2-matrix-") as tmp:
        work = Path(tmp)
        deb = build_deb(work)
        if deb is None:
            print("error: make deb failed (above); no platform was run", file=sys.stderr)
            return 2
        print(f"matrix: {deb.name} on {', '.join(names)}, {jobs} at a time", flush=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(lambda n: run_platform(trees.SUITES[n], deb, work), names))
        print(table(rows))
        for row in rows:
            if row.result == "fail" and row.log is not None:
                tail = row.log.read_text(errors="replace").splitlines()[-60:]
                print(f"\n--- {row.suite.platform}: end of the pytest output ---")
                print("\n".join(tail))
    print(f"matrix: {time.monotonic() - started:.0f}s in all")
    return 1 if any(r.result == "fail" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
