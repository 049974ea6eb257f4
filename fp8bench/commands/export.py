"""`fp8bench export`: records from a store or run files, filtered like the dashboard, as CSV, Parquet,
github-action-benchmark or Bencher JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    UsageError,
    add_store_flags,
    check_filter_names,
    store_target,
    stored_names,
)

DESCRIPTION = """Export records for the tools CI already reads, from run files (or pytest-benchmark JSON) or, when
no file is given, from the store. The filters are the dashboard's: device (its model, or its kind where the run
did not record one), workload, backend, precision, branch and a run range.

formats:
  csv, parquet              one row per record, every status, flat columns (seconds, joules, dB)
  github-action-benchmark   benchmark-action/github-action-benchmark input for tool: customSmallerIsBetter
                            (end-to-end median in ms by default; --metric energy_j or prequant_median_s)
  bencher                   Bencher Metric Format JSON: latency (ns), throughput-tflops, energy-j, sqnr-db
The two tracker formats take speed-comparable records only (ok, valid, not interpreted, timed), the latest per case.

examples:
  fp8bench export --format csv > results/records.csv
  fp8bench export results/runs/RUN.json --format github-action-benchmark --out results/bench.json
  fp8bench export --format bencher --device cpu --workload gemm --runs RUN_A..RUN_B --out results/bmf.json
  fp8bench export --store postgresql://bench@db/fp8bench --format parquet --out results/fp8bench.parquet"""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "written"),
    (EXIT_CASE_FAILED, "no record matched the filters (nothing is written)"),
    (EXIT_USAGE, BAD_INPUT + "; or Parquet asked for without pyarrow or without --out; or --out names a device, "
                             "FIFO, link or (without --force) an existing file"),
))
DOC = "docs/export.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fp8bench.results.export import FORMATS, SMALLER_IS_BETTER

    p.add_argument("files", nargs="*", type=Path,
                   help="run files or pytest-benchmark JSON (default: every run in the store)")
    p.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    p.add_argument("--out", type=Path, default=None,
                   help="file to write (default: stdout; Parquet needs a file); never a device, FIFO or link, and "
                        "not an existing file unless --force")
    p.add_argument("--force", action="store_true", help="let --out replace an existing file")
    p.add_argument("--metric", choices=list(SMALLER_IS_BETTER), default="median_s",
                   help="github-action-benchmark: the value exported (default median_s, in milliseconds)")
    p.add_argument("--device", nargs="+", default=(), help="device model(s), as `fp8bench doctor` names them")
    p.add_argument("--workload", nargs="+", default=(), help="workload name(s)")
    p.add_argument("--backend", nargs="+", default=(), help="backend name(s)")
    p.add_argument("--precision", nargs="+", default=(), help="precision name(s)")
    p.add_argument("--branch", nargs="+", default=(), help="git branch(es) of the measured commit")
    p.add_argument("--runs", default=None, metavar="FIRST..LAST",
                   help="runs from FIRST to LAST (run ids, both included, in start-time order), or one run id")
    add_store_flags(p)


def _rows(args: argparse.Namespace) -> list[Any]:
    """The records the source and filters select."""
    from fp8bench.results.export import keeps, rows_from_payloads, rows_from_store, run_range, store_runs
    from fp8bench.results.store.queries import RecordFilter

    def record_filter(started: dict[str, str]) -> RecordFilter:
        lo, hi = run_range(started, args.runs)
        return RecordFilter(device=tuple(args.device), workload=tuple(args.workload), backend=tuple(args.backend),
                            precision=tuple(args.precision), branch=tuple(args.branch), started_from=lo,
                            started_to=hi)

    filters = {"workload": args.workload, "backend": args.backend, "precision": args.precision}
    if args.files:
        from fp8bench.results.ingest import read_results_file

        rows = rows_from_payloads(read_results_file(path)[0] for path in args.files)
        check_filter_names(filters, {"workload": [r.record.workload for r in rows],
                                     "backend": [r.record.backend for r in rows],
                                     "precision": [r.record.precision for r in rows]})
        flt = record_filter({r.run["run_id"]: str(r.run.get("started_at") or "") for r in rows})
        return [r for r in rows if keeps(flt, r)]
    from fp8bench.results.store import open_store

    store = open_store(store_target(args), read_only=True)
    check_filter_names(filters, stored_names(store))
    headers = store_runs(store)
    return rows_from_store(store, record_filter({k: str(h.get("started_at") or "") for k, h in headers.items()}),
                           headers)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.analysis.selection import is_speed_comparable
    from fp8bench.results.export import count, render, write
    from fp8bench.results.runfile import check_writable

    if args.format == "parquet" and args.out is None:
        raise UsageError("--format parquet writes a binary file: give --out PATH")
    if args.out is not None:
        check_writable(args.out, overwrite=args.force, what="the export")
    rows = _rows(args)
    entries = count(rows, args.format, args.metric, comparable=is_speed_comparable)
    if not entries:
        what = "record" if args.format in ("csv", "parquet") else "measured record"
        print(f"fp8bench export: no {what} matched ({len(rows)} record(s) selected); nothing written", file=sys.stderr)
        return EXIT_CASE_FAILED
    data = render(rows, args.format, args.metric, comparable=is_speed_comparable)
    if args.out is None:
        sys.stdout.write(data.decode())
        sys.stdout.flush()
    else:
        write(data, args.out, overwrite=args.force)
        unit = "row" if args.format in ("csv", "parquet") else "benchmark"
        print(f"fp8bench export: {entries} {unit}(s) written to {args.out}", file=sys.stderr)
    return EXIT_OK
