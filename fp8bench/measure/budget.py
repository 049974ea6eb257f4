"""A wall-clock budget for a whole run (``fp8bench run --wall-budget 6h``): the run fits its night or its CI job.

The cases run in priority order (:func:`prioritised`). Before each case the budget compares the time left with
what the remaining cases are expected to take (:mod:`fp8bench.measure.plan`), and takes the first step of
:data:`LEVELS` under which they fit, for this case:

1. ``full``: the run's own settings;
2. ``fewer_samples``: each timed function samples at most ``min_time_s`` (still ``min_samples`` samples at least);
3. ``short_energy``: energy windows at their minimum length, no per-phase windows;
4. ``no_phases``: only the end-to-end call is timed.

Where even the last level does not fit, cases are dropped from the end of the order: a case runs while it fits in
the time left, and one that does not is recorded ``skipped`` with the reason :data:`SKIP_REASON` and the figures,
never left out. Every shortened record says how in ``extra.suite_budget`` and in a note.

The estimates are corrected as the run goes: the remaining ones are scaled by how long the finished cases took
against their own estimates (:attr:`SuiteBudget.calibration`). Each case's own budget is cut to the time left, so
no case runs past the run's end. The budget aims :data:`RESERVE_SHARE` and :data:`RUN_END_S` under the given
time, which cover the run's own end (the final header, the process's exit) and a case that overruns its estimate; the
run header records the budget, what was shortened and skipped, and whether the budget was reached (``wall_budget``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fp8bench.core.cases import Case
from fp8bench.core.records import Record
from fp8bench.core.shapes import label
from fp8bench.measure.plan import CostModel, Plan, plan_run
from fp8bench.measure.settings import RunSettings

SKIP_REASON = "suite budget"
# Aim this share of the budget early, and RUN_END_S more: the run's end and an overrunning case fit in them.
RESERVE_SHARE = 0.04
# The run's end after its last case: the final header to the run file and the store, the summary, the process's
# exit (about 2 s measured on a loaded 2-core CPU: a 45 s budget's run ended 3.4 s past its aim without it).
RUN_END_S = 2.0
# The correction of the estimates by the cases already run stays within these factors (one freak case must not
# skip the rest of the run, nor let it overrun).
CALIBRATION_BOUNDS = (0.25, 4.0)
# A case given less than this many seconds of its own budget cannot take its minimum samples: skipped instead.
MIN_CASE_BUDGET_S = 0.05
# Seconds to write one record to the run file and the store, until the run has written one.
FIRST_WRITE_S = 0.01


def process_age_s() -> float:
    """Seconds since this process started (Linux: ``/proc/self/stat``; elsewhere 0), so that a budget counts the
    interpreter's start and torch's import, as an outer job timeout does."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        # starttime is the 22nd field of stat(5), the 20th after the command name, in clock ticks since boot
        return max(0.0, uptime_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class Level:
    """One step of shortening: its name, what it does (for records) and its settings from the previous step's."""

    name: str
    what: str
    apply: Callable[[RunSettings], RunSettings]


def _fewer_samples(s: RunSettings) -> RunSettings:
    policy = s.timing.policy
    return s.with_timing(policy=replace(policy, max_time_s=min(policy.max_time_s, policy.min_time_s)))


LEVELS: tuple[Level, ...] = (
    Level("full", "", lambda s: s),
    Level("fewer_samples", "sampling stopped at min_time_s", _fewer_samples),
    Level("short_energy", "energy windows at their minimum, none per phase",
          lambda s: s.with_energy(error_target=None, phases=False)),
    Level("no_phases", "phases not timed", lambda s: s.with_timing(phases=False)),
)


def level_settings(settings: RunSettings) -> list[RunSettings]:
    """The settings of each of :data:`LEVELS`, each step applied on top of the previous ones."""
    out = [settings]
    for level in LEVELS[1:]:
        out.append(level.apply(out[-1]))
    return out


_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds of a duration: ``90``, ``90s``, ``45m``, ``6h`` or ``1.5h``. Raises ``ValueError`` naming the value."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*", str(text))
    seconds = float(match.group(1)) * _SECONDS[match.group(2) or "s"] if match else 0.0
    if not match or not seconds > 0:
        raise ValueError(f"wall budget {text!r}: give a positive duration in seconds, minutes or hours, such as "
                         "90, 90s, 45m, 6h or 1.5h")
    return seconds


