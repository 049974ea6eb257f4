"""The SQNR prediction against what the shared quantizers and GEMM backends measure, and its physics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

import fp8bench.numerics.predicted_sqnr as P
from fp8bench.core.devices import Device
from fp8bench.core.formats import E2M1, E4M3, E5M2, FP8_FORMATS
from fp8bench.core.pipeline import BuildContext, Unsupported
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS, Fp4Recipe, RunOptions, ScaledRecipe, resolve_precision
from fp8bench.numerics.accuracy import compare
from fp8bench.numerics.quantize import (
    quantize_blockwise,
    quantize_mx,
    quantize_nvfp4,
    quantize_rowwise,
    quantize_tensorwise,
)

# Measured SQNRs are one draw of a random tensor. With a million elements their spread is a few hundredths of a dB
# (largest seen: 0.035 dB, MX with 32-element groups); a modelling error of one mantissa bit would be 6 dB.
TOLERANCE_DB = 0.1

ROWS, COLS = 512, 2048


def predict_sqnr_db(dist: P.Distribution, fmt: P.ElementFormat, grouping: P.Grouping) -> float:
    """Predicted SQNR (dB) of quantizing values drawn from ``dist`` to ``fmt`` under ``grouping``."""
    return P.nsr_to_db(P.group_nsr(dist, fmt, grouping))


def _groupings(rows: int, cols: int) -> dict[str, tuple[P.Grouping, object]]:
    """Each granularity's scale groups, with the shared quantizer that implements it."""
    return {
        "tensorwise": (P.Grouping(rows * cols, P.CurrentScale()), quantize_tensorwise),
        "rowwise": (P.Grouping(cols, P.CurrentScale()), quantize_rowwise),
        "blockwise_1x128": (P.Grouping(128, P.CurrentScale()), lambda x, f: quantize_blockwise(x, f, (1, 128))),
        "blockwise_128x128": (P.Grouping(128 * 128, P.CurrentScale()),
                              lambda x, f: quantize_blockwise(x, f, (128, 128))),
        "mx": (P.Grouping(32, P.PowerOfTwoScale()), quantize_mx),
    }


@pytest.mark.parametrize("sigma", [1.0, 1 / math.sqrt(2048)])  # the second is not a power of two: MX sees it
@pytest.mark.parametrize("fmt_name", sorted(FP8_FORMATS))
def test_prediction_matches_the_shared_quantizers(fmt_name, sigma):
    fmt = FP8_FORMATS[fmt_name]
    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(7)) * sigma
    for granularity, (grouping, quantize) in _groupings(ROWS, COLS).items():
        measured = compare(quantize(x, fmt).dequantize(), x).sqnr_db
        predicted = predict_sqnr_db(P.Normal(sigma), fmt, grouping)
        assert predicted == pytest.approx(measured, abs=TOLERANCE_DB), (granularity, predicted, measured)


@pytest.mark.parametrize("sigma", [1.0, 1 / math.sqrt(2048)])
def test_e2m1_prediction_matches_the_shared_quantizers(sigma):
    """NVFP4 (E4M3-rounded block scales under a tensor scale) and MXFP4 (power-of-two scales) with E2M1 elements."""
    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(7)) * sigma
    dist = P.Normal(sigma)
    nv = P.Grouping(16, P.NvFp4Scale(P.median_amax(dist, x.numel())))
    cases = {"nvfp4": (nv, quantize_nvfp4(x)), "mxfp4": (P.Grouping(32, P.PowerOfTwoScale()), quantize_mx(x, E2M1))}
    for name, (grouping, q) in cases.items():
        measured = compare(q.dequantize(), x).sqnr_db
        predicted = predict_sqnr_db(dist, E2M1, grouping)
        assert predicted == pytest.approx(measured, abs=TOLERANCE_DB), (name, predicted, measured)


