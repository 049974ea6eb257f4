"""The gate's verdicts as plain text, for a terminal or a CI log (``gate``, ``compare`` and ``ab`` print it).

The same report as :mod:`fp8bench.render.gate_markdown`, in the same words (its headline, sides, method sentence
and cells), without Markdown: no pipes, no bold, no escapes such as ``\\[``. Cases come regressions first, as a
table whose reason column is cut to :data:`WHY_COLUMNS` characters (the reports keep it whole), then each distinct
note once with how many times it was given, then where the Markdown report is.

Every string that came from a run file or the command line passes through
:func:`fp8bench.core.escaping.term_text`, so a reason cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fp8bench.analysis.gate.metrics import METRICS
from fp8bench.analysis.gate.report import GateReport
from fp8bench.core.escaping import term_text
from fp8bench.render.gate_markdown import (
    case_cells,
    case_columns,
    headline,
    method_sentence,
    sides_line,
    sorted_cases,
)

# A case's reason in the terminal table, characters: the whole reason is in the reports.
WHY_COLUMNS = 60


def print_gate_table(report: GateReport, console: Console, md: Path | None = None) -> None:
    """``report`` on ``console``: the verdict, the sides, the method, a table of the cases and each distinct note
    once; then the path of the Markdown report (``md``) when one was written."""
    metric = METRICS[report.config.metric]
    title, verdict = headline(report)
    console.print(f"{title}: {verdict}", markup=False, highlight=False)
    console.print(term_text(sides_line(report)), highlight=False, soft_wrap=True)
    console.print(term_text(method_sentence(report, metric)), highlight=False)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in case_columns(report, metric):
        table.add_column(name, no_wrap=name != "why", overflow="ellipsis", max_width=WHY_COLUMNS if name == "why"
                         else None, justify="left" if name in ("case", "verdict", "why") else "right")
    for c in sorted_cases(report):
        case, *middle, why = case_cells(c, metric)
        short = why if len(why) <= WHY_COLUMNS else why[:WHY_COLUMNS - 3] + "..."
        table.add_row(*(term_text(v) for v in (case, *middle, short)))
    console.print(table)
    for note, times in Counter(report.notes).items():
        console.print(term_text(f"note: {note}" + (f" ({times} times)" if times > 1 else "")), highlight=False)
    if md is not None:
        console.print(f"the Markdown report (pull request, job summary): {md}", markup=False, highlight=False,
                      soft_wrap=True)