def prioritised(cases: Sequence[Case], priorities: Sequence[int], terms: Sequence[str]) -> list[int]:
    """The run order of ``cases``, as indices: by ``terms`` first (``field=value``; cases matching the first term,
    then the second, ...), then by ``priorities`` (each case's suite priority, higher first), then in suite order."""
    matchers = [_term(t) for t in terms]

    def rank(i: int) -> tuple[int, int, int]:
        first = next((n for n, m in enumerate(matchers) if m(cases[i])), len(matchers))
        return first, -priorities[i], i

    return sorted(range(len(cases)), key=rank)


_FIELDS: dict[str, Callable[[Case], str]] = {
    "workload": lambda c: c.workload, "shape": lambda c: label(c.shape), "precision": lambda c: c.precision.name,
    "backend": lambda c: c.backend}


def _term(term: str) -> Callable[[Case], bool]:
    name, sep, value = term.partition("=")
    if not sep or name not in _FIELDS or not value:
        raise ValueError(f"priority term {term!r}: give field=value with field one of {', '.join(_FIELDS)} "
                         "(precision=bf16, shape=4096x4096x4096)")
    read = _FIELDS[name]
    return lambda case: read(case) == value


@dataclass(frozen=True)
class Decision:
    """What the budget decides for one case: its settings and level, or the reason it is skipped."""

    settings: RunSettings | None
    level: int
    reason: str
    skip: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"level": "skipped" if self.skip else LEVELS[self.level].name,
                "shortened": [lv.what for lv in LEVELS[1:self.level + 1]] if not self.skip else [],
                "reason": self.reason}


