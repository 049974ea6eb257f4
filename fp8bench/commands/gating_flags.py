"""The gate's flags, which ``gate``, ``compare``, ``ab`` and ``bisect`` share: its statistical settings and what fails
the job. Light, as each of those verbs' ``--help`` builds them; :func:`fp8bench.commands.gating.gate_config` turns
them into the gate's configuration when a verb runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.analysis.gate.metrics import DEFAULT_SQNR_TOLERANCE_DB, METRICS
from fp8bench.core.units import fraction_arg


def add_gate_flags(p: argparse.ArgumentParser) -> None:
    """The gate's statistical settings (shared with `fp8bench ab`)."""
    p.add_argument("--threshold", type=fraction_arg("--threshold"), default=0.05,
                   help="slowdown that matters: 5%% or 0.05 (default 5%%)")
    p.add_argument("--override", action="append", default=[], metavar="PATTERN=T",
                   help="per-case threshold: fnmatch pattern on the case key = 8%% or 0.08 (repeatable)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance after Benjamini-Hochberg (default 0.01)")
    p.add_argument("--confidence", type=float, default=0.95, help="bootstrap interval confidence (default 0.95)")
    p.add_argument("--aa-noise", type=fraction_arg("--aa-noise"), default=None,
                   help="A/A noise of this runner (typical |ratio-1|, 1%% or 0.01); T is never below 3x this")
    p.add_argument("--aa-report", type=Path, default=None,
                   help="an A/A gate report (JSON) to take the A/A noise from")
    p.add_argument("--allow-missing", action="store_true",
                   help="a case the base has and the candidate lacks is 'removed' (informational) instead of "
                        "'missing', which fails the gate")
    p.add_argument("--allow-partial", action="store_true",
                   help="accept runs that did not finish (interrupted, running, failed); refused by default")
    p.add_argument("--metric", choices=list(METRICS), default="median_s",
                   help="what is compared: median_s (time, default), energy_j (joules per iteration, needs rounds) "
                        "or sqnr_db (accuracy; a drop is a regression)")
    p.add_argument("--sqnr-tolerance", type=float, default=DEFAULT_SQNR_TOLERANCE_DB, metavar="DB",
                   help=f"--metric sqnr_db: a drop of more than this many dB is a regression "
                        f"(default {DEFAULT_SQNR_TOLERANCE_DB:g})")
    p.add_argument("--sqnr-floor", action="append", default=[], metavar="PRECISION=DB",
                   help="--metric sqnr_db: a candidate under this SQNR is a regression whatever the base did; "
                        "PRECISION is an fnmatch pattern (fp8_*=20); repeatable, the last match wins")


def add_verdict_flags(p: argparse.ArgumentParser) -> None:
    """What fails the job (``gate`` and ``ab``; ``compare`` never fails)."""
    p.add_argument("--fail-on", choices=("inconclusive", "regression"), default="inconclusive",
                   help="inconclusive (default): an inconclusive, noisy or incomparable outcome exits 2, a "
                        "regression 1; regression: only a regression fails, an undecided outcome exits 0 (still "
                        "reported)")
