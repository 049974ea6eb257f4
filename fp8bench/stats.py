"""Statistics for comparing two sets of timing samples (used by the gate and the dashboard's Compare page).

* **Ratio of medians** ``median(candidate) / median(base)``: above 1 means the candidate is slower.
* **Bootstrap confidence interval** of that ratio: resample each side with replacement, recompute the ratio, take
  percentiles (``scipy.stats.bootstrap`` would need paired data of equal length; timing samples of two runs are
  independent and may differ in count, so the two-sample percentile bootstrap is done here with NumPy).
* **One-sided Mann-Whitney U**: is a candidate sample stochastically larger (slower) than a base sample? It makes
  no normality assumption, which matters for timing samples with long right tails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float  # median(candidate) / median(base)
    ci_low: float
    ci_high: float
    confidence: float
    p_slower: float  # one-sided Mann-Whitney U p-value for "candidate slower"
    p_faster: float  # one-sided p-value for "candidate faster"
    n_base: int
    n_cand: int


def bootstrap_ratio_ci(base: np.ndarray, cand: np.ndarray, confidence: float = 0.95, n_boot: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``median(cand) / median(base)`` from independent resamples of each side."""
    base, cand = np.asarray(base, float), np.asarray(cand, float)
    if base.size == 0 or cand.size == 0:
        raise ValueError("both sides need at least one sample")
    rng = np.random.default_rng(seed)
    b = np.median(rng.choice(base, size=(n_boot, base.size), replace=True), axis=1)
    c = np.median(rng.choice(cand, size=(n_boot, cand.size), replace=True), axis=1)
    ratios = c / b
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(ratios, [alpha, 1 - alpha])
    return float(lo), float(hi)


def compare_samples(base: list[float] | np.ndarray, cand: list[float] | np.ndarray, confidence: float = 0.95,
                    n_boot: int = 2000, seed: int = 0) -> RatioEstimate:
    """Ratio of medians, its bootstrap interval and one-sided Mann-Whitney p-values in both directions."""
    b, c = np.asarray(base, float), np.asarray(cand, float)
    lo, hi = bootstrap_ratio_ci(b, c, confidence, n_boot, seed)
    p_slower = float(sps.mannwhitneyu(c, b, alternative="greater").pvalue)
    p_faster = float(sps.mannwhitneyu(c, b, alternative="less").pvalue)
    return RatioEstimate(float(np.median(c) / np.median(b)), lo, hi, confidence, p_slower, p_faster, b.size, c.size)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in the input order."""
    return [float(p) for p in sps.false_discovery_control(np.asarray(p_values, float), method="bh")] \
        if p_values else []
