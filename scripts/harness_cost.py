"""The harness's own cost per case: the wall time of each case less the time inside its timed samples.

Runs ``fp8bench run`` on cases whose call takes 10 ms or more on a 2-core CPU (by default), reads the run file,
and prints per case the call's median, the case's wall time, the measured time, the harness's share and its
split (warm-up, probing, energy, setup, sampling loop, numerics, book-keeping), then the run's total. The
target is a share under 10% for cases whose call takes 10 ms or more. Records written before the split was
recorded (``Record.harness`` absent) are read from their ``timing`` fields, so the same script measures before and
after.

    python scripts/harness_cost.py                 # gemm 1024^3: fp32, bf16 (torch), fp8 tensorwise/rowwise (emulated)
    python scripts/harness_cost.py -- --shape 768x768x768 --precision fp32   # any `fp8bench run` flags after --

Before and after, paired: ``--code OLD`` runs the same cases with another source tree too (a checkout such as
``git archive main | tar -x -C /tmp/old``), alternating the two trees for ``--rounds`` rounds in one invocation so
that both see the same load, and prints each round's shares and the mean of each side. Each tree runs from its own
sources (``PYTHONPATH`` onto a folder linking its ``fp8bench/`` with the top-level ``workloads/``, ``kernels/`` and
``dashboard/`` placed where the install maps them), with this interpreter's packages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fp8bench.results.runfile import read_run_file

DEFAULT_RUN = ["--workload", "gemm", "--shape", "1024x1024x1024", "--precision", "fp32", "bf16", "fp8_tensorwise",
               "fp8_rowwise", "--backend", "torch", "emulated"]
TARGET_SHARE = 0.10  # the harness's share of a case's wall time the project aims under, for calls >= 10 ms
LONG_CALL_S = 0.010


def case_cost(record: dict[str, Any]) -> dict[str, Any] | None:
    """Wall, measured and harness seconds of one measured record, with its split where recorded."""
    timing = record.get("timing") or {}
    harness = record.get("harness") or {}
    wall = harness.get("wall_s", timing.get("case_wall_s"))
    measured = harness.get("measured_s", timing.get("timed_s"))
    if record.get("status") != "ok" or wall is None or measured is None:
        return None
    split = harness.get("split_s") or {"warmup": timing.get("warmup_s", 0.0),
                                       "rest": wall - measured - timing.get("warmup_s", 0.0)}
    return {"case": f"{record['precision']} {record['backend']}", "median_s": record.get("median_s"),
            "wall_s": wall, "measured_s": measured, "harness_s": wall - measured,
            "share": (wall - measured) / wall if wall else None, "split_s": split}


def source_path(tree: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` so that ``import fp8bench`` loads ``tree``'s sources, sub-packages included."""
    root = Path(tempfile.mkdtemp(prefix="harness_cost_src_")) / "fp8bench"
    root.mkdir()
    for entry in (tree / "fp8bench").iterdir():
        (root / entry.name).symlink_to(entry.resolve())
    for sub in ("workloads", "kernels", "dashboard"):
        if (tree / sub).is_dir():
            (root / sub).symlink_to((tree / sub).resolve())
    return root.parent


def run_once(run_args: list[str], src: Path | None, results: Path) -> dict[str, Any]:
    """Run the cases with the sources at ``src`` (``None``: the installed fp8bench); the run file's contents."""
    run_file = Path(tempfile.mkdtemp()) / "run.json"
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "fp8bench", "run", *run_args, "--no-store", "--results-dir", str(results),
           "--out", str(run_file), "--json"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, env=env, cwd=src or None)
    return read_run_file(run_file)


def long_share(data: dict[str, Any], cases: set[str] | None = None) -> tuple[float | None, float | None, int,
                                                                          float | None]:
    """The harness's share of the wall time of the cases whose call takes 10 ms or more (of ``cases`` only, where
    given), the worst case's, their count and the median case's share."""
    long = [c for c in map(case_cost, data["records"]) if c is not None and (c["median_s"] or 0) >= LONG_CALL_S
            and (cases is None or c["case"] in cases)]
    if not long:
        return None, None, 0, None
    return (sum(c["harness_s"] for c in long) / sum(c["wall_s"] for c in long), max(c["share"] for c in long),
            len(long), statistics.median(c["share"] for c in long))


