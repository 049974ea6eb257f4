import pytest
import torch

from fp8bench.core.formats import E4M3, E4M3FNUZ, E5M2, E5M2FNUZ, FP8_FORMATS
from fp8bench.core.precisions import (
    PRECISIONS,
    FloatPrecision,
    Fp4Recipe,
    Fp8FormatChoice,
    Fp8Recipe,
    Granularity,
    RunOptions,
    ScaledRecipe,
    resolve_precision,
)
from fp8bench.core.registry import UnknownNameError
from tests.rounding_theory import rounding_sqnr_db


def test_every_contract_precision_is_registered():
    assert PRECISIONS.names() == ["fp32", "tf32", "bf16", "fp16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise",
                                  "fp8_blockwise", "mxfp8", "nvfp4", "mxfp4"]


@pytest.mark.parametrize("fmt", list(FP8_FORMATS.values()), ids=lambda f: f.name)
def test_format_constants_match_torch(fmt):
    info = torch.finfo(fmt.dtype)
    assert fmt.max == info.max
    assert fmt.min_normal == info.smallest_normal
    # The smallest subnormal survives a round trip; half of it rounds to zero.
    assert torch.tensor(fmt.min_subnormal).to(fmt.dtype).float().item() == fmt.min_subnormal
    assert torch.tensor(fmt.min_subnormal / 2).to(fmt.dtype).float().item() == 0.0


def test_fnuz_twins_and_sqnr_rule():
    assert E4M3FNUZ.max == 240.0 and E4M3FNUZ.mantissa_bits == E4M3.mantissa_bits
    assert E5M2FNUZ.name == "e5m2fnuz" and E5M2FNUZ.max == E5M2.max
    # 6.02 dB per mantissa bit plus 4.77 dB for a uniform rounding error.
    assert rounding_sqnr_db(3) == pytest.approx(6.0206 * 4 + 4.7712, abs=1e-3)


def test_format_choice_sets_forward_and_backward_formats():
    e4 = resolve_precision("fp8_tensorwise", RunOptions(fp8_format="e4m3"))
    hybrid = resolve_precision("fp8_tensorwise", RunOptions(fp8_format="hybrid"))
    e5 = resolve_precision("fp8_rowwise", RunOptions(fp8_format="e5m2"))
    assert (e4.forward_format, e4.backward_format) == (E4M3, E4M3)
    assert (hybrid.forward_format, hybrid.backward_format) == (E4M3, E5M2)
    assert (e5.forward_format, e5.backward_format) == (E5M2, E5M2)


def test_resolve_applies_delayed_options_and_leaves_float_precisions_alone():
    delayed = resolve_precision("fp8_delayed", RunOptions(amax_history_len=4, margin=1))
    assert isinstance(delayed, Fp8Recipe) and delayed.delayed
    assert (delayed.amax_history_len, delayed.margin) == (4, 1)
    assert resolve_precision("bf16", RunOptions(fp8_format="e5m2")) is PRECISIONS.get("bf16")


def test_bad_values_name_what_is_accepted():
    with pytest.raises(UnknownNameError, match="accepted: fp32, tf32"):
        resolve_precision("fp9")
    with pytest.raises(ValueError, match="unknown FP8 format 'e3m4'; accepted: e4m3, e5m2, hybrid"):
        resolve_precision("fp8_tensorwise", RunOptions(fp8_format="e3m4"))
    with pytest.raises(ValueError, match="amax_history_len must be >= 1"):
        resolve_precision("fp8_delayed", RunOptions(amax_history_len=0))
    with pytest.raises(ValueError, match="delayed scaling is defined per tensor only"):
        Fp8Recipe("bad", Granularity.ROWWISE, delayed=True)
    with pytest.raises(ValueError, match="tf32 applies to float32 only"):
        FloatPrecision("bad", "bfloat16", tf32=True)


def test_recipes_are_frozen():
    recipe = PRECISIONS.get("fp8_tensorwise")
    with pytest.raises(AttributeError):
        recipe.margin = 3  # type: ignore[misc]


def test_alignment_rules():
    assert PRECISIONS.get("fp8_tensorwise").gemm_alignment() == (16, 16, 16)
    assert PRECISIONS.get("fp8_blockwise").gemm_alignment() == (16, 128, 128)
    assert PRECISIONS.get("mxfp8").gemm_alignment() == (16, 16, 32)


