"""`fp8bench bisect`: find the first commit between a good and a bad one that makes the cases slower."""

from __future__ import annotations

import argparse
import secrets
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fp8bench.commands.common import (
    EXIT_HARNESS_ERROR,
    STOPPED_ROW,
    ExitCodes,
    UsageError,
    add_json_flag,
    default_results_dir,
    harness_error,
    print_json,
)
from fp8bench.core.units import positive_seconds
from fp8bench.exit_codes import EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION

DESCRIPTION = """Find the commit that made the cases slower, by binary search between a good and a bad commit.

Each probed commit is checked out into a temporary worktree of --repo, built with --setup, and measured against
the good commit in sequential A/B rounds (as `fp8bench ab --budget`): rounds are added until the gate decides
slower or same, within --step-budget seconds; an undecided step is measured once more with twice the budget, and
a commit that does not build, import or run is skipped (as `git bisect skip`). The bad commit is measured first:
if it is not slower than good there is nothing to bisect. Everything after `--` is passed to `fp8bench run`.

Every probe imports its commit's code from its worktree into this Python environment, so no probe needs its own
virtual environment; the default --setup only byte-compiles the checkout. This assumes the commits run with the
dependencies installed here; give a --setup that installs them if the range changes them. For a repository of
custom kernels loaded as a plugin, give --plugin MODULE: both sides load it from their own worktree.

Every probed commit's code (its --setup, its imports, its kernels) runs as you, with your rights: bisect only a
range of commits you would run yourself. Run it as a user, or in a container, that can write nothing you keep.
--out must be a new or empty folder (every round file in it is read as this bisect's own); --markdown refuses a
link and an existing file unless --force.

examples:
  fp8bench bisect --good v1.2 --bad main -- --shape 256x256x256 --precision bf16 --backend torch
  fp8bench bisect --repo ../my-kernels --plugin my_kernels --good abc123 --bad HEAD --step-budget 300 -- --suite ci
  fp8bench bisect --good GOOD --bad BAD --markdown issue.md -- --suite ci      (an issue body for the finding)

The finding (commit, subject, ratio with its interval, rounds) is printed, written to OUT/bisect.json and
OUT/bisect.md, and kept in RESULTS/bisects/ where `fp8bench changes` and the dashboard's Regressions page show it."""
EXIT_CODES = ExitCodes((
    (EXIT_PASS, "the bad commit is not slower than the good one beyond the threshold: nothing to bisect"),
    (EXIT_REGRESSION, "found: the first commit the gate finds slower than good"),
    (EXIT_INCONCLUSIVE, "undecided: the bad commit is not shown slower, or skipped/undecided commits leave a range"),
    (EXIT_HARNESS_ERROR, "harness error or bad input (bad commits, not a git repository, good does not build)"),
    STOPPED_ROW,
), bad_input=EXIT_HARNESS_ERROR)
DOC = "docs/gate.md"
DEFAULT_STEP_BUDGET_S = 300.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fp8bench.commands.gating import add_gate_flags

    p.add_argument("--good", required=True, help="a commit (any git revision) where the cases were fast")
    p.add_argument("--bad", required=True, help="a later commit where they are slow (on good's first-parent line)")
    p.add_argument("--repo", type=Path, default=Path("."), help="the git repository (default .)")
    p.add_argument("--setup", default=None, metavar="CMD",
                   help="shell command run in each probed worktree; a non-zero exit skips the commit "
                        "(default: byte-compile it with this Python)")
    p.add_argument("--plugin", default=None, metavar="MODULE",
                   help="a module of the repository to load on both sides (FP8BENCH_PLUGINS): bisect a repository "
                        "of custom kernels against the installed fp8bench")
    p.add_argument("--step-budget", type=positive_seconds("--step-budget"), default=DEFAULT_STEP_BUDGET_S,
                   metavar="SECONDS", help=f"seconds of rounds per probe (default {DEFAULT_STEP_BUDGET_S:g}; an "
                                           "undecided probe gets twice this once more)")
    p.add_argument("--min-rounds", type=int, default=8, help="rounds before a probe's first decision (default 8)")
    p.add_argument("--round-timeout", type=positive_seconds("--round-timeout"), default=3600.0, metavar="SECONDS",
                   help="a side's round that takes longer fails that probe (default 3600)")
    p.add_argument("--out", type=Path, default=None,
                   help="a new or empty folder for round files and reports (default RESULTS/bisect/TIME-ID)")
    p.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                   help="also write the finding as a GitHub issue body (its first line is a marker the nightly "
                        "workflow finds the issue by)")
    p.add_argument("--force", action="store_true", help="let --markdown replace an existing file")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="where the finding is kept for `changes` and the dashboard (default ./results or "
                        "$FP8BENCH_RESULTS_DIR)")
    add_gate_flags(p)
    add_json_flag(p)
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then arguments for `fp8bench run`")


