"""`fp8bench ingest`: add fp8bench run files and pytest-benchmark JSON to a store, idempotently."""

from __future__ import annotations

import argparse
import sys

from fp8bench.commands.verb_interface import (
    EXIT_OK,
    EXIT_USAGE,
    print_json,
    store_target,
)
from fp8bench.core.escaping import one_line
from fp8bench.results.ingest import ingest_file
from fp8bench.results.store import open_store


def execute(args: argparse.Namespace) -> int:
    store = open_store(store_target(args))
    results, errors = [], []
    for path in args.files:
        done = ingest_file(store, path)
        if "error" in done:
            errors.append(done)
            print(f"fp8bench ingest: skipped: {one_line(done['error'])}", file=sys.stderr)
            continue
        results.append(done)
        for problem in done["records_skipped"]:
            print(f"fp8bench ingest: record skipped: {one_line(problem)}", file=sys.stderr)
        if not args.json:  # the run id is the file's text: shown without its control characters
            print(f"{path}: {done['source']} run {one_line(done['run_id'])} "
                  f"{'added' if done['new_run'] else 'already stored'}, "
                  f"{done['records_added']} new record(s) of {done['records_in_file']}")
    print_json({"store": store.url, "ingested": results, "errors": errors})
    # A skipped record is bad input too: the exit code says so, though the rest of its run is stored.
    return EXIT_USAGE if errors or any(r["records_skipped"] for r in results) else EXIT_OK
