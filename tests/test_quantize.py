import pytest
import torch

from fp8bench.core.formats import E4M3, E5M2
from fp8bench.core.precisions import PRECISIONS
from fp8bench.numerics.quantize import (
    AmaxHistory,
    cast_stats,
    quantize_blockwise,
    quantize_delayed,
    quantize_mx,
    quantize_rowwise,
    quantize_tensorwise,
    quantizer_for,
)


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


# --- 4-bit (E2M1) ---------------------------------------------------------------------------------------------

def test_e2m1_round_to_nearest_ties_to_even_code_and_saturates():
    from fp8bench.numerics.quantize import round_to_e2m1

    u = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 7.0, 0.3, -0.26, 2.9, 0.0])
    assert round_to_e2m1(u).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -4.0, 6.0, 0.5, -0.5, 3.0, 0.0]


def test_e2m1_stochastic_rounding_is_unbiased_and_stays_on_neighbours():
    from fp8bench.numerics.quantize import round_to_e2m1

    u = torch.full((200_000,), 2.4)
    r = round_to_e2m1(u, stochastic=True, generator=torch.Generator().manual_seed(0))
    assert set(r.unique().tolist()) == {2.0, 3.0}
    assert r.mean().item() == pytest.approx(2.4, abs=0.01)  # (2.4 - 2) / (3 - 2) of them round up
    assert round_to_e2m1(torch.tensor([9.0, -1.0]), stochastic=True).tolist() == [6.0, -1.0]


def test_pack_e2m1_nibbles_low_first():
    from fp8bench.numerics.quantize import pack_e2m1

    packed = pack_e2m1(torch.tensor([[0.5, 6.0, -1.0, 0.0]]))
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (1, 2)
    # 0.5 is code 1, 6 is code 7, -1 is 8 | 2.
    assert packed.view(torch.uint8).tolist() == [[0x71, 0x0A]]
    with pytest.raises(ValueError, match="odd"):
        pack_e2m1(torch.zeros(2, 3))


def test_nvfp4_two_level_scales():
    from fp8bench.core.formats import E2M1
    from fp8bench.numerics.quantize import quantize_nvfp4

    x = randn(32, 64)
    x[3, 5] = 40.0  # one outlier sets the tensor scale
    q = quantize_nvfp4(x)
    assert q.fmt is E2M1 and q.scale.shape == (32, 4) and q.block == (1, 16)
    assert q.tensor_scale.item() == pytest.approx(40.0 / (6 * 448))
    # Block scales are E4M3 values; the outlier's block scale is E4M3's max, and the outlier lands on 6.
    assert torch.equal(q.scale, q.scale.to(torch.float8_e4m3fn).float())
    assert q.scale.max().item() == 448.0 and q.data[3, 5].item() == 6.0
    assert set(q.data.float().abs().unique().tolist()) <= {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}
    # A block's largest value ends within one E4M3 rounding step of 6.
    err = (q.dequantize() - x).pow(2).sum() / x.pow(2).sum()
    assert 0.003 < err.item() < 0.03
    # Overflow is physics here: a block whose E4M3 scale rounded down pushes its largest value (rarely two) past
    # 6, where it saturates; a block whose scale rounded up has none.
    stats = cast_stats(x, q)
    exact = x.abs().reshape(32, 4, 16).amax(-1) / 6 / q.tensor_scale
    rounded_down = (q.scale < exact * (1 - 2.0**-20)).float().mean().item()
    assert 0 < stats.overflow_frac <= rounded_down * 2 / 16


def test_nvfp4_block_whose_scale_underflows_becomes_zeros():
    from fp8bench.numerics.quantize import quantize_nvfp4

    x = torch.zeros(1, 32)
    x[0, 0] = 1000.0
    x[0, 16:] = 1e-6  # 1e-6 / 6 / (1000 / 2688) is far below E4M3's 2**-9
    q = quantize_nvfp4(x)
    assert q.scale[0, 1].item() == 0.0
    assert torch.all(q.data[0, 16:] == 0) and torch.isfinite(q.dequantize()).all()
    assert cast_stats(x, q).underflow_frac == pytest.approx(16 / 32)


def test_mxfp4_power_of_two_scales_put_the_amax_in_4_to_8():
    from fp8bench.core.formats import E2M1

    x = randn(16, 64)
    q = quantize_mx(x, E2M1)
    assert torch.equal(q.scale, torch.exp2(torch.log2(q.scale).round()))
    top = (x.abs().reshape(16, 2, 32).amax(-1) / q.scale)
    assert ((top >= 4) & (top < 8)).all()
    assert q.data.dtype == torch.bfloat16 and q.data.float().abs().max().item() <= 6.0


def test_quantizer_for_four_bit_recipes_and_stochastic_option():
    nv, mx = PRECISIONS.get("nvfp4"), PRECISIONS.get("mxfp4")
    x = randn(16, 64)
    assert quantizer_for(nv, "lhs")(x).granularity.value == "nvfp4"
    assert quantizer_for(mx, "rhs")(x).block == (1, 32)
    g = torch.Generator().manual_seed(1)
    a = quantizer_for(nv, "lhs", stochastic=True, generator=g)(x).dequantize()
    b = quantizer_for(nv, "lhs")(x).dequantize()
    assert not torch.equal(a, b)
    with pytest.raises(ValueError, match="E2M1 elements only"):
        quantizer_for(PRECISIONS.get("mxfp8"), "lhs", stochastic=True)


def test_hadamard_transform_is_orthonormal_and_cancels_in_a_product():
    from fp8bench.numerics.quantize import hadamard_16, random_hadamard_transform

    signs = torch.where(torch.rand(16, generator=torch.Generator().manual_seed(0)) < 0.5, -1.0, 1.0)
    h = hadamard_16(signs=signs)
    assert torch.allclose(h @ h.t(), torch.eye(16), atol=1e-6)
    a, b = randn(8, 64, seed=1), randn(4, 64, seed=2)
    ta, tb = random_hadamard_transform(a, h), random_hadamard_transform(b, h)
    assert torch.allclose(ta @ tb.t(), a @ b.t(), atol=1e-4)
    with pytest.raises(ValueError, match="multiple of 16"):
        random_hadamard_transform(randn(2, 24), h)
