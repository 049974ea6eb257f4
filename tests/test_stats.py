"""Ratio-of-medians statistics: bootstrap interval, Mann-Whitney direction, Benjamini-Hochberg, batching."""

from __future__ import annotations

import numpy as np
import pytest

from fp8bench.analysis.stats import (
    benjamini_hochberg,
    bootstrap_medians,
    bootstrap_ratio_ci,
    compare_batch,
    compare_samples,
)


def test_ratio_and_interval_cover_a_known_slowdown():
    rng = np.random.default_rng(0)
    base = rng.lognormal(0, 0.02, 30)
    cand = rng.lognormal(np.log(1.2), 0.02, 30)
    est = compare_samples(base, cand)
    assert est.ci_low < est.ratio < est.ci_high
    assert est.ci_low < 1.2 < est.ci_high
    assert est.p_slower < 1e-6 and est.p_faster > 0.99
    assert (est.n_base, est.n_cand) == (30, 30)


def test_direction_of_mann_whitney():
    est = compare_samples([1.0, 1.1, 1.2, 1.3, 1.4], [0.5, 0.6, 0.7, 0.8, 0.9])
    assert est.ratio < 1 and est.p_faster < 0.01 and est.p_slower > 0.99


def test_bootstrap_rejects_empty_side_and_is_deterministic():
    with pytest.raises(ValueError, match="at least one sample"):
        bootstrap_ratio_ci(np.array([]), np.array([1.0]))
    a, b = np.array([1.0, 1.1, 0.9, 1.05]), np.array([1.2, 1.3, 1.1])
    assert bootstrap_ratio_ci(a, b, seed=3) == bootstrap_ratio_ci(a, b, seed=3)


def test_batch_matches_single_case_statistics():
    rng = np.random.default_rng(1)
    base, cand = rng.lognormal(0, 0.03, (4, 10)), rng.lognormal(0.1, 0.03, (4, 12))
    for i, est in enumerate(compare_batch(base, cand)):
        one = compare_samples(base[i], cand[i])
        assert est.ratio == pytest.approx(one.ratio)
        assert est.p_slower == pytest.approx(one.p_slower) and est.p_faster == pytest.approx(one.p_faster)
        # Different resampling draws: the intervals agree to bootstrap precision, not bit for bit.
        assert est.ci_low == pytest.approx(one.ci_low, abs=0.01) and est.ci_high == pytest.approx(one.ci_high, abs=0.01)
    with pytest.raises(ValueError, match="must match"):
        compare_batch(base, cand[:2])


def test_benjamini_hochberg_known_values():
    # Hand-computed: sorted p = .01,.02,.03,.04,.05 with m = 5 -> p*m/rank = .05 each, monotone -> all .05.
    assert benjamini_hochberg([0.05, 0.01, 0.03, 0.02, 0.04]) == pytest.approx([0.05] * 5)
    # One strong and four null p-values: only the strong one stays small.
    adj = benjamini_hochberg([0.001, 0.5, 0.6, 0.7, 0.9])
    assert adj[0] == pytest.approx(0.005) and all(a >= 0.5 for a in adj[1:])
    assert benjamini_hochberg([]) == []


def _classic_bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The textbook bootstrap, the reference: draw n indices per resample, take their median."""
    index = rng.integers(0, values.size, size=(n_boot, values.size))
    return np.median(values[index], axis=1)


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_resampled_median_has_the_exact_bootstrap_distribution(n):
    """Every one of the n**n equally likely resamples enumerated: the drawn medians take each value with the
    probability the classic bootstrap gives it (odd and even counts)."""
    values = np.arange(1.0, n + 1) ** 2  # distinct, unevenly spaced: a wrong pair of order statistics shows
    grids = np.stack(np.meshgrid(*[np.arange(n)] * n, indexing="ij"), axis=-1).reshape(-1, n)
    exact_values, exact_counts = np.unique(np.median(values[grids], axis=1), return_counts=True)
    drawn = bootstrap_medians(values[None, :], 200_000, np.random.default_rng(0))[0]
    drawn_values, drawn_counts = np.unique(drawn, return_counts=True)
    assert set(drawn_values) <= set(exact_values)
    freq = dict(zip(drawn_values, drawn_counts / drawn.size, strict=True))
    for v, c in zip(exact_values, exact_counts / grids.shape[0], strict=True):
        assert freq.get(v, 0.0) == pytest.approx(c, abs=0.005), f"median {v}"


@pytest.mark.parametrize("n_base,n_cand", [(30, 30), (31, 28), (500, 500), (7, 1000)])
def test_interval_matches_the_classic_bootstrap(n_base, n_cand):
    """Same data, fixed seeds: the interval from drawn order statistics against the textbook resampling."""
    rng = np.random.default_rng(n_base + n_cand)
    base, cand = rng.lognormal(0, 0.05, n_base), rng.lognormal(0.03, 0.05, n_cand)
    ref = np.random.default_rng(11)
    ratios = _classic_bootstrap_medians(cand, 4000, ref) / _classic_bootstrap_medians(base, 4000, ref)
    lo_ref, hi_ref = np.quantile(ratios, [0.025, 0.975])
    lo, hi = bootstrap_ratio_ci(base, cand, n_boot=4000, seed=5)
    width = hi_ref - lo_ref
    assert lo == pytest.approx(lo_ref, abs=0.1 * width) and hi == pytest.approx(hi_ref, abs=0.1 * width)


def test_interval_properties():
    """Order statistics of the samples: rescaling a side rescales the interval exactly (same seed), the bounds lie
    between the extreme possible ratios, and a resampled median of an odd count is one of the samples."""
    rng = np.random.default_rng(2)
    base, cand = rng.lognormal(0, 0.1, 41), rng.lognormal(0.2, 0.1, 40)
    lo, hi = bootstrap_ratio_ci(base, cand, seed=4)
    lo3, hi3 = bootstrap_ratio_ci(base * 2.0, cand * 3.0, seed=4)
    assert lo3 == pytest.approx(1.5 * lo, rel=1e-12) and hi3 == pytest.approx(1.5 * hi, rel=1e-12)
    assert cand.min() / base.max() <= lo <= np.median(cand) / np.median(base) <= hi <= cand.max() / base.min()
    assert set(bootstrap_medians(base[None, :], 500, np.random.default_rng(0))[0]) <= set(base)


class _CountingGenerator:
    """A NumPy generator that counts the random values drawn from it."""

    def __init__(self, seed: int) -> None:
        self.rng, self.drawn = np.random.default_rng(seed), 0

    def __getattr__(self, name):
        method = getattr(self.rng, name)

        def counted(*args, **kwargs):
            out = method(*args, **kwargs)
            self.drawn += int(np.size(out))
            return out
        return counted


def test_bootstrap_draws_per_resample_do_not_grow_with_the_sample_count():
    """A 10,000-case gate of 500 samples a case spent its time drawing n indices per resample: the random values a
    bootstrap draws must depend on the cases and resamples only."""
    drawn = {}
    for n in (101, 10_001, 100, 10_000):
        rng = _CountingGenerator(0)
        bootstrap_medians(np.random.default_rng(1).normal(size=(3, n)), 200, rng)
        drawn[n] = rng.drawn
    assert drawn[10_001] == drawn[101] and drawn[10_000] == drawn[100], drawn
