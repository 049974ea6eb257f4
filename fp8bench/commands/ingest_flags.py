"""`fp8bench ingest` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.ingest`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
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
    # Imported only now: the action loads the store (SQLAlchemy, pandas) at its top, which
    # `fp8bench ingest --help` must not wait for.
    from fp8bench.commands import ingest

    return ingest.execute(args)
