"""Statistics for comparing two sets of timing samples (used by the gate and the dashboard's Compare page).

* **Ratio of medians** ``median(candidate) / median(base)``: above 1 means the candidate is slower.
* **Bootstrap confidence interval** of that ratio: resample each side with replacement, recompute the ratio, take
  percentiles (``scipy.stats.bootstrap`` would need paired data of equal length; timing samples of two runs are
  independent and may differ in count, so the two-sample percentile bootstrap is done here with NumPy).
* **One-sided Mann-Whitney U**: is a candidate sample stochastically larger (slower) than a base sample? It makes
  no normality assumption, which matters for timing samples with long right tails.

Cost: a resample's median is one order statistic of the sorted samples (two, averaged, for an even count), so
:func:`bootstrap_medians` draws that order statistic's index directly instead of drawing ``n`` indices and taking
their median. With ``n`` samples and ``k = (n + 1) // 2``, the ``k``-th smallest of a resample is at or below the
``j``-th smallest sample exactly when at least ``k`` of the ``n`` draws land in the first ``j`` positions, a
Binomial(``n``, ``j / n``) count; inverting that distribution with one uniform draw gives the index. For an even
count the ``k + 1``-th order statistic is the same position when that position was drawn more than the ``k``-th
needed, otherwise the first drawn position after it, whose distance has a closed form. The resamples are
distributed exactly as the classic bootstrap's; a case of ``n`` samples costs one sort and O(log n) per resample
instead of O(n) per resample (a 10,000-case gate of 500 samples a case spent most of its time drawing indices).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

# Most values one block of cases holds at once (sorted samples plus resampled indices): 2**22, 32 MiB of float64.
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
    cases x n_boot. Each median is drawn as an order statistic of the sorted row (see the module docstring), so
    the cost per resample does not grow with ``n``; rows are taken in blocks of at most ``chunk_values`` values."""
    cases, n = values.shape
    if n == 0:
        raise ValueError("both sides need at least one sample")
    out = np.empty((cases, n_boot))
    table = _median_index_table(n)
    rows_per_block = max(1, min(cases, chunk_values // (n + 4 * n_boot)))
    for r0 in range(0, cases, rows_per_block):
        block = np.sort(values[r0:r0 + rows_per_block], axis=1)
        low, high = _resampled_median_positions(table, n, (block.shape[0], n_boot), rng)
        out[r0:r0 + block.shape[0]] = 0.5 * (np.take_along_axis(block, low, axis=1)
                                             + np.take_along_axis(block, high, axis=1))
    return out


@dataclass(frozen=True)
class _MedianIndexTable:
    """For samples counted ``n``: ``cdf[j]``, the probability that a resample's ``k``-th order statistic
    (``k = (n + 1) // 2``) is at or below sorted position ``j`` (1-based, ``cdf[0] = 0``), and for an even ``n``
    ``exact_k[j]``, the probability that exactly ``k`` draws landed at or below ``j`` given that statistic is at
    ``j`` (then the ``k + 1``-th is further right)."""

    cdf: np.ndarray
    exact_k: np.ndarray | None


@functools.lru_cache(maxsize=64)
def _median_index_table(n: int) -> _MedianIndexTable:
    k = (n + 1) // 2
    j = np.arange(n + 1)
    cdf = sps.binom.sf(k - 1, n, j / n)
    cdf[0], cdf[-1] = 0.0, 1.0
    if n % 2:
        return _MedianIndexTable(cdf, None)
    at_j = np.diff(cdf)  # P(k-th order statistic at position j), j = 1..n
    jj = j[1:]
    # P(C_j = k and C_(j-1) < k): given C_j = k, each of those k draws is below j with probability (j-1)/j.
    both = sps.binom.pmf(k, n, jj / n) * (1.0 - ((jj - 1) / jj) ** k)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.where(at_j > 0, np.clip(both / at_j, 0.0, 1.0), 0.0)
    return _MedianIndexTable(cdf, np.concatenate([[0.0], exact]))


def _resampled_median_positions(table: _MedianIndexTable, n: int, shape: tuple[int, int],
                                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """0-based sorted positions of the two middle order statistics of ``shape`` resamples of ``n`` values (the
    same position twice for an odd ``n``)."""
    low = np.searchsorted(table.cdf, rng.random(shape), side="right")  # 1-based, in 1..n
    if table.exact_k is None:
        return low - 1, low - 1
    k = (n + 1) // 2
    moves = rng.random(shape) < table.exact_k[low]
    # The remaining n - k draws fall uniformly right of low; the first of them is t places right with
    # P(distance > t) = (1 - t / (n - low)) ** (n - k), inverted with one uniform draw.
    room = n - low
    step = np.ceil(room * (1.0 - (1.0 - rng.random(shape)) ** (1.0 / (n - k))))
    high = low + np.where(moves, np.clip(step, 1, np.maximum(room, 1)), 0).astype(low.dtype)
    return low - 1, high - 1


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
