"""Statistics for comparing two sets of timing samples (used by the gate and the dashboard's Compare page).

* **Ratio of medians** ``median(candidate) / median(base)``: above 1 means the candidate is slower.
* **Bootstrap confidence interval** of that ratio: resample each side with replacement, recompute the ratio, take
  percentiles (``scipy.stats.bootstrap`` would need paired data of equal length; timing samples of two runs are
  independent and may differ in count, so the two-sample percentile bootstrap is done here with NumPy).
* **One-sided Mann-Whitney U**: is a candidate sample stochastically larger (slower) than a base sample? It makes
  no normality assumption, which matters for timing samples with long right tails.

Memory: a bootstrap of ``B`` resamples of ``n`` samples touches ``B * n`` values. Drawn at once, 2000 resamples of
a 100,000-sample case are 1.6 GB of indices and as much again of gathered values; :func:`bootstrap_medians` draws
them in chunks of at most :data:`BOOTSTRAP_CHUNK_VALUES`, so memory stays bounded whatever the sample count while
the statistic is the same exact percentile bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

# Most sample values one resampling chunk gathers: 2**22 float64 values (32 MiB) plus as many int64 indices.
BOOTSTRAP_CHUNK_VALUES = 2**22


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


def bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator,
                      chunk_values: int = BOOTSTRAP_CHUNK_VALUES) -> np.ndarray:
    """Medians of ``n_boot`` resamples (with replacement) of each row of ``values`` (cases x n); returns
    cases x n_boot. Rows and resamples are drawn in blocks of at most ``chunk_values`` values (at least one
    resample of one row), so memory does not grow with ``n_boot`` or the number of cases."""
    cases, n = values.shape
    out = np.empty((cases, n_boot))
    rows_per_block = max(1, min(cases, chunk_values // max(n, 1)))
    for r0 in range(0, cases, rows_per_block):
        block = values[r0:r0 + rows_per_block]
        rows = np.arange(block.shape[0])[:, None, None]
        per_chunk = max(1, chunk_values // (block.shape[0] * n))
        for b0 in range(0, n_boot, per_chunk):
            b1 = min(n_boot, b0 + per_chunk)
            index = rng.integers(0, n, size=(block.shape[0], b1 - b0, n))
            out[r0:r0 + block.shape[0], b0:b1] = np.median(block[rows, index], axis=2)
    return out


def bootstrap_ratio_ci(base: np.ndarray, cand: np.ndarray, confidence: float = 0.95, n_boot: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``median(cand) / median(base)`` from independent resamples of each side."""
    base, cand = np.asarray(base, float), np.asarray(cand, float)
    if base.size == 0 or cand.size == 0:
        raise ValueError("both sides need at least one sample")
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(cand[None, :], n_boot, rng)[0] / bootstrap_medians(base[None, :], n_boot, rng)[0]
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


def compare_batch(base: np.ndarray, cand: np.ndarray, confidence: float = 0.95, n_boot: int = 2000,
                  seed: int = 0) -> list[RatioEstimate]:
    """:func:`compare_samples` for many cases at once: row ``i`` of ``base`` (cases x n_base) against row ``i`` of
    ``cand`` (cases x n_cand). Same statistics, vectorized: one resampling draw and one Mann-Whitney call per
    direction for the whole batch instead of per case (the gate's quality study runs millions of cases)."""
    b, c = np.atleast_2d(np.asarray(base, float)), np.atleast_2d(np.asarray(cand, float))
    if b.shape[0] != c.shape[0]:
        raise ValueError(f"base has {b.shape[0]} cases and cand {c.shape[0]}; they must match")
    if b.shape[1] == 0 or c.shape[1] == 0:
        raise ValueError("both sides need at least one sample")
    rng = np.random.default_rng(seed)
    base_medians = bootstrap_medians(b, n_boot, rng)
    ratios = bootstrap_medians(c, n_boot, rng) / base_medians
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(ratios, [alpha, 1 - alpha], axis=1)
    p_slower = np.atleast_1d(sps.mannwhitneyu(c, b, alternative="greater", axis=1).pvalue)
    p_faster = np.atleast_1d(sps.mannwhitneyu(c, b, alternative="less", axis=1).pvalue)
    ratio = np.median(c, axis=1) / np.median(b, axis=1)
    return [RatioEstimate(float(ratio[i]), float(lo[i]), float(hi[i]), confidence, float(p_slower[i]),
                          float(p_faster[i]), b.shape[1], c.shape[1]) for i in range(b.shape[0])]


def compare_paired(base: list[float] | np.ndarray, cand: list[float] | np.ndarray, confidence: float = 0.95,
                   n_boot: int = 2000, seed: int = 0) -> RatioEstimate:
    """Paired comparison of rounds: ``base[i]`` and ``cand[i]`` were measured back to back in round ``i``.

    The estimate is the median of the per-round ratios ``cand[i] / base[i]``, its interval a bootstrap over rounds,
    and the p-values come from the one-sided Wilcoxon signed-rank test on the log ratios (the paired counterpart of
    Mann-Whitney). Drift that both sides share within a round (a clock step, a neighbour on the host) cancels in
    the ratio instead of widening the interval.
    """
    b, c = np.asarray(base, float), np.asarray(cand, float)
    if b.shape != c.shape or b.size == 0:
        raise ValueError(f"paired samples need equal, non-zero lengths; got {b.size} and {c.size}")
    ratios = c / b
    boot = bootstrap_medians(ratios[None, :], n_boot, np.random.default_rng(seed))[0]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    logs = np.log(ratios)
    if not np.any(logs):  # identical rounds: no evidence either way
        p_slower = p_faster = 1.0
    else:
        p_slower = float(sps.wilcoxon(logs, alternative="greater").pvalue)
        p_faster = float(sps.wilcoxon(logs, alternative="less").pvalue)
    return RatioEstimate(float(np.median(ratios)), float(lo), float(hi), confidence, p_slower, p_faster, b.size,
                         c.size)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in the input order."""
    return [float(p) for p in sps.false_discovery_control(np.asarray(p_values, float), method="bh")] \
        if p_values else []