def paired(run_args: list[str], old: Path, rounds: int) -> None:
    """Alternate this tree and ``old`` for ``rounds`` rounds (the order swapped each round); print the shares."""
    sides = {"new": source_path(Path(__file__).resolve().parents[1]), "old": source_path(old)}
    results = Path(tempfile.mkdtemp(prefix="harness_cost_results_"))
    shares: dict[str, list[float]] = {"new": [], "old": []}
    medians: dict[str, list[float]] = {"new": [], "old": []}
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    for i in range(rounds):
        runs: dict[str, dict[str, Any]] = {}
        for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
            load = os.getloadavg()[0]
            runs[name] = run_once(run_args, sides[name], results)
            share, worst, n, median = long_share(runs[name])
            if share is not None and worst is not None and median is not None:
                print(f"round {i + 1} {name}: calls >= 10 ms: {n} case(s), harness {100 * share:.1f}% of their wall "
                      f"time, median case {100 * median:.1f}%, worst case {100 * worst:.1f}% (load {load:.2f} at "
                      f"start)")
                medians[name].append(median)
        # Under load a case may be skipped on one side: the pair is read on the cases both sides measured.
        both = common_long_cases(runs["old"], runs["new"])
        for name in ("old", "new"):
            share = long_share(runs[name], both)[0]
            if share is not None:
                shares[name].append(share)
        print(f"round {i + 1} on the {len(both)} case(s) both measured: " + ", ".join(
            f"{name} {100 * values[-1]:.1f}%" for name, values in shares.items() if len(values) == i + 1))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    for name, values in shares.items():
        if values:
            print(f"{name}: mean {100 * sum(values) / len(values):.1f}% over {len(values)} round(s) on the cases both "
                  f"sides measured ({', '.join(f'{100 * v:.1f}' for v in values)})")
    for name, values in medians.items():
        if values:
            print(f"{name}: the median case's share, median over {len(values)} round(s): "
                  f"{100 * statistics.median(values):.1f}% ({', '.join(f'{100 * v:.1f}' for v in values)})")


def common_long_cases(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    """The cases measured with calls of 10 ms or more in both runs."""
    def long(data: dict[str, Any]) -> set[str]:
        return {c["case"] for c in map(case_cost, data["records"]) if c and (c["median_s"] or 0) >= LONG_CALL_S}
    return long(a) & long(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_args", nargs="*",
                        help="`fp8bench run` flags (after --); default: " + " ".join(DEFAULT_RUN))
    parser.add_argument("--run-file", type=Path, default=None, help="read this run file instead of running")
    parser.add_argument("--code", type=Path, default=None, help="another source tree to compare with, paired")
    parser.add_argument("--rounds", type=int, default=3, help="with --code: runs of each tree, alternated")
    args = parser.parse_args()
    if args.code is not None:
        if not (args.code / "fp8bench").is_dir():
            parser.error(f"--code {args.code}: not a source tree of fp8bench (no fp8bench/ folder in it)")
        paired(args.run_args or DEFAULT_RUN, args.code, args.rounds)
        return
    run_file = args.run_file
    if run_file is None:
        run_file = Path(tempfile.mkdtemp()) / "run.json"
        exe = Path(sys.executable).with_name("fp8bench")
        cmd = [str(exe), "run", *(args.run_args or DEFAULT_RUN), "--no-store", "--out", str(run_file), "--json"]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    data = read_run_file(run_file)
    costs = [c for c in map(case_cost, data["records"]) if c is not None]
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} CPUs; run {run_file}")
    print(f"{'case':<28} {'call ms':>8} {'wall s':>7} {'meas s':>7} {'harness':>8}  split (s)")
    for c in costs:
        split = " ".join(f"{k} {v:.3f}" for k, v in c["split_s"].items() if v)
        print(f"{c['case']:<28} {1e3 * (c['median_s'] or 0):>8.2f} {c['wall_s']:>7.3f} {c['measured_s']:>7.3f} "
              f"{100 * c['share']:>7.1f}%  {split}")
    long = [c for c in costs if (c["median_s"] or 0) >= LONG_CALL_S]
    if long:
        worst = max(c["share"] for c in long)
        total = sum(c["harness_s"] for c in long) / sum(c["wall_s"] for c in long)
        print(f"calls >= {LONG_CALL_S * 1e3:g} ms: {len(long)} case(s), harness {100 * total:.1f}% of their wall "
              f"time, worst case {100 * worst:.1f}% (target under {100 * TARGET_SHARE:g}%)")
    summary = (data.get("run") or {}).get("harness")
    if summary:
        print("run summary:", json.dumps(summary))


if __name__ == "__main__":
    main()
