"""torchao backend: recipe mapping to Float8LinearConfig and real Float8Linear runs on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchao.float8")

from fp8bench.devices import Device  # noqa: E402
from fp8bench.kernels import torchao_backend as tab  # noqa: E402
from fp8bench.numerics import compare  # noqa: E402
from fp8bench.pipeline import BuildContext, Unsupported  # noqa: E402
from fp8bench.recipes import resolve_precision  # noqa: E402
from fp8bench.workloads.gemm import GEMM  # noqa: E402


@pytest.mark.parametrize(("precision", "fmt", "wgrad_hp", "name"), [
    ("fp8_tensorwise", "hybrid", False, "tensorwise"),
    ("fp8_tensorwise", "e4m3", False, "tensorwise"),
    ("fp8_rowwise", "e4m3", False, "rowwise"),
    ("fp8_rowwise", "e4m3", True, "rowwise_with_gw_hp"),
    ("mxfp8", "e4m3", False, "mxfp8"),
])
def test_recipe_names(precision, fmt, wgrad_hp, name) -> None:
    assert tab.recipe_name(resolve_precision(precision, fmt), wgrad_hp) == name


@pytest.mark.parametrize(("precision", "fmt", "match"), [
    ("fp8_delayed", "e4m3", "no delayed scaling"),
    ("fp8_blockwise", "e4m3", "no 1x128/128x128 blockwise recipe"),
    ("fp8_rowwise", "hybrid", "e4m3 only"),
    ("bf16", "e4m3", "plain nn.Linear"),
])
def test_refusals_name_the_reason(precision, fmt, match) -> None:
    with pytest.raises(Unsupported, match=match):
        tab.recipe_name(resolve_precision(precision, fmt))


def test_tensorwise_hybrid_is_torchaos_recipe_and_e4m3_retargets_every_cast() -> None:
    from torchao.float8 import Float8LinearConfig

    hybrid = tab.torchao_config(resolve_precision("fp8_tensorwise", "hybrid"))
    assert hybrid == Float8LinearConfig.from_recipe_name("tensorwise")
    assert hybrid.cast_config_grad_output.target_dtype == torch.float8_e5m2
    e4m3 = tab.torchao_config(resolve_precision("fp8_tensorwise", "e4m3"))
    assert e4m3.cast_config_grad_output.target_dtype == torch.float8_e4m3fn
    assert e4m3.cast_config_input.target_dtype == torch.float8_e4m3fn


def test_rowwise_with_gw_hp_disables_the_weight_gradient_cast() -> None:
    from torchao.float8 import ScalingType

    cfg = tab.torchao_config(resolve_precision("fp8_rowwise"), wgrad_hp=True)
    assert cfg.cast_config_input_for_grad_weight.scaling_type is ScalingType.DISABLED


def test_convert_swaps_aligned_linears_only() -> None:
    from torchao.float8.float8_linear import Float8Linear

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 24))  # 24 is not a multiple of 16
    converted = tab.convert(model, resolve_precision("fp8_rowwise"))
    kinds = [type(m) for m in converted if isinstance(m, nn.Linear)]
    assert kinds == [Float8Linear, nn.Linear]


def _build(precision: str, shape: str = "64x96x128", fmt: str = "e4m3") -> tuple:
    sh = GEMM.parse_shape(shape)
    inputs = GEMM.make_inputs(sh, Device("cpu"), seed=0)
    ctx = BuildContext("gemm", sh, resolve_precision(precision, fmt), Device("cpu"), inputs)
    return tab.build_gemm(ctx), GEMM.reference(inputs)


@pytest.mark.parametrize("precision", ["fp8_rowwise", "fp8_tensorwise"])
def test_gemm_as_a_float8_linear_is_as_accurate_as_e4m3_allows(precision: str) -> None:
    pipeline, ref = _build(precision)
    out = pipeline.output()
    assert out.dtype == torch.bfloat16 and out.shape == (64, 96)
    num = compare(out, ref)
    # Two E4M3 operands (3 mantissa bits): about 28 dB; torchao's rowwise power-of-two scales cost up to ~3 dB.
    assert 22.0 < num.sqnr_db < 35.0
    assert pipeline.phases == {} and pipeline.prequantized_phases == ()
    assert pipeline.extra["torchao_recipe"] == tab.recipe_name(resolve_precision(precision))


def test_mxfp8_is_refused_on_the_cpu_by_the_capability_matrix() -> None:
    why = tab.TORCHAO.unsupported_reason("gemm", resolve_precision("mxfp8"), Device("cpu"))
    assert why and "tensorwise and rowwise" in why
