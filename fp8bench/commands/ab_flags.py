"""`fp8bench ab` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.ab`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.gating_flags import add_gate_flags, add_verdict_flags
from fp8bench.commands.verb_interface import (
    GATE_EXIT_CODES,
    STOPPED_ROW,
    ExitCodes,
    add_json_flag,
    add_store_flags,
)
from fp8bench.core.units import positive_seconds

# A round of a CI suite takes minutes; one that has not answered in an hour is hung (a deadlocked kernel, a
# driver wait), and ends the A/B run instead of the CI job's own, much later, timeout.
DEFAULT_ROUND_TIMEOUT_S = 3600.0


DESCRIPTION = """Measure a base and a head version of the project on this machine, in interleaved rounds, then gate.

BASE and HEAD are each a folder holding a checkout of the project, or a git ref of --repo (checked out into a
temporary worktree that is removed afterwards). Each side runs in its own long-lived process that imports its
own checkout's fp8bench; rounds alternate which side goes first. Everything after `--` is passed to
`fp8bench run` (choose a suite or cases there). Inconclusive cases are rerun once. With --budget SECONDS the
run is sequential instead: rounds are added until every case is decided (slower, faster or same, by a confidence
sequence that stays valid however many rounds are looked at) or the budget is spent.

examples:
  fp8bench ab --base origin/main --head . --rounds 10 -- --suite ci
  fp8bench ab --base ../main-checkout --head . -- --shape 256x256x256 --precision bf16 fp8_rowwise --backend torch
  fp8bench ab --base origin/main --head . --budget 600 -- --suite ci     (sequential: decide each case in 10 min)
  fp8bench ab --base . --head . --head-env FP8BENCH_PLUGINS=my_slow_backend -- --suite smoke   (A/B of a plugin)

Reports are written first; with $GITHUB_STEP_SUMMARY set, the Markdown report is appended to the job summary."""

EXIT_CODES = ExitCodes((*GATE_EXIT_CODES.rows, STOPPED_ROW), bad_input=GATE_EXIT_CODES.bad_input)
DOC = "docs/gate.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", required=True, help="base checkout folder or git ref")
    p.add_argument("--head", default=".", help="head checkout folder or git ref (default: this folder)")
    p.add_argument("--repo", type=Path, default=Path("."), help="git repository the refs belong to (default .)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds per side (default 10; >= 10 to gate)")
    p.add_argument("--no-rerun", action="store_true", help="do not rerun inconclusive cases")
    p.add_argument("--budget", type=positive_seconds("--budget"), default=None, metavar="SECONDS",
                   help="sequential A/B: add rounds until every case is decided or SECONDS of rounds are spent "
                        "(an always-valid confidence sequence; --rounds is then ignored; docs/gate.md)")
    p.add_argument("--min-rounds", type=int, default=8,
                   help="with --budget: rounds before the first decision (default 8, at least 3)")
    p.add_argument("--max-rounds", type=int, default=None, help="with --budget: stop after this many rounds too")
    p.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the base (the reports name the variables; their values are masked)")
    p.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the head (the reports name the variables; their values are masked)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder of round files and reports (default RESULTS/ab/TIME); files of an earlier A/B run "
                        "there are kept unless --force")
    p.add_argument("--force", action="store_true", help="let this run replace the round files and reports in --out")
    p.add_argument("--round-timeout", type=positive_seconds("--round-timeout"), default=DEFAULT_ROUND_TIMEOUT_S,
                   metavar="SECONDS",
                   help=f"a side's round that takes longer fails the A/B run, naming the side and the round "
                        f"(default {DEFAULT_ROUND_TIMEOUT_S:g})")
    add_gate_flags(p)
    add_verdict_flags(p)
    p.add_argument("--no-store-report", action="store_true", help="do not add the gate report to the store")
    add_store_flags(p)
    add_json_flag(p)
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then arguments for `fp8bench run`")


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the A/B rounds, the gate and the store at its top, which
    # `fp8bench ab --help` must not wait for.
    from fp8bench.commands import ab

    return ab.execute(args)