def check_outputs(folder: Path, markdown: Path | None, force: bool) -> None:
    """Refuse, before any probe, an --out that holds anything (every round file in it would be read as this
    bisect's own) and a --markdown the safe-write rules refuse (a link, a device, an existing file without --force)."""
    from fp8bench.results.runfile import check_writable

    if folder.is_symlink() or (folder.exists() and (not folder.is_dir() or any(folder.iterdir()))):
        raise UsageError(f"--out {folder} is not a new or empty folder: bisect reads every round file in its folder "
                         "as its own; give a new --out")
    if markdown is not None:
        check_writable(markdown, force, "the Markdown body", "--markdown")


def execute(args: argparse.Namespace) -> int:
    from rich.console import Console

    from fp8bench.analysis.bisect import BisectError, Probe, bisect, case_keys
    from fp8bench.commands.gating import gate_config
    from fp8bench.measure.interrupts import cleanup_on_stop
    from fp8bench.orchestration.bisect_probes import ProbeRunner, commits_between

    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    err = Console(stderr=True)
    try:
        if not run_args:
            raise UsageError("give the cases after `--`, e.g. `fp8bench bisect --good A --bad B -- --suite ci`")
        if args.min_rounds < 3:
            raise UsageError(f"--min-rounds must be >= 3, got {args.min_rounds}")
        config = gate_config(args)
        results = args.results_dir or default_results_dir()
        # Absolute: each probed commit's worker runs in its own worktree and must write where this process reads.
        folder = (args.out or results / "bisect" /
                  f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}").absolute()
        check_outputs(folder, args.markdown, args.force)
        repo = args.repo.resolve()
        good, bad, commits = commits_between(repo, args.good, args.bad)
    except (UsageError, ValueError, BisectError) as exc:  # RunFileError is a ValueError
        print(f"fp8bench bisect: error: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    steps = max(1, (len(commits)).bit_length())
    if not args.json:
        err.print(f"bisect: {len(commits)} commit(s) after good {good.sha[:12]} up to bad {bad.sha[:12]}; about "
                  f"{steps + 1} probe(s) of up to {args.step_budget:g} s each", markup=False, highlight=False)

    def on_probe(p: Probe) -> None:
        if args.json:
            return
        ratio = "" if p.ratio is None else f" x{p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]"
        err.print(f"bisect: {p.commit[:12]} {p.subject[:50]!r}: {p.outcome}{ratio}, {p.rounds} round(s), "
                  f"{p.seconds:.0f} s" + (f" ({p.reason})" if p.outcome == "skip" else ""),
                  markup=False, highlight=False)

    runner = ProbeRunner(repo, good, run_args, folder, config, args.setup, args.plugin, args.min_rounds,
                         args.round_timeout)
    # A second stop signal must not cut the removal of the worktrees short (measure.interrupts).
    with cleanup_on_stop() as teardown:
        teardown.add(runner.close)
        try:
            runner.start()
            result = bisect(good, bad, commits, runner, args.step_budget, on_probe)
        except (BisectError, OSError, ValueError) as exc:
            return harness_error("bisect", exc, expected=True)
        except Exception as exc:  # noqa: BLE001 - no verdict without a measurement
            return harness_error("bisect", exc, expected=False)
    return report(result, case_keys(result), run_args, folder, results, args)


def report(result: Any, cases: list[str], run_args: list[str], folder: Path, results: Path,
           args: argparse.Namespace) -> int:
    """Write bisect.json, bisect.md (and --markdown), keep the evidence, print the finding; returns the exit code."""
    import json

    from fp8bench.analysis.bisect import device_of, render_markdown, save_evidence
    from fp8bench.results.runfile import write_user_file

    folder.mkdir(parents=True, exist_ok=True)
    md = render_markdown(result, cases, run_args, device_of(result))
    write_user_file(folder / "bisect.md", md.encode(), False, "the bisect report")
    payload = {"cases": cases, "run_args": run_args, **result.to_dict()}
    write_user_file(folder / "bisect.json", json.dumps(payload, indent=1, default=str).encode(), False,
                    "the bisect report")
    if args.markdown:
        write_user_file(args.markdown, md.encode(), args.force, "the Markdown body", "--markdown")
    evidence = save_evidence(result, cases, run_args, results)
    ev = result.evidence()
    summary = {"verdict": result.verdict, "exit_code": result.exit_code, "reason": result.reason,
               "first_bad": result.first_bad.sha if result.first_bad else None,
               "subject": result.first_bad.subject if result.first_bad else None,
               "ratio": ev.ratio if ev else None, "ci_low": ev.ci_low if ev else None,
               "ci_high": ev.ci_high if ev else None, "rounds": result.rounds, "probes": len(result.probes),
               "seconds": round(result.seconds, 1), "suspects": [c.sha for c in result.suspects],
               "bisect_json": str(folder / "bisect.json"), "evidence": str(evidence)}
    if not args.json:
        print(md)
    print_json(summary)
    return int(result.exit_code)