def test_four_bit_recipes_have_e2m1_elements_and_their_scales():
    nv, mx = PRECISIONS.get("nvfp4"), PRECISIONS.get("mxfp4")
    assert nv.forward_format.name == nv.backward_format.name == "e2m1"
    assert mx.forward_format.name == "e2m1" and mx.granularity is Granularity.MX and mx.block_elements == 32
    assert nv.granularity is Granularity.NVFP4 and nv.block_elements == 16
    assert not nv.fast_accum and not mx.fast_accum  # no fast FP4 accumulation in PyTorch
    # TE NVFP4BlockScaling defaults: disable_rht=False, disable_stochastic_rounding=False.
    assert nv.stochastic_rounding and nv.rht
    assert not mx.stochastic_rounding and not mx.rht
    # Packed E2M1 needs K/2 % 16, and whole blocks.
    assert nv.gemm_alignment() == (16, 16, 32) == mx.gemm_alignment()
    assert "e2m1" in nv.describe() and "Hadamard" in nv.describe()


def test_four_bit_recipe_validation_names_the_bad_value():
    with pytest.raises(ValueError, match="hybrid does not apply"):
        PRECISIONS.get("nvfp4").with_options(fp8_format=Fp8FormatChoice.HYBRID)
    # A run's FP8 options reach every precision it names; the 4-bit recipes keep E2M1 (records name e2m1).
    assert resolve_precision("nvfp4", RunOptions(fp8_format="hybrid", margin=2)).format_label == "e2m1"
    with pytest.raises(ValueError, match="need block scales"):
        Fp4Recipe("x", Granularity.ROWWISE)
    with pytest.raises(ValueError, match="4-bit"):
        Fp8Recipe("x", Granularity.NVFP4)
    with pytest.raises(ValueError, match="options of the 4-bit recipes"):
        Fp8Recipe("x", Granularity.TENSORWISE, rht=True)
    with pytest.raises(ValueError, match="16 elements"):
        Fp4Recipe("x", Granularity.NVFP4, nv_block=32)


def test_resolve_sets_four_bit_options_and_ignores_off_for_fp8():
    nv = resolve_precision("nvfp4", RunOptions(fp8_format="e4m3", stochastic_rounding=False, rht=False))
    assert not nv.stochastic_rounding and not nv.rht
    mx = resolve_precision("mxfp4", RunOptions(fp8_format="e4m3", stochastic_rounding=True))
    assert mx.stochastic_rounding and not mx.rht
    assert not resolve_precision("fp8_tensorwise",
                                 RunOptions(fp8_format="e4m3", stochastic_rounding=False)).stochastic_rounding
    with pytest.raises(ValueError, match="options of the 4-bit"):
        resolve_precision("fp8_rowwise", RunOptions(fp8_format="e4m3", rht=True))


def test_each_recipe_kind_answers_for_itself():
    """The FP8 and 4-bit kinds differ by method, not by a flag the callers branch on."""
    fp8, nv, mx4, mx8 = (PRECISIONS.get(n) for n in ("fp8_tensorwise", "nvfp4", "mxfp4", "mxfp8"))
    assert isinstance(fp8, Fp8Recipe) and isinstance(mx8, Fp8Recipe)
    assert isinstance(nv, Fp4Recipe) and isinstance(mx4, Fp4Recipe)
    assert all(isinstance(r, ScaledRecipe) and r.is_scaled for r in (fp8, nv, mx4, mx8))
    assert (fp8.element_bits, nv.element_bits) == (8, 4)
    assert nv.nvfp4() and not nv.mxfp4() and mx4.mxfp4() and mx8.mxfp8() and not mx4.mxfp8()
    assert [r.capability_key for r in (fp8, nv, mx4, mx8)] == ["tensorwise", "nvfp4", "mxfp4", "mx"]
    # Bytes of 1024 operand values: FP8 one each; E2M1 two per byte plus a 1-byte scale per block; BF16 two each.
    assert fp8.operand_bytes(1024) == 1024
    assert nv.operand_bytes(1024) == 512 + 64 and mx4.operand_bytes(1024) == 512 + 32
    assert PRECISIONS.get("bf16").operand_bytes(1024) == 2048
    assert nv.training_options() == {"stochastic_rounding": True, "rht": True} and fp8.training_options() == {}
