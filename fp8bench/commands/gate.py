"""`fp8bench gate BASE CAND`: the statistical regression gate (see :mod:`fp8bench.analysis.gate`)."""

from __future__ import annotations

import argparse
import sys
import traceback

from fp8bench.analysis.gate.report import SAME_RUN_NOTE, GateReport, gate
from fp8bench.commands.gating import check_report_dir, gate_config, publish_report, write_report
from fp8bench.commands.store_access import lazy_read_only_store
from fp8bench.commands.verb_interface import (
    EXIT_HARNESS_ERROR,
    default_results_dir,
)
from fp8bench.core.escaping import one_line
from fp8bench.results.ingest import load_side


def warn_same_runs(report: GateReport) -> None:
    """Say on stderr when both sides are the same run(s): such a gate can only pass."""
    prefix = SAME_RUN_NOTE.split("{", 1)[0]
    for note in report.notes:
        if note.startswith(prefix):
            print(f"fp8bench gate: warning: {one_line(note)}", file=sys.stderr)

def execute(args: argparse.Namespace) -> int:
    try:
        if args.report_dir is not None:
            check_report_dir(args.report_dir, args.force, "--report-dir")
        config = gate_config(args)
        store = lazy_read_only_store(args)  # opened only when a side names run ids
        report = gate(load_side(args.base, store), load_side(args.cand, store), config)
    except Exception as exc:  # any failure to produce a verdict is a harness error, never a pass
        print(f"fp8bench gate: harness error: {exc}", file=sys.stderr)
        if not isinstance(exc, ValueError | OSError | RuntimeError):
            traceback.print_exc(file=sys.stderr)
        return EXIT_HARNESS_ERROR
    warn_same_runs(report)
    folder = args.report_dir or (args.results_dir or default_results_dir()) / "gate" / report.report_id
    try:
        md, js = write_report(report, folder, args.force)
    except (OSError, ValueError) as exc:
        print(f"fp8bench gate: harness error: cannot write the report to {folder}: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    return publish_report(report, md, js, args, "gate",
                          args.store or (args.results_dir or default_results_dir()), report_json=str(js))
