"""`fp8bench changes` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.changes`.
"""

from __future__ import annotations

import argparse

from fp8bench.analysis.change_config import DEFAULT_METRICS, METRICS, ChangeConfig
from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
)
from fp8bench.core.units import fraction_arg

DESCRIPTION = """Find the commits at which a case's measurements stepped up or down, per case and environment,
along each branch (commits in first-parent order), and list them newest first: open regressions by default.

Each series is cut with PELT (the `ruptures` library) on log(metric), then a cut is kept when the medians before
and after it differ by at least --threshold, with a bootstrap interval that excludes 1 and a one-sided
Mann-Whitney p-value under --alpha. A regression is open while the latest commits are still worse than the level
before it. Each change names the last good and the first bad commit. A change needs --min-size commits on each
side, so one slow night is never reported.

examples:
  fp8bench changes                                            # open regressions in ./results
  fp8bench changes --store postgresql://bench@db/fp8bench --branch main --all
  fp8bench changes --metric median_s energy_j --fail-on-new RUN_ID   # nightly CI: fail on a new alert

An open regression becomes an alert when it is confirmed by --alert-nights consecutive nights (the latest ones,
each worse than the level before by the threshold) or by `fp8bench bisect`, whose finding (kept in
RESULTS/bisects/) is shown as the bisected commit. --fail-on-new RUN_ID fails on an alert that was not one on the
history up to that run."""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "listed (with --fail-on-new: no regression became an alert after that run)"),
    (EXIT_REGRESSION, "--fail-on-new: a regression became an alert after that run"),
    (EXIT_USAGE, BAD_INPUT + "; or the store cannot be read"),
))
DOC = "docs/history-and-changes.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    defaults = ChangeConfig()
    p.add_argument("--metric", nargs="+", default=list(DEFAULT_METRICS), choices=list(METRICS),
                   help="metrics to track (default median_s, the end-to-end time)")
    p.add_argument("--branch", nargs="+", default=[], help="only these branches (default: every branch)")
    for name in ("device", "workload", "backend", "precision"):
        p.add_argument(f"--{name}", nargs="+", default=[], help=f"only these {name}s")
    p.add_argument("--threshold", type=fraction_arg("--threshold"), default=defaults.threshold,
                   help=f"smallest change reported: 5%% or 0.05 (default {defaults.threshold * 100:g}%%)")
    p.add_argument("--threshold-db", type=float, default=defaults.threshold_db,
                   help=f"smallest SQNR change reported, dB (default {defaults.threshold_db})")
    p.add_argument("--alpha", type=float, default=defaults.alpha,
                   help=f"Mann-Whitney p-value a change must be under (default {defaults.alpha})")
    p.add_argument("--min-size", type=int, default=defaults.min_size,
                   help=f"fewest commits on each side of a change (default {defaults.min_size})")
    p.add_argument("--penalty", type=float, default=defaults.penalty,
                   help=f"PELT penalty in units of noise^2 x log(n); higher finds fewer (default {defaults.penalty})")
    p.add_argument("--all", action="store_true", help="also list closed regressions and improvements")
    p.add_argument("--fail-on-new", metavar="RUN_ID", default=None,
                   help="exit 1 if a regression became an alert after this run (see --alert-nights)")
    p.add_argument("--alert-nights", type=int, default=2, metavar="N",
                   help="an open regression alerts when its latest N nights are each worse than the level before "
                        "by the threshold, or when a bisect located it (default 2; 0: every open regression)")
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the change detector (pandas, ruptures) and the store at its top, which
    # `fp8bench changes --help` must not wait for.
    from fp8bench.commands import changes

    return changes.execute(args)
