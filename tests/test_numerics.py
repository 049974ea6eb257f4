import math

import pytest
import torch

from fp8bench.numerics.accuracy import compare, worst


def test_exact_match_has_infinite_sqnr_stored_as_null():
    ref = torch.randn(10, 10, dtype=torch.float64)
    n = compare(ref.float(), ref.float().double())
    assert n.sqnr_db == math.inf and n.rel_err == 0.0 and n.max_abs_err == 0.0
    assert n.to_dict()["sqnr_db"] is None


def test_sqnr_of_known_noise():
    ref = torch.ones(1000, dtype=torch.float64)
    out = ref + 0.01  # noise power 1e-4 of signal power 1 -> 40 dB
    n = compare(out, ref)
    assert n.sqnr_db == pytest.approx(40.0)
    assert n.rel_err == pytest.approx(0.01)
    assert n.max_abs_err == pytest.approx(0.01)


def test_nonfinite_output_is_flagged():
    out = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    n = compare(out, torch.ones(4, dtype=torch.float64))
    assert not n.finite
    assert n.nonfinite_frac == pytest.approx(0.5)
    assert n.sqnr_db is None


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match=r"output shape \(2,\) != reference shape \(3,\)"):
        compare(torch.ones(2), torch.ones(3))


def test_worst_ignores_missing():
    assert worst(None, 0.1, 0.3) == 0.3
    assert worst(None, None) is None
