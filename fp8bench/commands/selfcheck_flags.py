"""`fp8bench selfcheck` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.selfcheck`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_HARNESS_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    INTERRUPTED,
    ExitCodes,
    add_json_flag,
)

DESCRIPTION = """Check that fp8bench measures this device correctly. Run it first on a new GPU runner (and after a
driver, CUDA or torch upgrade); CI runs it before gating. Under 5 minutes; ends in a PASS/FAIL table and a run file.

checks:
  gemm_peak      BF16 and FP8 GEMM at 8192^3 (or the largest that fits) reach 50% of the device table's dense peak
  timer_vs_wall  the device timer (CUDA events) agrees with the wall clock over a 1 s loop within 5%
  sqnr           every FP8 recipe (E4M3, E5M2) and 4-bit recipe (E2M1) within 2 dB of the SQNR predicted from the format
  energy         NVML's energy counter advances, and J/iteration agrees with power x time within 20%
  backend        every available backend's smallest case runs, or is refused with a reason
  claims         each statement about GPUs that was checked only against fakes, probed in seconds (held/failed with
                 the figure; on the CPU, listed as the probes it would run): docs/gpu-claims.md
On the CPU, gemm_peak and energy are listed as "needs a GPU" (never as PASS), and cpu_ceiling checks the runner
against the CPU's measured matmul ceiling. What each check does, what a FAIL means and what to send in a bug
report: docs/selfcheck.md.

examples:
  fp8bench selfcheck
  fp8bench selfcheck --device cuda:1 --out results/selfcheck-cuda1.json
  fp8bench selfcheck --backend torch emulated --json
  fp8bench selfcheck --check gemm_peak timer_vs_wall      # rerun what failed
  fp8bench selfcheck --device cpu --check claims          # the GPU claims and the probe of each
"""
# CI gates on this verb, so its bad input takes 3, like gate's and ab's: never the number of a verdict.
EXIT_CODES = ExitCodes((
    (EXIT_OK, "every check that ran passed (checks that need a GPU are listed as such, never as passed)"),
    (EXIT_CASE_FAILED, "a check failed"),
    (EXIT_HARNESS_ERROR, "harness error (a check broke; the other checks still ran) or " + BAD_INPUT),
    (EXIT_DISK_FULL, "the disk filled: the run stopped, status 'failed: disk full'; the run file keeps every record "
                     "written before"),
    (EXIT_INTERRUPTED, INTERRUPTED + " in the run file"),
), bad_input=EXIT_HARNESS_ERROR)
DOC = "docs/selfcheck.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--backend", nargs="+", default=None,
                   help="backends whose smallest case is checked (default: every registered backend)")
    p.add_argument("--check", nargs="+", default=None, metavar="CHECK",
                   help="run only these checks (default: all): gemm_peak, cpu_ceiling, timer_vs_wall, sqnr, energy, "
                        "backend, claims")
    p.add_argument("--out", type=Path, default=None,
                   help="run file path (default RESULTS/selfcheck/RUN_ID.json)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing run file")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="results folder (default ./results or $FP8BENCH_RESULTS_DIR)")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads torch and the device checks at its top, which
    # `fp8bench selfcheck --help` must not wait for.
    from fp8bench.commands import selfcheck

    return selfcheck.execute(args)
