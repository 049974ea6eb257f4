"""Bisect's finding as plain text, for a terminal or a CI log: what ``fp8bench bisect`` prints on stdout.

The same finding as the issue body (:mod:`fp8bench.render.bisect_markdown`), in the same words, without Markdown:
the verdict with the exit code, the first slower commit and its ratio (or why there is none), the cases and the
range, one table row per probe (commit, subject, outcome, ratio, rounds, seconds, the reason cut to
:data:`WHY_COLUMNS` characters; bisect.json keeps it whole), the command that measures the step again, and where
the Markdown report is.

Every string that came from git or a run passes through :func:`fp8bench.core.escaping.term_text`, so a commit
subject cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fp8bench.analysis.bisect import BisectResult
from fp8bench.core.escaping import term_text
from fp8bench.render.bisect_markdown import (
    PROBE_COLUMNS,
    again_command,
    cases_line,
    finding,
    headline,
    probe_cells,
    range_line,
)
from fp8bench.render.gate_table import WHY_COLUMNS

# A probe's subject in the terminal table, characters (its reason is cut as the gate cuts a case's: WHY_COLUMNS); the
# reports keep both whole.
SUBJECT_COLUMNS = 40


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def print_bisect_table(result: BisectResult, cases: Sequence[str], run_args: Sequence[str], console: Console,
                       md: Path | None = None) -> None:
    """``result`` on ``console``: the verdict, the finding, the cases and range, a table of the probes, the
    command that measures the step again, and the path of the Markdown report (``md``) when one was written."""
    title, verdict = headline(result)
    console.print(f"{title}: {verdict}", markup=False, highlight=False)
    for line in [*finding(result), cases_line(cases), range_line(result)]:
        console.print(term_text(line), highlight=False, soft_wrap=True)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in PROBE_COLUMNS:  # a header is Rich markup unless given as Text: "[interval]" would be a tag
        table.add_column(Text(name), no_wrap=True, overflow="ellipsis",
                         justify="right" if name in ("rounds", "s") else "left")
    for p in result.probes:
        commit, subject, *middle, why = probe_cells(p)
        table.add_row(*(term_text(v) for v in (commit, _cut(subject, SUBJECT_COLUMNS), *middle,
                                                _cut(why, WHY_COLUMNS))))
    console.print(table)
    console.print(term_text(f"Measure it again: {again_command(result, run_args)}"), highlight=False, soft_wrap=True)
    if md is not None:
        console.print(f"the Markdown report (issue body, job summary): {md}", markup=False, highlight=False,
                      soft_wrap=True)
