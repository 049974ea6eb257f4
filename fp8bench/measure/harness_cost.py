"""The harness's own cost: the part of a case's wall time that is not spent inside a timed sample.

A case's wall time holds the measured time (the sum of its timed samples, end to end and per phase) and the
harness's work around it, split by the runner's step it was for (:class:`Step`, the steps the run plan models too,
:class:`fp8bench.measure.plan.Parts`):

``probe``
    timing a scaled-down shape to bound a big case's cost before running it (:mod:`fp8bench.measure.runner`);
``setup``
    the case's inputs and its pipeline's build (a compiled backend's compilation included);
``warmup``
    the untimed calls before the first sample;
``sampling``
    the sampling loop's own time beyond its samples: the timer, the stop rules, telemetry polling, graph capture;
``numerics``
    the fresh output compared with the FP64 reference (the reference itself computed once per shape), and the
    output check;
``energy``
    the energy windows (their calls repeat what was timed, but they are not timed samples);
``bookkeeping``
    everything else: refusal checks, the record's assembly, a profiled pass.

The record of each case carries this split (``Record.harness``); a run's header carries its sum over the run
(:func:`summarise`), with the seconds spent streaming records to the run file and the store, which happen after
each record is complete and so belong to no record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fp8bench.core.record_parts import HarnessCost
from fp8bench.core.records import Record


class Step(str, Enum):
    """The runner's steps for one case, in order (module docstring): what a record's harness split records (seconds
    of each step outside timed samples) and what the run plan models (seconds each step is expected to take)."""

    PROBE = "probe"
    SETUP = "setup"
    WARMUP = "warmup"
    SAMPLING = "sampling"
    NUMERICS = "numerics"
    ENERGY = "energy"
    BOOKKEEPING = "bookkeeping"


# The steps the clock times; book-keeping is what is left of the wall time.
PARTS = tuple(step.value for step in Step if step is not Step.BOOKKEEPING)
# The harness's share of a case's wall time the project aims under, for calls of 10 ms or more on a 2-core CPU.
TARGET_SHARE = 0.10
LONG_CALL_S = 0.010


@dataclass
class CostClock:
    """Seconds spent in each part of :data:`PARTS` while one case is measured."""

    spent: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def part(self, step: Step | str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``step`` (one of :data:`PARTS`)."""
        name = step.value if isinstance(step, Step) else step
        if name not in PARTS:
            raise ValueError(f"harness part {name!r}; accepted: {', '.join(PARTS)}")
        start = time.monotonic()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + time.monotonic() - start

    def record(self, wall_s: float, measured_s: float) -> HarnessCost:
        """The ``Record.harness`` of a case that took ``wall_s`` with ``measured_s`` inside timed samples.

        The sampling part's wall time holds the samples themselves: they are taken out of it here."""
        split = {name: self.spent.get(name, 0.0) for name in PARTS}
        split["sampling"] = max(0.0, split["sampling"] - measured_s)
        split[Step.BOOKKEEPING.value] = max(0.0, wall_s - measured_s - sum(split.values()))
        harness_s = max(0.0, wall_s - measured_s)
        return HarnessCost.from_json({"wall_s": wall_s, "measured_s": measured_s, "harness_s": harness_s,
                                      "share": harness_s / wall_s if wall_s > 0 else None, "split_s": split})


def summarise(records: Sequence[Record], stream_s: float) -> dict[str, Any]:
    """The harness's cost over a run's records (their ``harness`` fields; records without one are left out), with
    ``stream_s``, the seconds spent writing records to the run file and store. ``long_calls`` is the same over the
    cases whose end-to-end median is :data:`LONG_CALL_S` or more, with the worst case's share."""
    costs = [r for r in records if r.harness]
    long = [r for r in costs if (r.samples.median_s or 0.0) >= LONG_CALL_S]
    out = _totals([r.harness for r in costs])
    out["stream_s"] = stream_s
    out["long_calls"] = {**_totals([r.harness for r in long]),
                         "worst_share": max((r.harness.share or 0.0 for r in long), default=None),
                         "target_share": TARGET_SHARE}
    return out


def _totals(costs: list[HarnessCost]) -> dict[str, Any]:
    wall = sum(c.wall_s or 0.0 for c in costs)
    harness = sum(c.harness_s or 0.0 for c in costs)
    split = {step.value: sum((c.split_s or {}).get(step.value, 0.0) for c in costs) for step in Step}
    return {"cases": len(costs), "wall_s": wall, "measured_s": sum(c.measured_s or 0.0 for c in costs),
            "harness_s": harness, "share": harness / wall if wall > 0 else None, "split_s": split}
