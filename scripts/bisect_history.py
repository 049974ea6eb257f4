#!/usr/bin/env python
"""Build a git history of this project with one commit that makes a kernel slower, then (optionally) bisect it.

Makes a throwaway repository holding this checkout's code (``fp8bench/``, ``kernels/``, ``workloads/``,
``pyproject.toml``) and ``--commits`` commits. Commit ``--slow-at`` (0-based, after the first) changes the torch
backend's GEMM for real: its floating-point matmul runs ``--factor`` times per call. Commit ``--broken-at``, if
given, leaves a syntax error in that module (the next commit fixes it), so that commit does not build. Every other
commit only adds a line to ``CHANGES.txt``. Writes ``truth.json`` (commits in order, the slow one, the broken one).

With ``--bisect`` it then runs ``fp8bench bisect --good FIRST --bad LAST`` on the history and prints the finding
next to the truth, with the wall time. ``--load N`` runs N busy processes beside it (a noisy machine).

    python scripts/bisect_history.py --out /tmp/bh                         # 16 commits, slow at 11
    python scripts/bisect_history.py --out /tmp/bh --broken-at 7 --bisect --load 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_BACKEND = "kernels/torch_backend.py"
# The line of the torch backend's floating-point GEMM that the slow commit changes.
MATMUL_LINE = "                return torch.matmul(a, b.t())\n"
DAY_S = 86_400
FIRST_COMMIT_EPOCH = 1_790_000_000  # any fixed date; commits follow a day apart


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return out.stdout.strip()


def slowed(source: str, factor: int) -> str:
    """The torch backend with its floating-point matmul done ``factor`` times per call."""
    if MATMUL_LINE not in source:
        raise SystemExit(f"{TORCH_BACKEND} no longer has the line this script slows: {MATMUL_LINE.strip()!r}")
    extra = f"                for _ in range({factor - 1}):  # the slow commit: repeated work\n" \
            "                    torch.matmul(a, b.t())\n"
    return source.replace(MATMUL_LINE, extra + MATMUL_LINE, 1)


def build_history(out: Path, commits: int = 16, slow_at: int = 11, broken_at: int | None = None,
                  factor: int = 3) -> dict[str, object]:
    """Create the repository under ``out/repo``; returns the truth (also written to ``out/truth.json``)."""
    if not 0 < slow_at < commits:
        raise ValueError(f"slow_at {slow_at} must be between 1 and {commits - 1}")
    if broken_at is not None and not (0 < broken_at < commits - 1 and broken_at != slow_at):
        raise ValueError(f"broken_at {broken_at} must be between 1 and {commits - 2}, not the slow commit")
    if broken_at is not None and broken_at + 1 == slow_at:  # the commit after the broken one carries the fix
        raise ValueError(f"broken_at {broken_at} must not be right before the slow commit {slow_at}: the next "
                         "commit fixes the build")
    repo = out / "repo"
    repo.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", ".venv", "*.egg-info")
    for folder in ("fp8bench", "kernels", "workloads"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bisect@localhost")
    git(repo, "config", "user.name", "bisect")
    backend = repo / TORCH_BACKEND
    fast_source = backend.read_text()
    shas = []
    for i in range(commits):
        subject = f"change {i}"
        if i == slow_at:
            backend.write_text(slowed(backend.read_text(), factor))
            subject = f"change {i}: rework the torch GEMM"
        elif broken_at is not None and i == broken_at:
            backend.write_text(backend.read_text() + "\ndef broken(:\n")
            subject = f"change {i}: work in progress (does not build)"
        elif broken_at is not None and i == broken_at + 1:
            text = backend.read_text().replace("\ndef broken(:\n", "")
            backend.write_text(text)
            subject = f"change {i}: fix the build"
        with open(repo / "CHANGES.txt", "a") as fh:
            fh.write(f"{subject}\n")
        git(repo, "add", "-A")
        stamp = f"@{FIRST_COMMIT_EPOCH + i * DAY_S} +0000"
        git(repo, "commit", "-q", "-m", subject, env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        shas.append(git(repo, "rev-parse", "HEAD"))
    assert fast_source != backend.read_text()
    truth = {"repo": str(repo), "commits": shas, "first_slow": shas[slow_at], "slow_at": slow_at,
             "broken": shas[broken_at] if broken_at is not None else None, "factor": factor}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def _spin(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the repository (must not exist)")
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--slow-at", type=int, default=11, help="the slow commit, 0-based (default 11)")
    parser.add_argument("--broken-at", type=int, default=None, help="a commit that does not build (default none)")
    parser.add_argument("--factor", type=int, default=3, help="work multiplier of the slow commit (default 3)")
    parser.add_argument("--bisect", action="store_true", help="then run `fp8bench bisect` on the history")
    parser.add_argument("--step-budget", type=float, default=240.0, help="bisect's --step-budget (default 240)")
    parser.add_argument("--threshold", default="0.25", help="bisect's --threshold (default 0.25: the slow commit "
                        "triples the GEMM, and a wide threshold lets a noisy machine decide `same` in a few rounds)")
    parser.add_argument("--min-rounds", default="8", help="bisect's --min-rounds (default 8)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the bisect (default 0)")
    parser.add_argument("--shape", default="256x256x256")
    args = parser.parse_args()
    truth = build_history(args.out, args.commits, args.slow_at, args.broken_at, args.factor)
    print(json.dumps(truth), flush=True)
    if not args.bisect:
        return 0
    commits = truth["commits"]
    assert isinstance(commits, list)
    cmd = [sys.executable, "-m", "fp8bench.cli", "bisect", "--repo", str(truth["repo"]), "--good", commits[0],
           "--bad", commits[-1], "--step-budget", str(args.step_budget), "--threshold", args.threshold,
           "--min-rounds", args.min_rounds, "--out", str(args.out / "bisect"),
           "--results-dir", str(args.out / "results"), "--json", "--",
           "--shape", args.shape, "--precision", "bf16", "--backend", "torch", "--no-phases", "--threads", "1",
           "--min-samples", "10", "--max-time", "0.1", "--budget", "5"]
    spinners = [multiprocessing.Process(target=_spin, args=(time.time() + 3600,)) for _ in range(args.load)]
    for proc in spinners:
        proc.start()
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    finally:
        for proc in spinners:
            proc.terminate()
            proc.join()
    wall = time.perf_counter() - started
    sys.stderr.write(done.stderr[-4000:])
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({"exit_code": done.returncode, "found": found["first_bad"], "truth": truth["first_slow"],
                      "correct": found["first_bad"] == truth["first_slow"], "ratio": found["ratio"],
                      "interval": [found["ci_low"], found["ci_high"]], "rounds": found["rounds"],
                      "probes": found["probes"], "wall_s": round(wall, 1), "load_processes": args.load}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
