"""Ratio-of-medians statistics: bootstrap interval, Mann-Whitney direction, Benjamini-Hochberg, batching."""

from __future__ import annotations

import numpy as np
import pytest

from fp8bench.analysis.stats import benjamini_hochberg, bootstrap_ratio_ci, compare_batch, compare_samples


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
