"""bench/run.py --merge: a run of some sections replaces those in RESULTS.md and keeps the rest."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _run_py():
    """bench/run.py as a module (not a package's: bench/ is scripts)."""
    if "bench_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_run"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["bench_run"]


OLD = """# Benchmark results

Written by `bench/run.py` (`make bench`) in one run of 600 s.

## installer

| figure | value | CPU | target | how | note |
|---|---|---|---|---|---|
| install | 0.2 s |  | ≤ 0.1 s **missed** | median |  |

## direct create

| figure | value | CPU | target | how | note |
|---|---|---|---|---|---|
| direct ratio | 1.500 |  | ≤ 1.3 **missed** | paired |  |

## Targets missed

- install: 0.2 s (target ≤ 0.1 s)
- direct ratio: 1.500 (target ≤ 1.3)

## Notes

- an old note
"""

NEW = """# Benchmark results

Written by `bench/run.py` (`make bench`) in one run of 9 s.

| machine | |
|---|---|
| date (UTC) | 2026-12-07 13:10 |

## direct create

| figure | value | CPU | target | how | note |
|---|---|---|---|---|---|
| direct ratio | 1.200 |  | ≤ 1.3 met | paired |  |

## Targets missed

- none

## Notes

- a new note
"""

INFO = {"date (UTC)": "2026-12-07 13:10", "load average at the start (1, 5, 15 min)": "0.5",
        "load average at the end": "0.7"}


def test_merge_replaces_the_run_sections_and_keeps_the_others_with_their_missed_targets():
    merged = _run_py().merge_results(OLD, NEW, INFO)
    assert merged.startswith(OLD[:OLD.index("## direct create")])  # preamble, installer kept
    assert "| direct ratio | 1.200 |" in merged and "1.500" not in merged
    assert ("## direct create\n\nMeasured 2026-12-07 13:10 with `run.py --merge` (load average"
            " 0.5 at the start, 0.7 at the end)") in merged
    missed = merged[merged.index("## Targets missed"):merged.index("## Notes")]
    assert missed == "## Targets missed\n\n- install: 0.2 s (target ≤ 0.1 s)\n\n"
    assert merged.endswith("## Notes\n\n- an old note\n- a new note\n")


def test_merge_adds_a_new_section_before_the_missed_targets_and_lists_its_miss():
    old = OLD.replace("## direct create", "## scaling").replace("direct ratio", "slope")
    new = NEW.replace("1.200 |  | ≤ 1.3 met", "1.400 |  | ≤ 1.3 **missed**").replace(
        "- none", "- direct ratio: 1.400 (target ≤ 1.3)")
    merged = _run_py().merge_results(old, new, INFO)
    assert merged.index("## scaling") < merged.index("## direct create") < merged.index(
        "## Targets missed")
    missed = merged[merged.index("## Targets missed"):merged.index("## Notes")]
    assert missed.splitlines()[2:5] == ["- install: 0.2 s (target ≤ 0.1 s)",
                                        "- slope: 1.500 (target ≤ 1.3)",
                                        "- direct ratio: 1.400 (target ≤ 1.3)"]


def test_merge_drops_the_replaced_missed_targets_whose_names_hold_a_colon_and_repeats_no_note():
    old = OLD.replace("direct ratio", "create CPU, 1 GPU: ours / NVIDIA's")
    new = (NEW.replace("direct ratio", "create CPU, 1 GPU: ours / NVIDIA's")
              .replace("| 1.200 |  | ≤ 1.3 met |", "| 1.400 |  | ≤ 1.3 **missed** |")
              .replace("- none", "- create CPU, 1 GPU: ours / NVIDIA's: 1.400 (target ≤ 1.3)")
              .replace("- a new note", "- an old note\n- a new note"))
    merged = _run_py().merge_results(old, new, INFO)
    missed = merged[merged.index("## Targets missed"):merged.index("## Notes")]
    assert missed.splitlines()[2:] == ["- install: 0.2 s (target ≤ 0.1 s)",
                                       "- create CPU, 1 GPU: ours / NVIDIA's: 1.400 (target ≤ 1.3)",
                                       ""]
    notes = merged[merged.index("## Notes"):]
    assert notes.count("- an old note") == 1 and notes.count("- a new note") == 1
