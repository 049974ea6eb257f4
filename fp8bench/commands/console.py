"""How a verb's action draws on the terminal: the console a result table goes to (a terminal's width, or a wide
one for logs) and :class:`StepProgress`, the progress of a long verb on stderr. rich loads with it, so only actions
import it, never a verb's flags.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fp8bench.commands.verb_interface import COMPACT_BELOW_COLUMNS, LOG_COLUMNS


def table_console(mode: str) -> tuple[Any, bool]:
    """The console a result table is drawn on and whether it is compact (``mode`` from :func:`add_table_flag`):
    a terminal's own width (or ``$COLUMNS``), else :data:`LOG_COLUMNS`."""
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
