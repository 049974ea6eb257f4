"""`fp8bench ingest`: add run files to a store, idempotently."""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.common import (
    EXIT_OK,
    add_json_flag,
    add_store_flags,
    print_json,
    store_target,
)

NAME = "ingest"
HELP = "add fp8bench run files to a store (idempotent)"
DESCRIPTION = "Add run files to the store. Ingesting the same run twice stores it once."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=Path)
    add_store_flags(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.runfile import read_run_file
    from fp8bench.store import open_store

    store = open_store(store_target(args))
    results = []
    for path in args.files:
        payload = read_run_file(path)
        new_run, added = store.ingest_run(payload)
        results.append({"file": str(path), "run_id": payload["run"]["run_id"], "new_run": new_run,
                        "records_added": added})
        if not args.json:
            print(f"{path}: run {payload['run']['run_id']} {'added' if new_run else 'already stored'}, "
                  f"{added} new record(s)")
    print_json({"store": store.url, "ingested": results})
    return EXIT_OK
