"""The figures of a record that fp8bench follows across runs and commits: the gate compares two sides on one of them
(:mod:`fp8bench.analysis.gate`), change detection follows them along a branch (:mod:`fp8bench.analysis.changes`).

Each is a stored record key with its unit and the direction that is better. Time, energy and rates are compared as
ratios (a step of 5 % is the same step at 1 ms and at 1 s) and, since they vary from run to run, with statistics;
SQNR is compared as a difference in dB and by value, since seeded inputs give the same SQNR on every run.

Imports nothing heavy, so that a verb's ``--help`` can name the metrics without loading pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fp8bench.core.records import Record


@dataclass(frozen=True)
class Metric:
    """A figure of a record that runs are compared on."""

    name: str  # the stored record key (fp8bench.core.records.STORED_KEYS), or sqnr_db for numerics.sqnr_db
    unit: str
    lower_is_better: bool
    ratio: bool  # compared as a ratio, with statistics (noisy); else as a difference in ``unit``, by value
    description: str

    def value(self, record: Record) -> float | None:
        """The record's value of this metric, or ``None`` when the record has none (or holds NaN)."""
        value = record.numerics.sqnr_db if self.name == "sqnr_db" else record.stored_value(self.name)
        if value is None:
            return None
        value = float(value)
        return None if math.isnan(value) else value


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("median_s", "s", True, True, "end-to-end time per call"),
    Metric("prequant_median_s", "s", True, True, "time per call of the pre-quantized phases"),
    Metric("energy_j", "J", True, True, "energy per end-to-end iteration"),
    Metric("tflops", "TFLOP/s", False, True, "end-to-end throughput"),
    Metric("sqnr_db", "dB", False, False, "SQNR against the FP64 reference"),
)}
