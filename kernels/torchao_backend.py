"""The ``torchao`` backend (vendor): torchao's float8 training linear, ``Float8Linear``.

torchao swaps a model's ``nn.Linear`` layers for ``Float8Linear`` (``convert_to_float8_training``); each forward
then casts the BF16 input and weight to FP8 with dynamically computed scales and runs ``torch._scaled_mm``, and
the backward does the same for the gradient GEMMs. Its recipes map to fp8bench precisions as follows
(:func:`torchao_config`):

============================  ===================================================================================
fp8bench precision            torchao ``Float8LinearConfig``
============================  ===================================================================================
``fp8_tensorwise`` hybrid     recipe ``tensorwise`` exactly: per-tensor scales, E4M3 input/weight, E5M2 grads
``fp8_tensorwise`` e4m3/e5m2  ``tensorwise`` with every cast retargeted to that element format
``fp8_rowwise`` e4m3          recipe ``rowwise``: per-row scales rounded down to powers of two, E4M3 everywhere
``fp8_rowwise`` + wgrad_hp    recipe ``rowwise_with_gw_hp``: as rowwise, but the weight-gradient GEMM runs in BF16
``mxfp8``                     torchao's prototype MXFP8 training (``MXFP8TrainingOpConfig``), compute
                              capability 10.0+ only
============================  ===================================================================================

Refused, with the reason: ``fp8_delayed`` (torchao's float8 training only has dynamic scaling), ``fp8_blockwise``
(no 1x128/128x128 recipe in ``torchao.float8``), ``fp8_rowwise`` in E5M2 or hybrid (the rowwise recipes are E4M3),
and the float precisions (plain ``nn.Linear`` is the ``torch`` backend). ``rowwise_with_gw_hp`` is selected by the
build option ``wgrad_hp=True``: its forward GEMM equals ``rowwise``'s, it differs only in the backward pass.

The ``attention`` and ``transformer_step`` workloads run their model with every aligned ``nn.Linear`` converted
(QKV and output projections; the MLP too in the training step), the same layers fp8bench's own ``Fp8Linear``
replaces on the ``torch`` backend, so the two backends compare on the same step.

The ``gemm`` workload runs as a linear layer: ``B [N, K]`` is the layer's weight and ``A [M, K]`` its input, so the
output is ``A @ B^T``, the same product as every other backend's. torchao casts inside ``forward``, so only the
end-to-end time exists (no separate quantize or pre-quantized GEMM phase).

On the CPU, torchao's tensorwise recipe reaches ``torch._scaled_mm`` with 0-dim scales, which PyTorch 2.13 runs on a
very slow reference path (seconds for a 512^3 GEMM) while rowwise scales run fast: keep CPU tensorwise shapes small.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fp8bench.capabilities import backend_reason, fp8_gemm_reason
from fp8bench.catalog import BACKENDS, Backend
from fp8bench.devices import Device
from fp8bench.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.recipes import Fp8FormatChoice, Fp8Recipe, Granularity, Precision
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline

TORCHAO = BACKENDS.add("torchao", Backend(
    name="torchao", kind="vendor",
    description="torchao Float8Linear (convert_to_float8_training): tensorwise, rowwise, rowwise_with_gw_hp; "
                "MXFP8 training on compute capability 10.0+",
    availability=lambda device: backend_reason("torchao", device),
))


def recipe_name(precision: Precision, wgrad_hp: bool = False) -> str:
    """The torchao recipe for ``precision`` (``tensorwise``, ``rowwise``, ``rowwise_with_gw_hp``, ``mxfp8``).

    Raises :class:`Unsupported` with the reason for precisions torchao has no recipe for.
    """
    if not isinstance(precision, Fp8Recipe):
        raise Unsupported(f"torchao runs FP8 recipes; {precision.name} is plain nn.Linear (the torch backend)")
    if precision.delayed:
        raise Unsupported("torchao float8 training scales dynamically only (ScalingType DYNAMIC or DISABLED); "
                          "it has no delayed scaling")
    g = precision.granularity
    if wgrad_hp and g is not Granularity.ROWWISE:
        raise Unsupported(f"wgrad_hp (rowwise_with_gw_hp) is a rowwise recipe; got {precision.name}")
    if g is Granularity.TENSORWISE:
        return "tensorwise"
    if g is Granularity.ROWWISE:
        if precision.fp8_format is not Fp8FormatChoice.E4M3:
            raise Unsupported(f"torchao's rowwise recipes cast to e4m3 only; got fp8 format "
                              f"{precision.fp8_format.value} (use --fp8-format e4m3)")
        return "rowwise_with_gw_hp" if wgrad_hp else "rowwise"
    if g is Granularity.MX:
        return "mxfp8"
    raise Unsupported("torchao.float8 has no 1x128/128x128 blockwise recipe")


def torchao_config(precision: Precision, wgrad_hp: bool = False) -> Any:
    """The ``Float8LinearConfig`` for ``precision`` (not for ``mxfp8``, which uses :func:`mx_config`)."""
    from torchao.float8 import CastConfig, Float8LinearConfig

    name = recipe_name(precision, wgrad_hp)
    if name == "mxfp8":
        raise ValueError("mxfp8 is configured by mx_config(), not Float8LinearConfig")
    config = Float8LinearConfig.from_recipe_name(name)
    assert isinstance(precision, Fp8Recipe)
    if name != "tensorwise" or precision.fp8_format is Fp8FormatChoice.HYBRID:
        return config
    # Tensorwise with one element format for every cast (torchao's recipe is hybrid: E5M2 gradients).
    dtype = precision.forward_format.dtype
    casts = {f.name: CastConfig(target_dtype=dtype) for f in dataclasses.fields(config)
             if f.name.startswith("cast_config_")}
    return dataclasses.replace(config, **casts)


def mx_config() -> Any:
    """torchao's MXFP8 training config (0.17+: ``MXFP8TrainingOpConfig``), or :class:`Unsupported` why not."""
    try:
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    except Exception as exc:  # noqa: BLE001 - a missing prototype module is a refusal, with its message
        raise Unsupported(f"torchao has no MXFP8TrainingOpConfig here: {type(exc).__name__}: {exc}") from exc
    return MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)


