"""`fp8bench doctor` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.doctor`.
"""

from __future__ import annotations

import argparse

from fp8bench.commands.verb_interface import (
    STANDARD_EXIT_CODES,
    add_json_flag,
)

DESCRIPTION = ("Report the device, library versions, the scaled-GEMM API this torch has (entry points, enums, FP8 "
               "and FP4 dtypes, and which entry point each scaling kind takes), the FP8 capability matrix (per "
               "scaling and per recipe and element format, with the reason for each refusal), backend availability "
               "per precision, the energy meter and the results location. --rules lists the CUDA scaled-GEMM rules "
               "behind the matrix, each with the CUDA source that enforces it.")
EXIT_CODES = STANDARD_EXIT_CODES
DOC = "docs/backends.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--rules", action="store_true",
                   help="also list the CUDA scaled-GEMM rules (architecture, CUDA/torch versions, dtypes) and "
                        "their sources")
    p.add_argument("--verbose", action="store_true",
                   help="also print torch's scaled-GEMM API, the recipes in training per element format, every "
                        "refusal's reason and the vendor limits (the default prints what runs here on one screen)")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads torch and every backend at its top, which
    # `fp8bench doctor --help` must not wait for.
    from fp8bench.commands import doctor

    return doctor.execute(args)
