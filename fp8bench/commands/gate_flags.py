"""`fp8bench gate` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.gate`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.gating_flags import add_gate_flags, add_verdict_flags
from fp8bench.commands.verb_interface import (
    GATE_EXIT_CODES,
    add_json_flag,
    add_store_flags,
)

DESCRIPTION = """Compare a candidate against its base, case by case, and fail on a real regression: slower, more
energy per iteration, or less accurate (--metric median_s|energy_j|sqnr_db).

BASE and CAND are each a run file, a pytest-benchmark JSON file, a folder of run files (the interleaved rounds
written by `fp8bench ab`: per-round medians are the samples), or run ids in the store (comma-separated).

A case is `slower` when the bootstrap interval of median(cand)/median(base) lies above 1+T and the one-sided
Mann-Whitney p-value, adjusted by Benjamini-Hochberg across cases, is under alpha. Cases run under different
devices, drivers, CUDA, torch, power limits or clock policies are `incomparable`, never compared. A case of the
base that the candidate lacks is `missing` and fails the gate (--allow-missing accepts it). A run that did not
finish (interrupted, running, failed) is refused (--allow-partial accepts it), and so is a timing sample that is
not a finite positive number of seconds. Gating a run against itself warns: it can only pass. Energy is gated the
same way as time, on per-round values (it needs rounds, as `fp8bench ab` writes). SQNR is deterministic: a case is
`worse` when it drops more than --sqnr-tolerance dB or falls under its precision's --sqnr-floor.

examples:
  fp8bench gate results/ab/base results/ab/head
  fp8bench gate base.json cand.json --threshold 5% --override 'gemm*fp8_rowwise*=8%' --aa-noise 1%
  fp8bench gate base cand --fail-on regression      # an inconclusive case does not fail the job
  fp8bench gate --paired --metric sqnr_db --sqnr-floor bf16=35 --sqnr-floor 'fp8_*=20' results/ab/base results/ab/head

The Markdown and JSON reports are written before exiting; with $GITHUB_STEP_SUMMARY set, the Markdown report is
appended to the job summary too."""

EXIT_CODES = GATE_EXIT_CODES

DOC = "docs/gate.md"

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="base: run file, pytest-benchmark JSON, folder of rounds, or store run id(s)")
    p.add_argument("cand", help="candidate: same forms as BASE")
    add_gate_flags(p)
    add_verdict_flags(p)
    p.add_argument("--paired", action="store_true",
                   help="BASE and CAND are folders of the same A/B rounds (round i of both ran back to back): "
                        "compare round by round, so drift shared within a round cancels (`fp8bench ab` does this)")
    p.add_argument("--report-dir", type=Path, default=None,
                   help="where report.md and report.json go (default RESULTS/gate/REPORT_ID); existing reports there "
                        "are kept unless --force")
    p.add_argument("--force", action="store_true", help="let the reports replace those already in --report-dir")
    p.add_argument("--no-store-report", action="store_true", help="do not add the report to the store")
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the gate's statistics and the store at its top, which
    # `fp8bench gate --help` must not wait for.
    from fp8bench.commands import gate

    return gate.execute(args)
