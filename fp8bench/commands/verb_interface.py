"""What every verb shows its caller: exit codes and their tables, the usage error, the flags several verbs take,
JSON output and the results folder. Imported to build any verb's ``--help``, so it imports nothing heavy.

Exit-code contract: every verb documents its codes in an :class:`ExitCodes` table (module attribute
``EXIT_CODES``), printed at the end of its ``--help``. Bad input (an unknown flag, a value that does not parse, an
unknown name, an unreadable file) exits with the table's ``bad_input`` code, which never shares a number with a
verdict: for ``gate`` and ``ab``, 2 means "inconclusive", so their bad input is 3.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Re-exported for the verbs: they take every shared name from this module.
from fp8bench.exit_codes import (  # noqa: F401
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_HARNESS_ERROR,
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PASS,
    EXIT_REGRESSION,
    EXIT_USAGE,
)
from fp8bench.paths import default_results_dir  # noqa: F401

BAD_INPUT = "bad input: an unknown flag or name, a value that does not parse, an unreadable file (one line on stderr)"
INTERRUPTED = "interrupted by Ctrl-C, SIGTERM or SIGHUP; everything finished before it is kept"


@dataclass(frozen=True)
class ExitCodes:
    """One verb's exit codes: ``(code, meaning)`` rows, and the code its bad input exits with."""

    rows: tuple[tuple[int, str], ...]
    bad_input: int = EXIT_USAGE

    def __post_init__(self) -> None:
        codes = [code for code, _ in self.rows]
        if len(set(codes)) != len(codes):
            raise ValueError(f"exit-code table lists a code twice: {codes}")
        if self.bad_input not in codes:
            raise ValueError(f"the bad-input code {self.bad_input} is not in the table {codes}")

    def meaning(self, code: int) -> str:
        return dict(self.rows)[code]

    def help_text(self, width: int = 100) -> str:
        """The table as ``--help`` prints it: one code per row, meanings wrapped under themselves."""
        rows = [textwrap.fill(meaning, width, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
                for code, meaning in self.rows]
        return "exit codes:\n" + "\n".join(rows)


STANDARD_EXIT_CODES = ExitCodes(((EXIT_OK, "success"), (EXIT_USAGE, BAD_INPUT)))
"""The table of a verb that has no verdict of its own."""

GATE_EXIT_CODES = ExitCodes((
    (EXIT_PASS, "pass: no case regressed (and none was inconclusive, unless --fail-on regression)"),
    (EXIT_REGRESSION, "regression: a case is slower (or, with --metric, uses more energy or lost accuracy) beyond "
                      "its threshold, broke, or is missing from the candidate (unless --allow-missing)"),
    (EXIT_INCONCLUSIVE, "inconclusive, noisy or incomparable: a case could be neither confirmed nor ruled out, its "
                        "difference lies within the noise of a side measured under load or with spread samples "
                        "(rerun as interleaved rounds: `fp8bench ab`), or nothing could be compared (exits 0 "
                        "instead under --fail-on regression)"),
    (EXIT_HARNESS_ERROR, "harness error or bad input (argparse's own errors included; a timing sample that is not "
                         "finite positive seconds; a run that did not finish, unless --allow-partial): no verdict "
                         "was reached"),
), bad_input=EXIT_HARNESS_ERROR)
"""``gate`` and ``ab``: a usage error must never read as a verdict."""

STOPPED_ROW = (EXIT_INTERRUPTED, "interrupted by Ctrl-C, SIGTERM or SIGHUP: workers stopped, temporary worktrees "
                                 "removed, every round file finished before it kept in --out")
"""``ab`` and ``bisect`` run for minutes to hours; a stop is their own row, not a verdict."""


def help_epilog(codes: ExitCodes, doc: str) -> str:
    """What ends every verb's ``--help``: its exit-code table and the document that explains it."""
    return f"{codes.help_text()}\n\ndocs: {doc} in the fp8bench repository"


class UsageError(Exception):
    """Bad input from the user: printed as one line; the verb exits with its bad-input code."""


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON object instead of tables")


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="store path or URL (default RESULTS/fp8bench.sqlite; postgresql://... for a shared one)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="folder of run files, store and caches (default ./results or $FP8BENCH_RESULTS_DIR)")


# A console narrower than this gets the compact table by default: the full one would keep too few columns.
COMPACT_BELOW_COLUMNS = 100
# Where stdout is no terminal (a log, a pipe), tables are drawn this wide: a log line may be long, a cut one is lost.
LOG_COLUMNS = 200


def add_table_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", choices=("auto", "full", "compact"), default="auto",
                        help="full: one table, the columns that fit the console (the rest named under it); "
                             f"compact: one plain line per case, for narrow consoles and logs; auto (default): "
                             f"compact on a terminal under {COMPACT_BELOW_COLUMNS} columns, else full")


def store_target(args: argparse.Namespace) -> str | Path:
    return args.store or (args.results_dir or default_results_dir())


def harness_error(verb: str, exc: BaseException, expected: bool) -> int:
    """Say on stderr that ``fp8bench VERB`` stopped without a verdict, with the traceback of an ``expected=False``
    error (a bug, not bad input), and return the harness-error exit code."""
    if not expected:
        traceback.print_exc(file=sys.stderr)
    print(f"fp8bench {verb}: harness error: {exc}", file=sys.stderr)
    return EXIT_HARNESS_ERROR


def print_json(obj: Any) -> None:
    print(json.dumps(obj, default=str, allow_nan=False))
