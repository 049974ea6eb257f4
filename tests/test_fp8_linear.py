"""The FP8 linear layer: outputs and both gradients against an FP64 reference, per recipe, within tolerances
derived from the element format; native scaled GEMMs against the emulated ones; hybrid gradients; delayed-scaling
state across steps; the unscaled negative control."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fp8bench.core.formats import E5M2
from fp8bench.core.precisions import RunOptions, resolve_precision
from fp8bench.numerics.accuracy import compare
from fp8bench.numerics.fp8_linear import EMULATED, NATIVE, Fp8Linear, swap_linears
from tests.rounding_theory import rounding_sqnr_db

M, K, N = 256, 128, 128  # whole 128-blocks, so every recipe (blockwise included) takes the shape
# A GEMM's SQNR sits below one rounding's: two rounded operands add their noise (-3 dB) and per-group scales put
# group maxima below the format's max, wasting part of the range (a few dB more).
GEMM_MARGIN_DB = 8.0


def _problem(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen)
    w = torch.randn(N, K, generator=gen) / K**0.5
    dy = torch.randn(M, N, generator=gen) * 1e-3  # gradients are small: scaling must bring them into range
    return x, w, dy


def _run(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xin = x.to(torch.bfloat16).requires_grad_(True)
    y = layer(xin)
    y.backward(dy.to(y.dtype))
    return y.detach(), xin.grad.detach(), layer.weight.grad.detach()


def _reference(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # The layer sees x rounded to BF16 (its activation dtype); the reference starts from the same values.
    xd, wd, dyd = x.to(torch.bfloat16).double(), w.double(), dy.double()
    return xd @ wd.t(), dyd @ wd, dyd.t() @ xd


def _layer(precision: str, gemm=EMULATED, fmt: str = "e4m3", **kw) -> Fp8Linear:
    recipe = resolve_precision(precision, RunOptions(fp8_format=fmt))
    layer = Fp8Linear(K, N, recipe, gemm=gemm, **kw)
    return layer


@pytest.mark.parametrize("precision", ["fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8"])
def test_outputs_and_gradients_match_fp64_within_format_tolerance(precision):
    x, w, dy = _problem()
    layer = _layer(precision)
    with torch.no_grad():
        layer.weight.copy_(w)
    outs = _run(layer, x, dy)
    floor = rounding_sqnr_db(3) - GEMM_MARGIN_DB  # E4M3 operands everywhere
    for name, got, ref in zip(("y", "dx", "dw"), outs, _reference(x, w, dy), strict=True):
        num = compare(got, ref)
        assert num.finite, f"{precision} {name}: non-finite values"
        assert num.sqnr_db > floor, f"{precision} {name}: SQNR {num.sqnr_db:.1f} dB <= {floor:.1f} dB"
        # ...and FP8 really is in the path: a BF16 GEMM would be ~20 dB better.
        assert num.sqnr_db < rounding_sqnr_db(7) - 6, f"{precision} {name}: SQNR {num.sqnr_db:.1f} dB is BF16-like"
    assert layer.weight.grad.dtype == torch.float32  # wgrad lands in the FP32 master weight's gradient


def test_hybrid_quantizes_gradients_in_e5m2_and_loses_precision_there():
    x, w, dy = _problem(1)
    results = {}
    for fmt in ("e4m3", "hybrid"):
        layer = _layer("fp8_rowwise", fmt=fmt)
        with torch.no_grad():
            layer.weight.copy_(w)
        results[fmt] = [compare(g, r).sqnr_db for g, r in zip(_run(layer, x, dy), _reference(x, w, dy), strict=True)]
        if fmt == "hybrid":
            assert layer.operands.grad(dy).fmt is E5M2
            assert layer.operands.x(x).fmt.name == "e4m3"
    # Forward identical (E4M3 in both); both gradients lose about one mantissa bit (~6 dB) under E5M2.
    assert results["hybrid"][0] == pytest.approx(results["e4m3"][0], abs=1e-9)
    for i in (1, 2):
        assert results["e4m3"][i] - results["hybrid"][i] > 3.0
        assert results["hybrid"][i] > rounding_sqnr_db(2) - GEMM_MARGIN_DB


def test_native_rowwise_gemms_agree_with_emulated():
    x, w, dy = _problem(2)
    outs = {}
    for name, gemm in (("native", NATIVE), ("emulated", EMULATED)):
        layer = _layer("fp8_rowwise", gemm=gemm)
        with torch.no_grad():
            layer.weight.copy_(w)
        outs[name] = _run(layer, x, dy)
    for native, emulated in zip(outs["native"], outs["emulated"], strict=True):
        # Same FP8 operands and scales; only accumulation order and the output rounding (BF16) differ.
        assert compare(native, emulated.double()).sqnr_db > 45


def test_native_tensorwise_small_shape_agrees_with_emulated():
    # torch's CPU tensorwise _scaled_mm is slow (a reference loop), so this one stays tiny.
    gen = torch.Generator().manual_seed(3)
    x, w, dy = (torch.randn(32, 32, generator=gen), torch.randn(16, 32, generator=gen),
                torch.randn(32, 16, generator=gen))
    outs = []
    for gemm in (NATIVE, EMULATED):
        layer = Fp8Linear(32, 16, resolve_precision("fp8_tensorwise"), gemm=gemm)
        with torch.no_grad():
            layer.weight.copy_(w)
        outs.append(_run(layer, x, dy))
    for native, emulated in zip(*outs, strict=True):
        assert compare(native, emulated.double()).sqnr_db > 45


def test_delayed_scaling_keeps_its_history_across_steps():
    """A delayed scale comes from earlier steps' amaxes: after small inputs, a 16x larger input saturates, while
    current scaling adapts at once. The history lives in the layer, so it survives between calls."""
    x, w, dy = _problem(4)
    overflow = {}
    for precision in ("fp8_delayed", "fp8_tensorwise"):
        layer = _layer(precision)
        layer.sample_stats = True
        for _ in range(3):
            _run(layer, x, dy)
            layer.zero_grad()
        _run(layer, x * 16, dy)
        overflow[precision] = layer.stats["input"]["overflow_frac"]
    assert overflow["fp8_tensorwise"] == 0.0
    assert overflow["fp8_delayed"] > 0.5  # most values land above the stale scale's range and saturate


def test_unscaled_control_flushes_gradients_to_zero():
    x, w, dy = _problem(5)
    layer = _layer("fp8_tensorwise", disable_scaling=True)
    with torch.no_grad():
        layer.weight.copy_(w)
    layer.sample_stats = True
    _, dx, dw = _run(layer, x, dy * 1e-2)  # |g| ~ 1e-5, far under E4M3's smallest subnormal (2**-9)
    assert layer.stats["grad_output"]["underflow_frac"] > 0.99
    assert dx.abs().max().item() == 0.0 and dw.abs().max().item() == 0.0


def test_from_linear_shares_parameters_and_swap_leaves_other_modules():
    model = nn.Sequential(nn.Linear(K, N, bias=True), nn.ReLU(), nn.Sequential(nn.Linear(N, K, bias=False)))
    weights = [model[0].weight, model[0].bias, model[2][0].weight]
    recipe = resolve_precision("fp8_rowwise")
    swap_linears(model, lambda lin: Fp8Linear.from_linear(lin, recipe, gemm=EMULATED))
    assert isinstance(model[0], Fp8Linear) and isinstance(model[2][0], Fp8Linear) and isinstance(model[1], nn.ReLU)
    assert model[0].weight is weights[0] and model[0].bias is weights[1] and model[2][0].weight is weights[2]
    x = torch.randn(16, K)
    y = model(x)
    assert y.shape == (16, K) and math.isfinite(y.float().sum().item())


def test_autocast_input_is_quantized_from_the_autocast_dtype():
    layer = _layer("fp8_rowwise")
    x = torch.randn(4, 8, K)  # FP32, 3-D
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.shape == (4, 8, N) and y.dtype == torch.bfloat16


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8",
                                       "nvfp4", "mxfp4"])
def test_native_gemms_on_cuda_agree_with_emulated(precision):
    from fp8bench.core.devices import resolve_device
    from fp8bench.hardware.capabilities import capabilities_for

    device = resolve_device("cuda")
    # Stochastic rounding draws differ between the two layers: compare the deterministic 4-bit path.
    recipe = resolve_precision(precision, RunOptions(stochastic_rounding=False))
    why = capabilities_for(device).recipe_reason(recipe, backward=True)
    if why:
        pytest.skip(why)
    x, w, dy = (t.cuda() for t in _problem(6))
    outs = []
    for gemm in (NATIVE, EMULATED):
        layer = Fp8Linear(K, N, recipe, gemm=gemm, device="cuda")
        with torch.no_grad():
            layer.weight.copy_(w)
        outs.append(_run(layer, x, dy))
    for native, emulated in zip(*outs, strict=True):
        assert compare(native, emulated.double()).sqnr_db > 40


# --- 4-bit recipes ------------------------------------------------------------------------------------------------

def _fp4_layer(precision: str, w: torch.Tensor, **options) -> Fp8Linear:
    layer = Fp8Linear(K, N, resolve_precision(precision, RunOptions(fp8_format="e4m3", **options)), gemm=EMULATED)
    with torch.no_grad():
        layer.weight.copy_(w)
    return layer


@pytest.mark.parametrize("precision", ["nvfp4", "mxfp4"])
def test_four_bit_layers_match_fp64_within_e2m1_tolerance(precision):
    """E2M1 operands in all three GEMMs: about 20 dB per operand (fp8bench.numerics.predicted_sqnr), a GEMM a few dB
    below; far under any FP8 recipe (E4M3 GEMMs reach ~28 dB)."""
    x, w, dy = _problem(7)
    torch.manual_seed(0)
    layer = _fp4_layer(precision, w, stochastic_rounding=False, rht=False)
    for name, got, ref in zip(("y", "dx", "dw"), _run(layer, x, dy), _reference(x, w, dy), strict=True):
        num = compare(got, ref)
        assert num.finite
        assert rounding_sqnr_db(1) - GEMM_MARGIN_DB < num.sqnr_db < rounding_sqnr_db(3) - 6, (precision, name, num)
    assert layer.operands.x(x).fmt.name == layer.operands.grad(dy).fmt.name == "e2m1"


def test_stochastic_rounding_acts_on_gradients_only_and_is_unbiased():
    x, w, dy = _problem(8)
    torch.manual_seed(0)
    rtn, sr = (_fp4_layer("nvfp4", w, stochastic_rounding=on, rht=False) for on in (False, True))
    out_rtn, out_sr = _run(rtn, x, dy), _run(sr, x, dy)
    assert torch.equal(out_rtn[0], out_sr[0])  # the forward GEMM rounds to nearest either way
    assert not torch.equal(out_rtn[1], out_sr[1]) and not torch.equal(out_rtn[2], out_sr[2])
    # Averaged over draws, stochastically rounded gradients converge on the BF16 gradient; rounding to nearest
    # keeps its bias however often it is repeated.
    g = dy.to(torch.bfloat16)
    mean = torch.stack([sr.operands.grad(g).dequantize() for _ in range(64)]).mean(0)
    once = rtn.operands.grad(g).dequantize()
    assert compare(mean, g.double()).sqnr_db > compare(once, g.double()).sqnr_db + 8


def test_hadamard_transform_acts_on_the_wgrad_gemm_only_and_cancels():
    x, w, dy = _problem(9)
    torch.manual_seed(0)
    plain, rht = (_fp4_layer("mxfp4", w, stochastic_rounding=False, rht=on) for on in (False, True))
    assert plain.operands.hadamard_signs is None and rht.operands.hadamard_signs is not None
    out_plain, out_rht = _run(plain, x, dy), _run(rht, x, dy)
    assert torch.equal(out_plain[0], out_rht[0]) and torch.equal(out_plain[1], out_rht[1])
    assert not torch.equal(out_plain[2], out_rht[2])
    # Unquantized, the transformed operands give the same weight gradient.
    dy_t, x_t = rht.operands.wgrad_operands(dy.t().contiguous(), x.t().contiguous())
    assert torch.allclose(dy_t @ x_t.t(), dy.t() @ x, rtol=1e-4, atol=1e-6)
    assert compare(out_rht[2], _reference(x, w, dy)[2]).sqnr_db > rounding_sqnr_db(1) - GEMM_MARGIN_DB
