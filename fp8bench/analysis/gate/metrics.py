"""What the gate compares: a case's time, its energy or its accuracy, and which direction is a regression.

* ``median_s`` (the default): end-to-end seconds per call. Lower is better. Samples are the raw samples of one run
  or the per-round medians of interleaved rounds, compared statistically (ratio of medians, bootstrap interval,
  Mann-Whitney U or Wilcoxon signed-rank; :mod:`fp8bench.analysis.gate.decision`). A regression is ``slower``.
* ``energy_j``: joules per end-to-end iteration. Lower is better. A run holds one energy window per case, so the
  samples are per-round values: gating energy needs interleaved rounds (``fp8bench ab``); one run per side gives
  ``inconclusive`` (too few samples). Same statistics as time; a regression is ``worse``.
* ``sqnr_db``: accuracy against the FP64 reference, in dB. Higher is better. The inputs are seeded, so SQNR does
  not vary from round to round and there is nothing to test statistically: each side's value is the median over
  its rounds, and the candidate is ``worse`` when it is under its floor (``--sqnr-floor PRECISION=DB``, an
  absolute requirement per precision) or lost more than ``--sqnr-tolerance`` dB against the base (default
  :data:`DEFAULT_SQNR_TOLERANCE_DB`), ``better`` when it gained more than that, else ``same``.
"""

from __future__ import annotations

import fnmatch
import math

from fp8bench.core.metrics import METRICS as ALL_METRICS
from fp8bench.core.metrics import Metric
from fp8bench.core.records import Record

# Roughly 6.02 dB per mantissa bit: 1 dB is a sixth of a bit. Reordering a reduction moves SQNR by hundredths of a
# dB; losing a bit of precision anywhere in a recipe moves it by several dB.
DEFAULT_SQNR_TOLERANCE_DB = 1.0


# The metrics the gate compares on (fp8bench.core.metrics says each one's unit and direction).
METRICS: dict[str, Metric] = {name: ALL_METRICS[name] for name in ("median_s", "energy_j", "sqnr_db")}


def metric_value(record: Record, metric: str) -> float | None:
    """The record's value of ``metric`` (one number per record), or ``None`` when the record has none."""
    return METRICS[metric].value(record)


def parse_sqnr_floor(text: str) -> tuple[str, float]:
    """``PRECISION=DB`` (the precision an fnmatch pattern: ``fp8_*=20``) -> ``(pattern, dB)``."""
    pattern, sep, value = text.rpartition("=")
    if not sep or not pattern:
        raise ValueError(f"SQNR floor {text!r} must look like PRECISION=DB, e.g. 'fp8_*=20' or 'bf16=35'")
    try:
        return pattern, float(value.strip().removesuffix("dB").strip())
    except ValueError:
        raise ValueError(f"SQNR floor {text!r}: {value!r} is not a number of dB") from None


def floor_for(precision: str | None, floors: tuple[tuple[str, float], ...]) -> tuple[float, str] | None:
    """The floor (dB) that applies to ``precision`` and its pattern; the last matching floor wins."""
    found = None
    for pattern, db in floors:
        if precision is not None and fnmatch.fnmatchcase(precision, pattern):
            found = (db, pattern)
    return found


def sqnr_verdict(base_db: float, cand_db: float, tolerance_db: float,
                 floor: tuple[float, str] | None) -> tuple[str, str]:
    """``worse``, ``better`` or ``same`` for a candidate SQNR against the base's, with the reason."""
    if floor is not None and cand_db < floor[0]:
        return "worse", f"SQNR {cand_db:.2f} dB is under the {floor[0]:g} dB floor for {floor[1]}"
    # Both infinite means both exact: nothing was lost (inf - inf would be NaN).
    delta = cand_db - base_db if math.isfinite(cand_db) or math.isfinite(base_db) else 0.0
    change = f"SQNR {base_db:.2f} -> {cand_db:.2f} dB ({delta:+.2f} dB)"
    if delta < -tolerance_db:
        return "worse", f"{change}: lost more than {tolerance_db:g} dB"
    if delta > tolerance_db:
        return "better", f"{change}: gained more than {tolerance_db:g} dB"
    return "same", f"{change}: within {tolerance_db:g} dB"
