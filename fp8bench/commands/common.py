"""What every verb shares: exit codes, the usage error, JSON output and the results folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fp8bench.paths import default_results_dir as default_results_dir  # re-exported for the verbs

EXIT_OK, EXIT_CASE_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON object instead of tables")


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="store path or URL (default RESULTS/fp8bench.sqlite; postgresql://... for a shared one)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="folder of run files, store and caches (default ./results or $FP8BENCH_RESULTS_DIR)")


def store_target(args: argparse.Namespace) -> str | Path:
    return args.store or (args.results_dir or default_results_dir())


def print_json(obj: Any) -> None:
    print(json.dumps(obj, default=str, allow_nan=False))
