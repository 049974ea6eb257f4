"""`fp8bench compare BASE CAND`: ratio table of two runs, without gating (always exit 0 when it ran)."""

from __future__ import annotations

import argparse

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
    lazy_read_only_store,
    print_json,
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
    from fp8bench.commands.gating import add_gate_flags

    p.add_argument("base")
    p.add_argument("cand")
    add_gate_flags(p)
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:

    from fp8bench.analysis.gate.report import gate
    from fp8bench.commands.gating import gate_config, print_report
    from fp8bench.results.ingest import load_side

    store = lazy_read_only_store(args)  # opened only when a side names run ids
    report = gate(load_side(args.base, store), load_side(args.cand, store), gate_config(args))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
        print_json({"would_gate": report.verdict, "counts": {k.value: v for k, v in report.counts.items() if v}})
    return EXIT_OK
