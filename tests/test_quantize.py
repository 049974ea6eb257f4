import pytest
import torch

from fp8bench.formats import E4M3, E5M2
from fp8bench.quantize import (
    AmaxHistory,
    cast_stats,
    quantize_blockwise,
    quantize_delayed,
    quantize_mx,
    quantize_rowwise,
    quantize_tensorwise,
    quantizer_for,
)
from fp8bench.recipes import PRECISIONS


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_tensorwise_maps_amax_onto_format_max():
    x = randn(64, 128)
    q = quantize_tensorwise(x, E4M3)
    assert q.scale.dim() == 0
    assert q.scale.item() == pytest.approx(x.abs().max().item() / 448.0)
    assert q.data.float().abs().max().item() == 448.0
    # Relative error of E4M3 rounding is at most 2**-4 for normal values.
    deq = q.dequantize()
    big = x.abs() > 448 * q.scale * 2**-6
    assert ((deq - x).abs()[big] / x.abs()[big]).max() <= 2**-4 + 1e-6


def test_rowwise_gives_each_row_its_own_scale():
    x = randn(8, 64)
    x[3] *= 1000  # one loud row must not cost the others resolution
    q = quantize_rowwise(x, E4M3)
    assert q.scale.shape == (8, 1)
    assert torch.allclose(q.scale.squeeze(1), x.abs().amax(dim=1) / 448.0)
    assert q.data.float().abs().amax(dim=1).eq(448.0).all()


def test_blockwise_tiles_and_refuses_partial_blocks():
    x = randn(256, 256)
    q = quantize_blockwise(x, E4M3, (128, 128))
    assert q.scale.shape == (2, 2)
    assert q.scale[1, 0].item() == pytest.approx(x[128:, :128].abs().max().item() / 448.0)
    act = quantize_blockwise(x, E4M3, (1, 128))
    assert act.scale.shape == (256, 2)
    assert (act.dequantize() - x).abs().max() < x.abs().max() * 2**-4
    with pytest.raises(ValueError, match="does not split into 128x128 blocks"):
        quantize_blockwise(randn(100, 256), E4M3, (128, 128))


def test_mx_scales_are_powers_of_two_per_32_elements():
    x = randn(4, 96)
    q = quantize_mx(x, E4M3)
    assert q.scale.shape == (4, 3)
    log2 = torch.log2(q.scale)
    assert torch.equal(log2, torch.round(log2))
    # floor(log2(amax)) - emax, with emax = 8 for E4M3 (OCP MX).
    amax = x[:, :32].abs().amax(dim=1)
    assert torch.equal(q.scale[:, 0], torch.exp2(torch.floor(torch.log2(amax)) - 8))
    assert torch.isfinite(q.dequantize()).all()


def test_casts_saturate_instead_of_producing_nan():
    x = torch.tensor([[1.0, 1000.0, -1000.0, 0.5]])
    q = quantize_tensorwise(x, E4M3, scale=torch.tensor(1.0))  # deliberately too small a scale
    assert torch.isfinite(q.data.float()).all()
    assert q.data.float().tolist() == [[1.0, 448.0, -448.0, 0.5]]
    stats = cast_stats(x, q)
    assert stats.overflow_frac == pytest.approx(0.5)
    assert stats.underflow_frac == 0.0


def test_underflow_counts_values_flushed_to_zero():
    x = torch.tensor([[1e-12, 1.0, 2.0, 3.0]])
    q = quantize_tensorwise(x, E5M2)
    assert q.data.float()[0, 0] == 0
    assert cast_stats(x, q).underflow_frac == pytest.approx(0.25)


def test_delayed_scaling_uses_history_and_lags_a_range_jump():
    history = AmaxHistory(length=2)
    small, big = torch.full((4, 4), 1.0), torch.full((4, 4), 8.0)
    first = quantize_delayed(small, E4M3, history)  # no history yet: current scaling
    assert first.scale.item() == pytest.approx(1.0 / 448)
    jumped = quantize_delayed(big, E4M3, history)  # scale still from the small tensor: overflow
    assert jumped.scale.item() == pytest.approx(1.0 / 448)
    assert cast_stats(big, jumped).overflow_frac == 1.0
    caught_up = quantize_delayed(big, E4M3, history)
    assert caught_up.scale.item() == pytest.approx(8.0 / 448)
    # The history forgets after `length` pushes.
    quantize_delayed(small, E4M3, history)
    quantize_delayed(small, E4M3, history)
    assert history.scale(E4M3).item() == pytest.approx(1.0 / 448)


def test_margin_adds_power_of_two_headroom():
    history = AmaxHistory(length=4, margin=2)
    history.push(torch.tensor(448.0))
    assert history.scale(E4M3).item() == pytest.approx(4.0)


def test_quantizer_for_each_recipe_and_role():
    x = randn(128, 256)
    shapes = {"fp8_tensorwise": (), "fp8_delayed": (), "fp8_rowwise": (128, 1), "mxfp8": (128, 8)}
    for name, scale_shape in shapes.items():
        q = quantizer_for(PRECISIONS.get(name), "lhs")(x)
        assert tuple(q.scale.shape) == scale_shape, name
    assert quantizer_for(PRECISIONS.get("fp8_blockwise"), "lhs")(x).scale.shape == (128, 2)
    assert quantizer_for(PRECISIONS.get("fp8_blockwise"), "rhs")(x).scale.shape == (1, 2)
    assert quantizer_for(PRECISIONS.get("fp8_tensorwise"), "lhs", E5M2)(x).data.dtype == torch.float8_e5m2
    with pytest.raises(ValueError, match="'lhs' or 'rhs'"):
        quantizer_for(PRECISIONS.get("fp8_tensorwise"), "out")
