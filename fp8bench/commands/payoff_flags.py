"""`fp8bench payoff` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.payoff`.
"""

from __future__ import annotations

import argparse

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
)

DESCRIPTION = """Answer the headline question from the store: per device and workload, the smallest shape from
which each FP8 (or 4-bit) recipe is faster than the baseline end to end (quantization included) at every larger
measured shape, the speedup there and at the largest shape measured, its SQNR cost in dB and its energy per
iteration against the baseline. "never within the measured shapes" where it never pays off.

Reads the latest valid, non-interpreted record of each case; each cell takes the fastest backend (the emulated
reference backend is left out). Narrow it with --device, --workload, --precision, --backend or --branch.

examples:
  fp8bench payoff
  fp8bench payoff --store postgresql://bench@db/fp8bench --workload gemm --json"""
EXIT_CODES = ExitCodes(((EXIT_OK, "listed, also when no recipe pays off"),
                        (EXIT_USAGE, BAD_INPUT + "; or the store cannot be read")))
DOC = "docs/payoff.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", default="bf16", help="precision the recipes are measured against (default bf16)")
    for name in ("device", "workload", "backend", "precision", "branch"):
        p.add_argument(f"--{name}", nargs="+", default=[], help=f"only these {name}es" if name.endswith("h")
                       else f"only these {name}s")
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads pandas and the store at its top, which
    # `fp8bench payoff --help` must not wait for.
    from fp8bench.commands import payoff

    return payoff.execute(args)