def convert(module: nn.Module, precision: Precision, wgrad_hp: bool = False) -> nn.Module:
    """Swap ``module``'s linear layers for torchao's FP8 ones under ``precision``'s recipe; returns the result.

    Layers whose dimensions are not multiples of 16 stay in high precision (``torch._scaled_mm`` needs K and N
    multiples of 16), as torchao's documented filter does.
    """
    name = recipe_name(precision, wgrad_hp)
    if name == "mxfp8":
        from torchao.quantization import quantize_

        quantize_(module, mx_config())
        return module
    from torchao.float8 import convert_to_float8_training

    def aligned(mod: nn.Module, fqn: str) -> bool:
        return isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

    return convert_to_float8_training(module, module_filter_fn=aligned, config=torchao_config(precision, wgrad_hp))


def precision_support(precision: Precision, device: Device) -> str | None:
    """Why torchao cannot run ``precision`` on ``device`` (``None``: it can)."""
    try:
        recipe_name(precision)
    except Unsupported as exc:
        return str(exc)
    assert isinstance(precision, Fp8Recipe)
    return fp8_gemm_reason(device, precision.granularity)


@TORCHAO.builder("gemm", supports=precision_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    wgrad_hp = bool(ctx.options.get("wgrad_hp", False))
    a = ctx.inputs["a"].to(torch.bfloat16)
    b = ctx.inputs["b"]
    n, k = b.shape
    linear = nn.Linear(k, n, bias=False, device=ctx.device.torch, dtype=torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(b.to(torch.bfloat16))
    linear.weight.requires_grad_(False)
    with refusals(f"torchao refused {precision.name}", with_type=True):
        layer = convert(linear, precision, wgrad_hp)
    if type(layer) is nn.Linear:
        raise Unsupported(f"torchao left a {n}x{k} weight in high precision (dimensions must be multiples of 16)")

    @torch.no_grad()
    def forward() -> torch.Tensor:
        return layer(a)

    with refusals(f"torchao {recipe_name(precision, wgrad_hp)} failed on {ctx.device}",
                  (RuntimeError, ValueError, NotImplementedError, AssertionError)):
        forward()
    return Pipeline(end_to_end=forward, phases={}, output=forward, prequantized_phases=(),
                    notes=[f"torchao {recipe_name(precision, wgrad_hp)} Float8Linear forward; it quantizes "
                           "inside forward, so no separate quantize or pre-quantized GEMM time"],
                    extra={"torchao_recipe": recipe_name(precision, wgrad_hp)})


# --- model workloads: the attention block and the training step, with their linears swapped for Float8Linear ----

def float8_layer_count(module: nn.Module) -> int:
    """How many of ``module``'s layers torchao converted."""
    from torchao.float8.float8_linear import Float8Linear

    return sum(isinstance(m, Float8Linear) for m in module.modules())


def torchao_convert(precision: Precision, device: Device, wgrad_hp: bool = False) -> Callable[[nn.Module], nn.Module]:
    """``convert(module)`` for the model workloads: torchao's conversion, refusing a model it leaves untouched."""

    def convert_module(module: nn.Module) -> nn.Module:
        converted = convert(module, precision, wgrad_hp)
        if recipe_name(precision, wgrad_hp) != "mxfp8" and float8_layer_count(converted) == 0:
            raise Unsupported("torchao converted no layer (every linear has a dimension that is not a multiple "
                              "of 16)")
        return converted

    return convert_module


def _model_builder(build: Callable[[BuildContext, Callable[[nn.Module], nn.Module]], Pipeline]
                   ) -> Callable[[BuildContext], Pipeline]:
    def builder(ctx: BuildContext) -> Pipeline:
        wgrad_hp = bool(ctx.options.get("wgrad_hp", False))
        name = recipe_name(ctx.precision, wgrad_hp)
        with refusals(f"torchao {name} failed on {ctx.device}",
                      (RuntimeError, NotImplementedError, AssertionError, TypeError)):
            pipeline = build(ctx, torchao_convert(ctx.precision, ctx.device, wgrad_hp))
        pipeline.notes.append(f"torchao {name}: every aligned nn.Linear is a Float8Linear")
        pipeline.extra["torchao_recipe"] = name
        return pipeline

    return builder


TORCHAO.builder("attention", supports=precision_support)(_model_builder(build_attention_pipeline))
TORCHAO.builder("transformer_step", supports=precision_support)(_model_builder(build_training_pipeline))
LAYER_CONVERTERS["torchao"] = torchao_convert
