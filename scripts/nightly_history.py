#!/usr/bin/env python
"""Build a real nightly history on this machine, with a known regression, to check change-point detection.

Makes a throwaway git repository (one branch, ``--commits`` commits a day apart) and, at each commit, runs
``fp8bench run`` from inside it, so every run records that commit, its branch and its first-parent depth, as a
nightly CI job would. From commit ``--slow-from`` on (0-based), the runs load the test-only slowed backend
(``tests/plugins/fp8bench_test_slowed.py`` through ``FP8BENCH_PLUGINS``): the torch GEMM of the slowed precisions
does ``FP8BENCH_TEST_SLOW_FACTOR`` times the work, a real slowdown landing at a known commit. Every number is a
real measurement of torch kernels on this CPU.

Writes ``truth.json`` beside the store: the commits in order and the first slowed one. Then check with
``fp8bench changes --store STORE``.

    python scripts/nightly_history.py --out /tmp/nightly            # 14 commits, slowed from commit 8
    python scripts/nightly_history.py --out /tmp/nightly --commits 20 --slow-from 12 --factor 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent.parent / "tests" / "plugins"
DAY_S = 86_400
FIRST_COMMIT_EPOCH = 1_790_000_000  # 2026-09-21: any fixed date; commits follow a day apart


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the repository, runs and store")
    parser.add_argument("--store", default=None, help="store path or URL (default OUT/results)")
    parser.add_argument("--commits", type=int, default=14)
    parser.add_argument("--slow-from", type=int, default=8, help="first slowed commit, 0-based (default 8)")
    parser.add_argument("--factor", type=int, default=2, help="work multiplier of the slowed GEMM (default 2)")
    parser.add_argument("--slow-precisions", default="bf16", help="precisions slowed (default bf16)")
    parser.add_argument("--shape", nargs="+", default=["128x128x128", "256x256x256", "512x512x512"])
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16", "fp8_rowwise"])
    parser.add_argument("--budget", type=float, default=4.0, help="seconds per case (default 4)")
    parser.add_argument("--max-time", type=float, default=0.4, help="measured seconds per function (default 0.4)")
    args = parser.parse_args()
    if not 0 < args.slow_from < args.commits:
        parser.error(f"--slow-from {args.slow_from} must be between 1 and --commits - 1 ({args.commits - 1})")

    repo = args.out / "repo"
    results = args.out / "results"
    store = args.store or str(results)
    repo.mkdir(parents=True, exist_ok=False)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "nightly@localhost")
    git(repo, "config", "user.name", "nightly")
    commits = []
    for i in range(args.commits):
        stamp = f"@{FIRST_COMMIT_EPOCH + i * DAY_S} +0000"
        git(repo, "commit", "-q", "--allow-empty", "-m", f"change {i}",
            env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        commit = git(repo, "rev-parse", "HEAD")
        commits.append(commit)
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        slowed = i >= args.slow_from
        if slowed:
            env.update(FP8BENCH_PLUGINS="fp8bench_test_slowed", FP8BENCH_TEST_SLOW_FACTOR=str(args.factor),
                       FP8BENCH_TEST_SLOW_PRECISIONS=args.slow_precisions,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "fp8bench.cli", "run", "--shape", *args.shape, "--precision", *args.precision,
               "--backend", "torch", "--threads", "1", "--budget", str(args.budget), "--max-time",
               str(args.max_time), "--results-dir", str(results), "--store", store, "--json"]
        started = time.perf_counter()
        run = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        if run.returncode not in (0, 1):
            print(run.stderr[-2000:], file=sys.stderr)
            return run.returncode
        run_id = json.loads(run.stdout.strip().splitlines()[-1])["run_id"]
        print(f"commit {i:2d} {commit[:7]} {'slowed' if slowed else 'normal'}: run {run_id} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    truth = {"commits": commits, "first_slowed_commit": commits[args.slow_from], "slow_from": args.slow_from,
             "factor": args.factor, "slowed_precisions": args.slow_precisions.split(","), "store": store}
    (args.out / "truth.json").write_text(json.dumps(truth, indent=1))
    print(json.dumps(truth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
