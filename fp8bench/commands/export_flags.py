"""`fp8bench export` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.export`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_store_flags,
)
from fp8bench.render.export import FORMATS, SMALLER_IS_BETTER

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


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads the store (SQLAlchemy, pandas) at its top, which
    # `fp8bench export --help` must not wait for.
    from fp8bench.commands import export

    return export.execute(args)
