"""`fp8bench converge` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.converge`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED,
    ExitCodes,
    add_json_flag,
    add_store_flags,
)
from fp8bench.core.units import fraction_arg

DESCRIPTION = """Train the same GPT-style decoder (same initial weights, same synthetic batches) for N steps in
BF16 and in each FP8 or 4-bit (nvfp4, mxfp4) recipe, and compare every loss curve with BF16's: final and largest
relative gap, and a
divergence flag (NaN/Inf, a gap over --diverge-gap, or a loss spike). A negative control with FP8 scaling
disabled (fp8_unscaled) runs too, to show the check fails when training breaks. Each curve is stored as a
record (workload transformer_step, per-step losses in extra.losses).

examples:
  fp8bench converge --steps 200
  fp8bench converge --steps 50 --precision bf16 fp8_rowwise --backend torch
  fp8bench converge --shape tiny,seq=32 --fp8-format hybrid --no-control
  fp8bench converge --steps 40 --precision nvfp4 mxfp4 --stochastic-rounding off --rht on"""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "no FP8 recipe diverged, and the negative control was flagged"),
    (EXIT_CASE_FAILED, "a recipe diverged or failed to train, or the negative control was not flagged"),
    (EXIT_USAGE, BAD_INPUT),
    (EXIT_DISK_FULL, "the disk filled: the curves written before are kept in the run file"),
    (EXIT_INTERRUPTED, INTERRUPTED + " (finished curves)"),
))
DOC = "docs/workloads.md"

DEFAULT_PRECISIONS = ["bf16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8", "nvfp4",
                      "mxfp4"]
ON_OFF = {"on": True, "off": False}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", default="tiny", help="transformer_step shape or preset (default tiny)")
    p.add_argument("--steps", type=int, default=200, help="training steps per curve (default 200)")
    p.add_argument("--precision", nargs="+", default=DEFAULT_PRECISIONS,
                   help=f"precisions to train (default: {' '.join(DEFAULT_PRECISIONS)}); bf16 is always included")
    p.add_argument("--backend", default="emulated",
                   help="backend whose layers train: emulated (default; any recipe, any device) or torch (native "
                        "FP8 GEMMs; on the CPU only rowwise is fast)")
    p.add_argument("--fp8-format", default=None, choices=["e4m3", "e5m2", "hybrid"],
                   help="FP8 element format (default: each recipe's; fp8_delayed trains in hybrid, TE's default)")
    p.add_argument("--stochastic-rounding", choices=sorted(ON_OFF), default=None,
                   help="4-bit recipes: round gradients stochastically (default: each recipe's; nvfp4 on, as TE's "
                        "NVFP4BlockScaling, mxfp4 off); FP8 recipes are unaffected")
    p.add_argument("--rht", choices=sorted(ON_OFF), default=None,
                   help="4-bit recipes: 16x16 random Hadamard transform of the wgrad GEMM's operands (default: "
                        "each recipe's; nvfp4 on, mxfp4 off); FP8 recipes are unaffected")
    p.add_argument("--no-control", action="store_true", help="skip the fp8_unscaled negative control")
    p.add_argument("--window", type=int, default=10, help="smoothing window in steps (default 10)")
    p.add_argument("--tolerance", type=fraction_arg("--tolerance"), default=0.05,
                   help="final relative gap counted as ok: 5%% or 0.05 (default 5%%)")
    p.add_argument("--diverge-gap", type=fraction_arg("--diverge-gap"), default=0.25,
                   help="relative gap flagged as diverged: 25%% or 0.25 (default 25%%)")
    p.add_argument("--stats-every", type=int, default=25, help="sample FP8 cast statistics every N steps (0: off)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--out", type=Path, default=None, help="run file path (default RESULTS/runs/RUN_ID.json)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing run file")
    add_store_flags(p)
    p.add_argument("--no-store", action="store_true", help="write the run file only")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads torch and the training loop at its top, which
    # `fp8bench converge --help` must not wait for.
    from fp8bench.commands import converge

    return converge.execute(args)
