"""What every verb shares: exit codes and their tables, the usage error, JSON output and the results folder.

Exit-code contract: every verb documents its codes in an :class:`ExitCodes` table (module attribute
``EXIT_CODES``), printed at the end of its ``--help``. Bad input (an unknown flag, a value that does not parse, an
unknown name, an unreadable file) exits with the table's ``bad_input`` code, which never shares a number with a
verdict: for ``gate`` and ``ab``, 2 means "inconclusive", so their bad input is 3.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # the store loads only when a verb opens one
    from fp8bench.results.store import Store

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


def table_console(mode: str) -> tuple[Any, bool]:
    """The console a result table is drawn on and whether it is compact (``mode`` from :func:`add_table_flag`):
    a terminal's own width (or ``$COLUMNS``), else :data:`LOG_COLUMNS`."""
    import os

    from rich.console import Console

    probe = Console()
    console = probe if probe.is_terminal or os.environ.get("COLUMNS") else Console(width=LOG_COLUMNS)
    compact = mode == "compact" or (mode == "auto" and probe.is_terminal and probe.width < COMPACT_BELOW_COLUMNS)
    return console, compact


# In a log, a long verb says how far it is at least this often (s) while steps complete: a tenth of a long run
# can take minutes, and a silent log reads as a hung job.
LOG_EVERY_S = 10.0


class StepProgress:
    """Progress of a long verb on stderr, in steps of work: on a terminal a bar with the step count, the time spent
    and the time left; elsewhere (a log, CI) one plain line each time another tenth of the work is done or a step
    ends :data:`LOG_EVERY_S` or more after the last line, so at most ten lines plus one per 10 s. The time left is
    the time spent per step so far times the steps to go."""

    def __init__(self, verb: str, total: int, console: Any, enabled: bool = True, unit: str = "steps",
                 clock: Any = None) -> None:
        import time

        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.verb, self.total, self.console, self.enabled, self.unit = verb, max(total, 1), console, enabled, unit
        self.clock = clock or time.monotonic
        self.done, self.label, self._reported_tenth = 0, "", 0
        self.started = self._last_line = self.clock()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=console,
                             transient=True) if enabled and console.is_terminal else None
        self._task = self._bar.add_task("", total=self.total) if self._bar else None

    def __enter__(self) -> StepProgress:
        if self._bar:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar:
            self._bar.stop()

    def start(self, label: str, announce: bool = True) -> None:
        """A new stretch of work begins (a curve, a round): shown beside the bar; in a log said once when
        ``announce``, else only in the next tenth's line."""
        self.label = label
        if self._bar is not None:
            self._bar.update(self._task, description=label)  # type: ignore[arg-type]
        elif self.enabled and announce:
            done = f"{self.done}/{self.total} {self.unit}, " if self.done else ""
            self._line(f"{self.verb}: {label} ({done}{self.remaining_text()})")

    def extend(self, steps: int) -> None:
        """More work than planned (a rerun): the total grows, the time left with it."""
        self.total += steps
        self._reported_tenth = 10 * self.done // self.total
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)  # type: ignore[arg-type]

    def advance(self, steps: int = 1, quiet: bool = False) -> None:
        """``steps`` more done; ``quiet``: no log line now (the next :meth:`start` announces the count)."""
        self.done = min(self.done + steps, self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)  # type: ignore[arg-type]
            return
        if quiet:
            return
        tenth = 10 * self.done // self.total
        due = tenth > self._reported_tenth or self.clock() - self._last_line >= LOG_EVERY_S
        if self.enabled and due:
            self._reported_tenth = tenth
            self._line(f"{self.verb}: {self.label}: {self.done}/{self.total} {self.unit}, {self.remaining_text()}")

    def _line(self, text: str) -> None:
        self._last_line = self.clock()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def remaining_text(self) -> str:
        spent = self.clock() - self.started
        if not self.done:
            return f"0 of {self.total} {self.unit}"
        left = spent / self.done * (self.total - self.done)
        return f"{spent:.0f} s spent, about {left:.0f} s left"


def store_target(args: argparse.Namespace) -> str | Path:
    return args.store or (args.results_dir or default_results_dir())


def lazy_read_only_store(args: argparse.Namespace) -> Callable[[], Any]:
    """A function that opens the verb's store for reading the first time it is called (``gate`` and ``compare``
    need a store only when a side names run ids, not for two files)."""
    from functools import cache

    from fp8bench.results.store import open_store

    return cache(lambda: open_store(store_target(args), read_only=True))


def check_filter_names(filters: Mapping[str, Iterable[str]],
                       stored: Mapping[str, Iterable[object]] | None = None) -> None:
    """Refuse a ``workload``, ``backend`` or ``precision`` filter value that is neither registered nor in the data.

    A filter that matches nothing would otherwise read as an empty store or "no change found": a typo must be bad
    input naming the value. Names found only in ``stored`` (written by an older version or a plugin not loaded now)
    stay accepted, since their records can still be read."""
    from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
    from fp8bench.core.precisions import PRECISIONS
    from fp8bench.core.registry import UnknownNameError

    load_all()
    registered = {"workload": WORKLOADS.names(), "backend": BACKENDS.names(), "precision": PRECISIONS.names()}
    for kind, names in filters.items():
        accepted = list(registered[kind])
        accepted += sorted({str(n) for n in (stored or {}).get(kind, ()) if n} - set(accepted))
        for name in names:
            if name not in accepted:
                raise UnknownNameError(kind, name, accepted)


def stored_names(store: Store) -> dict[str, list[str]]:
    """The workload, backend and precision names that ``store``'s records carry."""
    from fp8bench.results.store.queries import filter_options

    options = filter_options(store)
    return {kind: list(options[kind].dropna().unique()) for kind in ("workload", "backend", "precision")}


def harness_error(verb: str, exc: BaseException, expected: bool) -> int:
    """Say on stderr that ``fp8bench VERB`` stopped without a verdict, with the traceback of an ``expected=False``
    error (a bug, not bad input), and return the harness-error exit code."""
    import sys
    import traceback

    if not expected:
        traceback.print_exc(file=sys.stderr)
    print(f"fp8bench {verb}: harness error: {exc}", file=sys.stderr)
    return EXIT_HARNESS_ERROR


def print_json(obj: Any) -> None:
    print(json.dumps(obj, default=str, allow_nan=False))
