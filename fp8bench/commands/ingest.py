"""`fp8bench ingest`: add fp8bench run files and pytest-benchmark JSON to a store, idempotently."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
    print_json,
    store_target,
)

DESCRIPTION = """Add results files to the store: fp8bench run files, or pytest-benchmark JSON
(`pytest --benchmark-json=FILE`). Ingesting the same run twice stores it once; several ingest processes may write
to one store at once. Each file is stored in its own transaction, all of it or nothing: a file that cannot be
read (corrupt, binary, not a results file, from a newer schema, a record missing a field or with a sample that is
not finite positive seconds) or that the store refuses is reported with its name and its first bad record, and the
others are still ingested.

examples:
  fp8bench ingest results/runs/*.json
  fp8bench ingest bench.json --store postgresql://bench@db.example/fp8bench"""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "every file ingested (or already stored)"),
    (EXIT_USAGE, BAD_INPUT + "; a file that cannot be read is named and skipped, the others are still ingested"),
))
DOC = "docs/store.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path)
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.core.escaping import one_line
    from fp8bench.results.ingest import ingest_file
    from fp8bench.results.store import open_store

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
