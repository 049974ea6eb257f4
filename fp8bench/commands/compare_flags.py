"""`fp8bench compare` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.compare`.
"""

from __future__ import annotations

import argparse

from fp8bench.commands.gating_flags import add_gate_flags
from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
)

DESCRIPTION = """Compare two runs case by case: ratio median(cand)/median(base), its bootstrap interval,
one-sided Mann-Whitney p-values after Benjamini-Hochberg, and the verdict the gate would give.

BASE and CAND are run files, pytest-benchmark JSON files, folders of rounds, or store run ids. Unlike `gate`
this never fails on a slowdown: it exits 0 whenever the comparison ran.

examples:
  fp8bench compare results/runs/A.json results/runs/B.json
  fp8bench compare RUN_ID_A RUN_ID_B --store postgresql://bench@db/fp8bench --json"""
EXIT_CODES = ExitCodes(((EXIT_OK, "the comparison ran, whatever it found (use `gate` to fail on a regression)"),
                        (EXIT_USAGE, BAD_INPUT)))
DOC = "docs/gate.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base")
    p.add_argument("cand")
    add_gate_flags(p)
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the gate's statistics and the store at its top, which
    # `fp8bench compare --help` must not wait for.
    from fp8bench.commands import compare

    return compare.execute(args)