@dataclass
class SuiteBudget:
    """The budget of one run over ``cases`` in run order (module docstring); ``estimates[i][level]`` in seconds."""

    budget_s: float
    settings: RunSettings
    estimates: list[list[float]]
    started: float = field(default_factory=time.monotonic)
    spent_estimated: float = 0.0
    spent_actual: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    planned_s: float = 0.0
    # Cases the runner refuses by its rules (backend, precision, shape, memory) in milliseconds: they always run, so
    # their records say why they cannot, not that the time ran out.
    refused: frozenset[int] = frozenset()
    written_s: float = 0.0  # seconds spent writing records to the run file and the store
    writes: int = 0

    def __post_init__(self) -> None:
        self.levels = level_settings(self.settings)
        # suffix[level][i]: the estimated seconds of cases i.. at that level
        self.suffix = []
        for level in range(len(LEVELS)):
            sums = [0.0] * (len(self.estimates) + 1)
            for i in range(len(self.estimates) - 1, -1, -1):
                sums[i] = sums[i + 1] + self.estimates[i][level]
            self.suffix.append(sums)

    @classmethod
    def for_cases(cls, budget_s: float, cases: Sequence[Case], settings: RunSettings, model: CostModel,
                  started: float | None = None) -> SuiteBudget:
        plans = [plan_run(cases, settings, model, [s] * len(cases)) for s in level_settings(settings)]
        estimates = [[p.estimates[i].seconds for p in plans] for i in range(len(cases))]
        refused = frozenset(i for i, e in enumerate(plans[0].estimates) if e.refused)
        out = cls(budget_s, settings, estimates, started if started is not None else time.monotonic(),
                  refused=refused)
        out.planned_s = plans[0].total_s
        return out

    @property
    def end(self) -> float:
        """The monotonic time the run aims to end by."""
        return self.started + self.budget_s * (1 - RESERVE_SHARE) - RUN_END_S

    @property
    def calibration(self) -> float:
        """Actual over estimated seconds of the cases run so far, within :data:`CALIBRATION_BOUNDS`."""
        if self.spent_estimated <= 0:
            return 1.0
        low, high = CALIBRATION_BOUNDS
        return min(high, max(low, self.spent_actual / self.spent_estimated))

    def decide(self, i: int, now: float | None = None) -> Decision:
        """The decision for the ``i``-th case of the run order, with ``now`` the monotonic time."""
        # Every record still to come is written, run or skipped: that time is kept aside first.
        write_s = self.written_s / self.writes if self.writes else FIRST_WRITE_S
        left = self.end - (time.monotonic() if now is None else now) - (len(self.estimates) - i) * write_s
        c = self.calibration
        if i in self.refused:
            return Decision(self.settings, 0, "")
        for level in range(len(LEVELS)):
            if c * self.suffix[level][i] <= left:
                return self._run(i, level, left, c)
        last = len(LEVELS) - 1
        need = c * self.estimates[i][last]
        if need <= left and left >= MIN_CASE_BUDGET_S:
            return self._run(i, last, left, c)
        return Decision(None, last, f"{SKIP_REASON}: this case is expected to take {need:.3g} s and "
                        f"{max(left, 0.0):.3g} s are left of the {self.budget_s:g} s wall budget", skip=True)

    def _run(self, i: int, level: int, left: float, c: float) -> Decision:
        settings = self.levels[level]
        reason = ""
        if level > 0:
            reason = (f"{SKIP_REASON}: the {len(self.estimates) - i} remaining case(s) are expected to take "
                      f"{c * self.suffix[0][i]:.3g} s at full settings and {left:.3g} s are left of the "
                      f"{self.budget_s:g} s wall budget")
        if settings.timing.budget_s > left:
            settings = settings.with_timing(budget_s=max(left, MIN_CASE_BUDGET_S))
            reason = reason or (f"{SKIP_REASON}: the case's own budget cut to the {settings.timing.budget_s:.3g} s "
                                f"left of the {self.budget_s:g} s wall budget")
        return Decision(settings, level, reason)

    def done(self, i: int, decision: Decision, wall_s: float) -> None:
        """Count case ``i``'s outcome under ``decision`` and its actual wall time, correcting the estimates."""
        name = decision.to_dict()["level"]
        self.counts[name] = self.counts.get(name, 0) + 1
        if not decision.skip:
            self.spent_estimated += self.estimates[i][decision.level]
            self.spent_actual += wall_s

    def written(self, seconds: float) -> None:
        """Count one record's write to the run file and the store (``seconds``)."""
        self.written_s += seconds
        self.writes += 1

    def annotate(self, record: Record, decision: Decision) -> Record:
        """``record`` with what the budget did to its case (nothing for a case run at full settings)."""
        if not decision.reason:
            return record
        what = decision.to_dict()
        note = f"{decision.reason}; shortened: {', '.join(what['shortened'])}" if what["shortened"] else None
        return replace(record, extra={**record.extra, "suite_budget": what},
                       notes=[*record.notes, *([note] if note else [])])

    def header(self, final: bool = False) -> dict[str, Any]:
        """The run header's ``wall_budget``: the budget, the full plan, and at the end what was shortened and
        skipped, the seconds spent and whether the budget was reached (a case shortened or skipped)."""
        out: dict[str, Any] = {"budget_s": self.budget_s, "planned_s": self.planned_s,
                               "aim_s": self.budget_s * (1 - RESERVE_SHARE) - RUN_END_S,
                               "levels": [lv.name for lv in LEVELS]}
        if final:
            shortened = sum(n for k, n in self.counts.items() if k not in ("full", "skipped"))
            out.update(spent_s=time.monotonic() - self.started, cases=dict(self.counts), shortened=shortened,
                       skipped=self.counts.get("skipped", 0),
                       reached=bool(shortened or self.counts.get("skipped", 0)),
                       calibration=self.calibration)
        return out


def budget_plan(budget: SuiteBudget, plan: Plan) -> list[dict[str, Any]]:
    """The decisions a budget would take if every case took its estimate: one row per case (``--plan``)."""
    rows = []
    now = budget.started + plan.fixed_s
    for i in range(len(plan.estimates)):
        decision = budget.decide(i, now)
        seconds = 0.0 if decision.skip else budget.estimates[i][decision.level]
        now += seconds
        rows.append({**decision.to_dict(), "expected_s": seconds})
    return rows