def test_e2m1_physics():
    """One mantissa bit: about 20 dB per 16-value block, and the E4M3 rounding of NVFP4's scales is visible."""
    dist = P.Normal(1.0)
    ideal = predict_sqnr_db(dist, E2M1, P.Grouping(16, P.CurrentScale()))
    nv = predict_sqnr_db(dist, E2M1, P.Grouping(16, P.NvFp4Scale(P.median_amax(dist, 1 << 20))))
    mx = predict_sqnr_db(dist, E2M1, P.Grouping(32, P.PowerOfTwoScale()))
    assert 18 < mx < nv < ideal < 22
    assert 0.02 < ideal - nv < 0.5  # the scale's own 3-bit rounding costs a little, not a mantissa bit (6 dB)
    np.testing.assert_array_equal(P.grid(E2M1), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
    assert P.emax_of(E2M1) == E2M1.mx_emax == 2
    # Every E4M3 cell edge in range is a breakpoint of the block scale.
    rule = P.NvFp4Scale(6 * 448.0)  # tensor scale 1: block amax a maps to a / 6
    assert rule(np.asarray([6 * 17.0]), E2M1)[0] == 16.0 and rule(np.asarray([6 * 17.1]), E2M1)[0] == 18.0
    assert 6 * 17.0 in rule.breakpoints(6 * 16.5, 6 * 19.0)
    with pytest.raises(ValueError, match="positive tensor amax"):
        P.NvFp4Scale(0.0)


GEMM_SHAPE = {"m": 256, "n": 384, "k": 2048}


@pytest.fixture(scope="module")
def gemm_inputs():
    load_all()
    workload = WORKLOADS.get("gemm")
    inputs = workload.make_inputs(GEMM_SHAPE, Device("cpu"), seed=0)
    return inputs, workload.reference(inputs)


@pytest.mark.parametrize("fp8_format", ["e4m3", "e5m2"])
@pytest.mark.parametrize("recipe", [p for p, r in PRECISIONS.items() if isinstance(r, ScaledRecipe)])
def test_gemm_prediction_matches_the_backends(gemm_inputs, recipe, fp8_format):
    """Through the emulated backend always, and the torch backend's real CPU kernels where they run."""
    inputs, reference = gemm_inputs
    if isinstance(PRECISIONS.get(recipe), Fp4Recipe) and fp8_format != "e4m3":
        pytest.skip("4-bit recipes have E2M1 elements: no FP8 format to choose")
    precision = resolve_precision(recipe, RunOptions(fp8_format=fp8_format))
    assert isinstance(precision, ScaledRecipe)
    predicted = P.predict_gemm_sqnr(precision, GEMM_SHAPE).sqnr_db
    measured_by = {}
    for backend in ("emulated", "torch"):
        try:
            pipeline = BACKENDS.get(backend).build(BuildContext("gemm", GEMM_SHAPE, precision, Device("cpu"), inputs))
        except Unsupported:
            continue  # torch's CPU kernels refuse block scales
        measured_by[backend] = compare(pipeline.output(), reference).sqnr_db
    assert "emulated" in measured_by
    for backend, measured in measured_by.items():
        assert predicted == pytest.approx(measured, abs=TOLERANCE_DB), (backend, predicted, measured)


def test_gemm_prediction_parts_add_as_noise_powers():
    recipe = resolve_precision("fp8_rowwise", RunOptions(fp8_format="e4m3"))
    assert isinstance(recipe, ScaledRecipe)
    pred = P.predict_gemm_sqnr(recipe, GEMM_SHAPE)
    nsr = [10 ** (-db / 10) for db in (pred.lhs_db, pred.rhs_db)]
    total = P.combine_product_nsr(*nsr) + 10 ** (-pred.output_db / 10)
    assert pred.sqnr_db == pytest.approx(P.nsr_to_db(total), abs=1e-9)
    # Two operands with about equal noise: the GEMM is about 3 dB below either one.
    assert pred.lhs_db - pred.sqnr_db == pytest.approx(3.0, abs=0.2)
    bare = P.predict_gemm_sqnr(recipe, GEMM_SHAPE, activation=None, output=None)
    assert bare.output_db == math.inf and bare.sqnr_db > pred.sqnr_db


def test_the_grid_is_every_value_torch_can_represent():
    for fmt in FP8_FORMATS.values():
        every = torch.arange(256, dtype=torch.uint8).view(fmt.dtype).float()
        values = np.unique(every[torch.isfinite(every) & (every >= 0)].numpy().astype(float))
        np.testing.assert_array_equal(P.grid(fmt), values, err_msg=fmt.name)
        assert P.emax_of(fmt) == fmt.mx_emax


def test_formats_read_from_torch_dtypes_have_torchs_grid():
    for dtype in (torch.bfloat16, torch.float16):
        every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).float()
        values = np.unique(every[torch.isfinite(every) & (every >= 0)].numpy().astype(float))
        np.testing.assert_array_equal(P.grid(P.format_of_dtype(dtype)), values, err_msg=str(dtype))


def test_one_mantissa_bit_is_worth_six_db():
    """A format with E4M3's range and one more mantissa bit: a table entry the code has never seen."""
    e4m4 = P.FloatFormat("e4m4", 4, E4M3.max, E4M3.min_normal, E4M3.min_subnormal / 2)
    grouping = P.Grouping(1 << 20, P.CurrentScale())
    gain = predict_sqnr_db(P.Normal(1.0), e4m4, grouping) - predict_sqnr_db(P.Normal(1.0), E4M3, grouping)
    assert gain == pytest.approx(20 * math.log10(2), abs=0.1)


