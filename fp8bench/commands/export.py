"""`fp8bench export`: records from a store or run files, filtered like the dashboard, as CSV, Parquet,
github-action-benchmark or Bencher JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fp8bench.commands.store_access import check_filter_names, stored_names
from fp8bench.commands.verb_interface import (
    EXIT_CASE_FAILED,
    EXIT_OK,
    UsageError,
    store_target,
)
from fp8bench.render.export import count, render
from fp8bench.results.export import (
    keeps,
    rows_from_payloads,
    rows_from_store,
    run_range,
    store_runs,
)
from fp8bench.results.ingest import read_results_file
from fp8bench.results.runfile import check_writable, write_user_file
from fp8bench.results.store import open_store
from fp8bench.results.store.queries import RecordFilter


def _rows(args: argparse.Namespace) -> list[Any]:
    """The records the source and filters select."""
    def record_filter(started: dict[str, str]) -> RecordFilter:
        lo, hi = run_range(started, args.runs)
        return RecordFilter(device=tuple(args.device), workload=tuple(args.workload), backend=tuple(args.backend),
                            precision=tuple(args.precision), branch=tuple(args.branch), started_from=lo,
                            started_to=hi)

    filters = {"workload": args.workload, "backend": args.backend, "precision": args.precision}
    if args.files:
        rows = rows_from_payloads(read_results_file(path)[0] for path in args.files)
        check_filter_names(filters, {"workload": [r.record.workload for r in rows],
                                     "backend": [r.record.backend for r in rows],
                                     "precision": [r.record.precision for r in rows]})
        flt = record_filter({str(r.run.run_id): str(r.run.started_at or "") for r in rows})
        return [r for r in rows if keeps(flt, r)]

    store = open_store(store_target(args), read_only=True)
    check_filter_names(filters, stored_names(store))
    headers = store_runs(store)
    return rows_from_store(store, record_filter({k: str(h.started_at or "") for k, h in headers.items()}),
                           headers)


def execute(args: argparse.Namespace) -> int:
    if args.format == "parquet" and args.out is None:
        raise UsageError("--format parquet writes a binary file: give --out PATH")
    if args.out is not None:
        check_writable(args.out, overwrite=args.force, what="the export")
    rows = _rows(args)
    entries = count(rows, args.format, args.metric)
    if not entries:
        what = "record" if args.format in ("csv", "parquet") else "measured record"
        print(f"fp8bench export: no {what} matched ({len(rows)} record(s) selected); nothing written", file=sys.stderr)
        return EXIT_CASE_FAILED
    data = render(rows, args.format, args.metric)
    if args.out is None:
        sys.stdout.write(data.decode())
        sys.stdout.flush()
    else:
        # Atomic (a reader never sees half a file), never over a device, a FIFO or a link, nor over an existing
        # file unless --force.
        write_user_file(args.out, data, args.force, what="the export")
        unit = "row" if args.format in ("csv", "parquet") else "benchmark"
        print(f"fp8bench export: {entries} {unit}(s) written to {args.out}", file=sys.stderr)
    return EXIT_OK
