"""What change detection follows and how strict it is: the metrics it can track along commits and its settings.

A tracked metric is a record column and the direction that is worse: time and energy are compared as ratios (a
step of 5% is the same step at 1 ms and at 1 s), SQNR as a difference in dB. The settings are the thresholds of the
two stages :mod:`fp8bench.analysis.changes` describes (the PELT penalty and segment length of the segmentation; the
size, p-value and interval of the filtering).

Kept apart from the detector, and importing nothing but the standard library, so that what only needs to name a
metric or state a default (``fp8bench changes --help``) does not load pandas, NumPy or SciPy.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8bench.core.metrics import METRICS, Metric

__all__ = ["DEFAULT_CONFIG", "DEFAULT_METRICS", "METRICS", "ChangeConfig", "Metric"]


DEFAULT_METRICS = ("median_s",)


@dataclass(frozen=True)
class ChangeConfig:
    """Detection settings (see :mod:`fp8bench.analysis.changes`)."""

    metrics: tuple[str, ...] = DEFAULT_METRICS
    threshold: float = 0.05  # smallest change kept: a fraction for log metrics
    threshold_db: float = 1.0  # smallest change kept for SQNR, dB
    alpha: float = 0.01  # Mann-Whitney p-value a kept change must be under
    min_size: int = 3  # fewest commits in a segment
    penalty: float = 3.0  # PELT penalty, in units of sigma^2 log(n)
    confidence: float = 0.95  # bootstrap interval of the ratio

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric {', '.join(unknown)}; accepted: {', '.join(METRICS)}")
        if self.min_size < 2:
            raise ValueError(f"min_size {self.min_size}: a segment needs at least 2 commits")
        if not 0 < self.threshold < 1 or self.threshold_db <= 0 or not 0 < self.alpha < 1 or self.penalty <= 0:
            raise ValueError(f"threshold {self.threshold} must be in (0, 1), threshold_db {self.threshold_db} and "
                             f"penalty {self.penalty} above 0, alpha {self.alpha} in (0, 1)")


DEFAULT_CONFIG = ChangeConfig()  # a 5% (or 1 dB) threshold, alpha 0.01, segments of 3 commits, a 95% interval
