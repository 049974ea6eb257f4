"""`fp8bench bisect` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.bisect`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.gating_flags import add_gate_flags
from fp8bench.commands.verb_interface import (
    EXIT_HARNESS_ERROR,
    STOPPED_ROW,
    ExitCodes,
    add_json_flag,
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

The finding (commit, subject, ratio with its interval, rounds, every probe) is printed as a plain table, written
to OUT/bisect.json and, as Markdown, to OUT/bisect.md (and the job summary when $GITHUB_STEP_SUMMARY is set), and
kept in RESULTS/bisects/ where `fp8bench changes` and the dashboard's Regressions page show it."""
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


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the bisection, the gate and the store at its top, which
    # `fp8bench bisect --help` must not wait for.
    from fp8bench.commands import bisect

    return bisect.execute(args)
