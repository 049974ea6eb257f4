"""`fp8bench compare BASE CAND`: ratio table of two runs, without gating (always exit 0 when it ran)."""

from __future__ import annotations

import argparse

from fp8bench.analysis.gate.report import gate
from fp8bench.commands.gating import gate_config, print_report
from fp8bench.commands.store_access import lazy_read_only_store
from fp8bench.commands.verb_interface import (
    EXIT_OK,
    print_json,
)
from fp8bench.results.ingest import load_side


def execute(args: argparse.Namespace) -> int:
    store = lazy_read_only_store(args)  # opened only when a side names run ids
    report = gate(load_side(args.base, store), load_side(args.cand, store), gate_config(args))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
        print_json({"would_gate": report.verdict, "counts": {k.value: v for k, v in report.counts.items() if v}})
    return EXIT_OK
