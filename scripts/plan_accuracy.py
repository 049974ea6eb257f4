"""How good is `fp8bench run --plan`, and does `--wall-budget` end a run on time?

For a suite, in a fresh results folder (so the first plan has no history and no cached CPU ceilings):

1. ``--plan --json`` (cold: the cost model alone), then the run, timed from outside (the process's wall time);
2. ``--plan --json`` again (the store now holds the first run: history), then a second run, timed;
3. with ``--budget-check``: a run with ``--wall-budget`` set to a third of the planned total (history included),
   timed, with what its header says was shortened and skipped.

Prints each estimate against the wall time it predicted, the error in percent, and the load average before each
run (timings on a shared machine move with it).

    python scripts/plan_accuracy.py --suite smoke
    python scripts/plan_accuracy.py --suite scripts/plan_check_suite.yaml --budget-check
    python scripts/plan_accuracy.py --suite scripts/plan_check_suite.yaml --calibrate

``--calibrate`` also prints, for the cold run, each step of the harness (``fp8bench.measure.harness_cost.Step``) as
the model planned it and as the records measured it (mean seconds per measured case), and the run's own work
around its cases: the figures the model's constants in ``fp8bench.measure.plan`` are set from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FP8BENCH = str(Path(sys.executable).with_name("fp8bench"))


def plan(suite: str, results: Path, *extra: str) -> dict[str, Any]:
    out = subprocess.run([FP8BENCH, "run", "--suite", suite, "--results-dir", str(results), "--plan", "--json",
                          *extra], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run(suite: str, results: Path, *extra: str) -> tuple[float, dict[str, Any], float]:
    """The process's wall time, the run's JSON summary and the 1-minute load average when it started."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    out = subprocess.run([FP8BENCH, "run", "--suite", suite, "--results-dir", str(results), "--json", *extra],
                         capture_output=True, text=True).stdout
    wall = time.monotonic() - started
    return wall, json.loads(out.strip().splitlines()[-1]), load


def report(label: str, planned: float, wall: float, load: float) -> None:
    print(f"{label:<28} planned {planned:8.1f} s  actual {wall:8.1f} s  error {100 * (planned - wall) / wall:+6.1f}%"
          f"  (load {load:.2f} at start)")


def calibration(cold: dict[str, Any], summary: dict[str, Any], wall: float) -> None:
    """Print the cold plan's mean seconds per step beside the recorded ones, over the cases measured ``ok``."""
    planned = {c["case"]: c for c in cold["cases"]}
    measured = [r for r in summary["records"] if r.get("status") == "ok" and (r.get("harness") or {}).get("split_s")]
    steps = list(measured[0]["harness"]["split_s"]) if measured else []
    print(f"  per measured case ({len(measured)}), mean ms: step, planned, recorded")
    for step in steps:
        # The model's sampling step holds the samples themselves; the record's, the loop around them.
        recorded = statistics.mean(r["harness"]["split_s"][step] + (r["harness"]["measured_s"] if step == "sampling"
                                                                      else 0.0) for r in measured)
        model = statistics.mean(c["parts_s"].get(step, 0.0) for c in planned.values() if c["expect"] == "measured")
        print(f"    {step:<12} {1e3 * model:9.2f} {1e3 * recorded:9.2f}")
    samples = sum(r["n"] + sum(p.get("n") or 0 for p in (r.get("phase_stats") or {}).values()) for r in measured)
    loop = sum(r["harness"]["split_s"].get("sampling", 0.0) for r in measured)
    harness = summary["harness"]
    around = wall - harness["wall_s"] - harness.get("stream_s", 0.0) - harness.get("ceilings_s", 0.0)
    print(f"    sampling loop per sample {1e6 * loop / max(samples, 1):.1f} us; streaming per record "
          f"{1e3 * harness.get('stream_s', 0.0) / max(harness['cases'], 1):.2f} ms; ceilings "
          f"{harness.get('ceilings_s', 0.0):.2f} s; the run's own work around its cases {around:.2f} s "
          f"(planned fixed {cold['fixed_s']:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--budget-check", action="store_true", help="also run under a third of the planned time")
    parser.add_argument("--calibrate", action="store_true", help="print the cold run's steps, planned and recorded")
    parser.add_argument("--results-dir", type=Path, default=None, help="default: a fresh temporary folder")
    args = parser.parse_args()
    results = args.results_dir or Path(tempfile.mkdtemp(prefix="plan_accuracy_"))
    print(f"suite {args.suite}, results in {results}, {os.cpu_count()} CPUs")
    cold = plan(args.suite, results)
    wall, summary, load = run(args.suite, results)
    report(f"cold ({cold['n_cases']} cases)", cold["total_s"], wall, load)
    print(f"  counts {summary['counts']}, harness share {summary['harness']['share']:.1%}")
    if args.calibrate:
        calibration(cold, summary, wall)
    warm = plan(args.suite, results)
    wall, summary, load = run(args.suite, results)
    report(f"history ({warm['from_history']} from history)", warm["total_s"], wall, load)
    print(f"  counts {summary['counts']}, harness share {summary['harness']['share']:.1%}")
    if args.budget_check:
        budget = round(plan(args.suite, results)["total_s"] / 3)
        wall, summary, load = run(args.suite, results, "--wall-budget", f"{budget}s")
        header = summary["wall_budget"]
        print(f"wall budget {budget} s (planned {header['planned_s']:.1f} s): the run took {wall:.1f} s "
              f"({100 * (wall - budget) / budget:+.1f}% of the budget; load {load:.2f} at start)")
        print(f"  cases by level {header['cases']}, shortened {header['shortened']}, skipped {header['skipped']}, "
              f"reached {header['reached']}, calibration {header['calibration']:.2f}")
        reasons = {r["reason"].split(":")[0] + ": " + r["reason"].split(":")[1][:60]
                   for r in summary["records"] if (r.get("reason") or "").startswith("suite budget")}
        shortened = {str(r["extra"]["suite_budget"]["shortened"]) for r in summary["records"]
                     if (r.get("extra") or {}).get("suite_budget", {}).get("shortened")}
        print(f"  shortened as: {sorted(shortened)}")
        print(f"  skip reasons (first words): {sorted(reasons)[:3]}")


if __name__ == "__main__":
    main()