def test_wide_formats_use_the_binade_model_and_it_agrees(monkeypatch):
    exact = P.cast_nsr(P.Normal(1.0), P.BF16)
    monkeypatch.setattr(P, "MAX_EXACT_CELLS", 0)
    assert P.cast_nsr(P.Normal(1.0), P.BF16) == pytest.approx(exact, rel=1e-3)
    # E5M2's coarse steps are where the uniform-error model is worst; still within 0.1 dB of the exact sum.
    g = P.Grouping(4096, P.CurrentScale())
    binade_db = predict_sqnr_db(P.Normal(1.0), E5M2, g)
    monkeypatch.undo()
    assert binade_db == pytest.approx(predict_sqnr_db(P.Normal(1.0), E5M2, g), abs=0.1)


def test_bf16_cast_matches_torch():
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(3))
    measured = compare(x.to(torch.bfloat16), x).sqnr_db
    assert P.nsr_to_db(P.cast_nsr(P.Normal(1.0), P.BF16)) == pytest.approx(measured, abs=TOLERANCE_DB)


def test_amax_quadrature_has_converged(monkeypatch):
    cases = [(P.Normal(s), f, P.Grouping(n, r)) for s in (1.0, 3.0) for f in (E4M3, E5M2)
             for n, r in ((32, P.PowerOfTwoScale()), (128, P.CurrentScale()), (1 << 22, P.CurrentScale()))]
    default = [predict_sqnr_db(*c) for c in cases]
    monkeypatch.setattr(P, "AMAX_QUANTILES", 16384)
    fine = [predict_sqnr_db(*c) for c in cases]
    np.testing.assert_allclose(default, fine, atol=0.005)


def test_normal_partial_moments_against_quadrature():
    d = P.Normal(0.7)
    for lo, hi in ((0.0, 0.1), (0.3, 1.1), (2.0, np.inf), (0.0, np.inf)):
        m0, m1, m2 = d.abs_partial_moments(np.asarray(lo), np.asarray(hi))
        for k, got in enumerate((m0, m1, m2)):
            def density(x, k=k):
                return x**k * math.exp(-x * x / (2 * 0.49)) / (0.7 * math.sqrt(2 * math.pi))

            want = 2 * integrate.quad(density, lo, hi)[0]
            assert float(got) == pytest.approx(want, rel=1e-7, abs=1e-15), (lo, hi, k)
    assert float(d.abs_sf(d.abs_isf(np.asarray(1e-15)))) == pytest.approx(1e-15, rel=1e-6)


def test_gemm_input_distributions_describe_the_workload(gemm_inputs):
    inputs, _ = gemm_inputs
    dist_a, dist_b = P.gemm_input_distributions(GEMM_SHAPE)
    assert inputs["a"].std().item() == pytest.approx(dist_a.sigma, rel=0.01)
    assert inputs["b"].std().item() == pytest.approx(dist_b.sigma, rel=0.01)


def test_operand_grouping_follows_the_recipe():
    def rec(name: str) -> ScaledRecipe:
        r = PRECISIONS.get(name)
        assert isinstance(r, ScaledRecipe)
        return r

    assert P.operand_grouping(rec("fp8_tensorwise"), "lhs", 64, 256).size == 64 * 256
    assert P.operand_grouping(rec("fp8_rowwise"), "rhs", 64, 256).size == 256
    assert P.operand_grouping(rec("fp8_blockwise"), "lhs", 256, 256).size == 128
    assert P.operand_grouping(rec("fp8_blockwise"), "rhs", 256, 256).size == 128 * 128
    mx = P.operand_grouping(rec("mxfp8"), "lhs", 64, 256)
    assert mx.size == 32 and isinstance(mx.rule, P.PowerOfTwoScale)
    nv = P.operand_grouping(rec("nvfp4"), "lhs", 64, 256, P.Normal(1.0))
    assert nv.size == 16 and nv.rule == P.NvFp4Scale(P.median_amax(P.Normal(1.0), 64 * 256))
    with pytest.raises(ValueError, match="distribution"):
        P.operand_grouping(rec("nvfp4"), "lhs", 64, 256)
    assert P.operand_grouping(rec("mxfp4"), "rhs", 64, 256).size == 32
    delayed = rec("fp8_delayed").with_options(margin=2)
    assert P.operand_grouping(delayed, "lhs", 8, 8).rule == P.CurrentScale(margin=2)
    with pytest.raises(ValueError, match="role"):
        P.operand_grouping(rec("fp8_rowwise"), "out", 8, 8)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="sigma"):
        P.Normal(0.0)
    with pytest.raises(ValueError, match="at least one"):
        P.Grouping(0, P.CurrentScale())
