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

NAME = "ingest"
HELP = "add fp8bench run files and pytest-benchmark JSON to a store (idempotent)"
DESCRIPTION = """Add results files to the store: fp8bench run files, or pytest-benchmark JSON
(`pytest --benchmark-json=FILE`). Ingesting the same run twice stores it once; several ingest processes may write
to one store at once. A file that cannot be read (corrupt, not a results file, from a newer schema) is reported and
skipped; the others are still ingested.

examples:
  fp8bench ingest results/runs/*.json
  fp8bench ingest bench.json --store postgresql://bench@db.example/fp8bench"""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "every file ingested (or already stored)"),
    (EXIT_USAGE, BAD_INPUT + "; a file that cannot be read is named and skipped, the others are still ingested"),
))
DOC = "docs/gate.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path)
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.ingest import read_results_file
    from fp8bench.runfile import RunFileError
    from fp8bench.store import open_store

    store = open_store(store_target(args))
    results, errors = [], []
    for path in args.files:
        try:
            payload, source = read_results_file(path)
        except RunFileError as exc:
            errors.append({"file": str(path), "error": str(exc)})
            print(f"fp8bench ingest: skipped {path}: {exc}", file=sys.stderr)
            continue
        new_run, added = store.ingest_run(payload, source)
        run_id = payload["run"]["run_id"]
        results.append({"file": str(path), "run_id": run_id, "source": source, "new_run": new_run,
                        "records_added": added, "records_in_file": len(payload["records"])})
        if not args.json:
            print(f"{path}: {source} run {run_id} {'added' if new_run else 'already stored'}, "
                  f"{added} new record(s) of {len(payload['records'])}")
    print_json({"store": store.url, "ingested": results, "errors": errors})
    return EXIT_USAGE if errors else EXIT_OK
