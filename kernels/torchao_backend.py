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
``mxfp8``                     torchao's prototype MXFP8 training, compute capability 10.0+ only (:func:`mx_api`)
``nvfp4``                     ``NVFP4DynamicActivationNVFP4WeightConfig`` (inference: ``gemm`` workload only)
``mxfp4``                     ``MXDynamicActivationMXWeightConfig`` with ``float4_e2m1fn_x2`` activations and
                              weights (inference: ``gemm`` workload only)
============================  ===================================================================================

The 4-bit configs (``torchao.prototype.mx_formats``, :func:`fp4_api`) are torchao's *inference* workflow:
``quantize_`` replaces each weight by an ``NVFP4Tensor`` / ``MXTensor`` and quantizes activations dynamically in
the forward pass; there is no 4-bit backward. They therefore run the ``gemm`` workload (a forward GEMM) and are
refused on the training workloads. Where ``torchao.prototype.mx_formats`` lacks them the case is refused, naming
what is missing. ``nvfp4`` runs with ``use_triton_kernel=False`` (the fused Triton quantizer needs the optional
MSLK package); ``mxfp4`` keeps torchao's default block scale rounding (``ScaleCalculationMode.RCEIL``, where
fp8bench's own quantizer follows OCP MX's floor). Both need FP4 tensor cores (compute capability 10.x).

torchao's MXFP8 training API moved between releases; both shapes are supported, detected by import:

* **0.17 and newer**: ``MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)`` from
  ``torchao.prototype.moe_training.config``; ``quantize_`` keeps each ``nn.Linear`` and wraps its weight in
  ``MXFP8TrainingWeightWrapperTensor`` (``_moe_training_transform`` -> ``_swap_params``), so conversion is seen
  in the weight's tensor class, not the module's type.
* **0.10 to 0.16**: ``MXLinearConfig.from_recipe_name("mxfp8_cublas_rceil")`` (``"mxfp8_cublas"`` before 0.13, which
  lacks the RCEIL recipe) from ``torchao.prototype.mx_formats``; ``quantize_`` turns each ``nn.Linear`` into an
  ``MXLinear`` in place (``MXLinear.from_float`` swaps ``__class__``).

The record's ``torchao_api`` says which one ran.

Refused, with the reason: ``fp8_delayed`` (torchao's float8 training only has dynamic scaling), ``fp8_blockwise``
(no 1x128/128x128 recipe in ``torchao.float8``), ``fp8_rowwise`` in E5M2 or hybrid (the rowwise recipes are E4M3),
and the float precisions (plain ``nn.Linear`` is the ``torch`` backend). ``rowwise_with_gw_hp`` is selected by the
build option ``wgrad_hp=True``: its forward GEMM equals ``rowwise``'s, it differs only in the backward pass.

The ``attention`` and ``transformer_step`` workloads run their model with every aligned ``nn.Linear`` converted
(QKV and output projections; the MLP too in the training step), the same layers fp8bench's own ``Fp8Linear``
replaces on the ``torch`` backend, so the two backends compare on the same step.

The ``gemm`` workload runs as a linear layer: ``B [N, K]`` is the layer's weight and ``A [M, K]`` its input, so the
output is ``A @ B^T``, the same product as every other backend's. torchao casts inside ``forward``, so only the
end-to-end time exists (no separate quantize or pre-quantized GEMM phase). That time quantizes both operands on
every call, as every backend's does: the float8 and MXFP8 training linears cast their weight in each forward, and
for the 4-bit inference configs, whose ``quantize_`` quantizes the weight once, each call runs ``quantize_`` on
the BF16 weight again before the forward (:func:`requantizing_forward`; its host-side Python is timed too).

On the CPU, torchao's tensorwise recipe reaches ``torch._scaled_mm`` with 0-dim scales, which PyTorch 2.13 runs on a
very slow reference path (seconds for a 512^3 GEMM) while rowwise scales run fast: keep CPU tensorwise shapes small.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.libraries import Library
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, first_line, refusals
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import Fp4Recipe, Fp8FormatChoice, Granularity, Precision, ScaledRecipe
from fp8bench.core.records import SCALE_FP32, SCALE_POW2
from fp8bench.hardware.capabilities import recipe_hardware_reason
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline

# torchao 0.10 is the oldest with Float8LinearConfig.from_recipe_name and the rowwise recipes.
TORCHAO_LIBRARY = Library("torchao", (0, 10), extra="torchao")

TORCHAO = BACKENDS.add("torchao", Backend(
    name="torchao", kind="vendor",
    description="torchao Float8Linear (convert_to_float8_training): tensorwise, rowwise, rowwise_with_gw_hp; "
                "MXFP8 training on compute capability 10.0+",
    requires=(TORCHAO_LIBRARY,),
))


def recipe_name(precision: Precision, wgrad_hp: bool = False) -> str:
    """The torchao recipe for ``precision`` (``tensorwise``, ``rowwise``, ``rowwise_with_gw_hp``, ``mxfp8``).

    Raises :class:`Unsupported` with the reason for precisions torchao has no recipe for.
    """
    if not isinstance(precision, ScaledRecipe):
        raise Unsupported(f"torchao runs FP8 recipes; {precision.name} is plain nn.Linear (the torch backend)")
    if precision.delayed:
        raise Unsupported("torchao float8 training scales dynamically only (ScalingType DYNAMIC or DISABLED); "
                          "it has no delayed scaling")
    g = precision.granularity
    if wgrad_hp and g is not Granularity.ROWWISE:
        raise Unsupported(f"wgrad_hp (rowwise_with_gw_hp) is a rowwise recipe; got {precision.name}")
    if isinstance(precision, Fp4Recipe):
        return precision.capability_key  # torchao's config names are the recipe kinds: nvfp4, mxfp4
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
    """The ``Float8LinearConfig`` for ``precision`` (not for ``mxfp8``, which uses :func:`mx_api`)."""
    from torchao.float8 import CastConfig, Float8GemmConfig, Float8LinearConfig

    name = recipe_name(precision, wgrad_hp)
    if name in ("mxfp8", "nvfp4", "mxfp4"):
        raise ValueError(f"{name} is configured by {'mx_api' if name == 'mxfp8' else 'fp4_api'}(), "
                         "not Float8LinearConfig")
    config = Float8LinearConfig.from_recipe_name(name)
    assert isinstance(precision, ScaledRecipe)
    if not precision.fast_accum:
        # torchao's recipes use fast accumulation in the output (forward) GEMM only: gemm_config_output.
        config = dataclasses.replace(config, gemm_config_output=Float8GemmConfig(use_fast_accum=False))
    if name != "tensorwise" or precision.fp8_format is Fp8FormatChoice.HYBRID:
        return config
    # Tensorwise with one element format for every cast (torchao's recipe is hybrid: E5M2 gradients).
    dtype = precision.forward_format.dtype
    casts = {f.name: CastConfig(target_dtype=dtype) for f in dataclasses.fields(config)
             if f.name.startswith("cast_config_")}
    return dataclasses.replace(config, **casts)


@dataclass(frozen=True)
class MXApi:
    """torchao's MXFP8 training in the shape the installed release has (see the module docstring)."""

    shape: str  # recorded as ``torchao_api``
    recipe: str  # torchao's recipe name
    config: Any  # what ``torchao.quantization.quantize_`` takes
    converted: Callable[[nn.Module], bool]  # whether quantize_ turned this linear layer into MXFP8


def mx_api() -> MXApi:
    """The installed torchao's MXFP8 training config, or :class:`Unsupported` saying neither shape is there."""
    try:
        config = importlib.import_module("torchao.prototype.moe_training.config")
        tensor = importlib.import_module("torchao.prototype.moe_training.tensor")
        op_config, recipes = config.MXFP8TrainingOpConfig, config.MXFP8TrainingRecipe
        wrapper = tensor.MXFP8TrainingWeightWrapperTensor
    except (ImportError, AttributeError) as new_exc:
        try:
            mx = importlib.import_module("torchao.prototype.mx_formats")
            mx_linear = importlib.import_module("torchao.prototype.mx_formats.mx_linear").MXLinear
            names = {r.value for r in mx.MXLinearRecipeName}
        except (ImportError, AttributeError) as old_exc:
            raise Unsupported(f"torchao has no MXFP8 training API here (neither MXFP8TrainingOpConfig: "
                              f"{first_line(new_exc)}; nor MXLinearConfig: {first_line(old_exc)})") from old_exc
        name = "mxfp8_cublas_rceil" if "mxfp8_cublas_rceil" in names else "mxfp8_cublas"
        return MXApi("MXLinearConfig (torchao <= 0.16)", name, mx.MXLinearConfig.from_recipe_name(name),
                     lambda layer: isinstance(layer, mx_linear))
    return MXApi("MXFP8TrainingOpConfig (torchao >= 0.17)", recipes.MXFP8_RCEIL.value,
                 op_config.from_recipe(recipes.MXFP8_RCEIL),
                 lambda layer: isinstance(getattr(layer, "weight", None), wrapper))


FP4_RECIPES = ("nvfp4", "mxfp4")
FP4_INFERENCE_ONLY = ("torchao's 4-bit configs (NVFP4DynamicActivationNVFP4WeightConfig, "
                      "MXDynamicActivationMXWeightConfig) are inference-only: no 4-bit backward, so fp8bench runs "
                      "them on the gemm workload only")


def fp4_api(name: str) -> MXApi:
    """torchao's 4-bit inference config for ``nvfp4`` or ``mxfp4``, or :class:`Unsupported` naming what is missing
    (``torchao.prototype.mx_formats``, 0.18: ``inference_workflow.py``, ``nvfp4_tensor.py``, ``mx_tensor.py``)."""
    try:
        mx = importlib.import_module("torchao.prototype.mx_formats")
        if name == "nvfp4":
            config = mx.NVFP4DynamicActivationNVFP4WeightConfig(use_triton_kernel=False)
            tensor_cls = importlib.import_module("torchao.prototype.mx_formats.nvfp4_tensor").NVFP4Tensor
        else:
            fp4 = torch.float4_e2m1fn_x2
            config = mx.MXDynamicActivationMXWeightConfig(block_size=32, activation_dtype=fp4, weight_dtype=fp4)
            tensor_cls = importlib.import_module("torchao.prototype.mx_formats.mx_tensor").MXTensor
    except (ImportError, AttributeError, TypeError, AssertionError) as exc:
        raise Unsupported(f"torchao has no {name} config here: {first_line(exc)}") from exc
    return MXApi(f"{type(config).__name__} (inference)", name, config,
                 lambda layer: isinstance(getattr(layer, "weight", None), tensor_cls))


def convert(module: nn.Module, precision: Precision, wgrad_hp: bool = False) -> nn.Module:
    """Swap ``module``'s linear layers for torchao's FP8 ones under ``precision``'s recipe; returns the result.

    Layers whose dimensions are not multiples of 16 stay in high precision (``torch._scaled_mm`` needs K and N
    multiples of 16), as torchao's documented filter does.
    """
    name = recipe_name(precision, wgrad_hp)
    if name in ("mxfp8", *FP4_RECIPES):
        quantize_ = importlib.import_module("torchao.quantization").quantize_
        quantize_(module, mx_api().config if name == "mxfp8" else fp4_api(name).config)
        return module
    from torchao.float8 import convert_to_float8_training

    def aligned(mod: nn.Module, fqn: str) -> bool:
        return isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

    return convert_to_float8_training(module, module_filter_fn=aligned, config=torchao_config(precision, wgrad_hp))


def scale_format(precision: Precision, wgrad_hp: bool = False) -> str | None:
    """How the torchao float8 recipe for ``precision`` forms its scale factors (``Record.scale_format``): its
    ``rowwise`` recipes round them down to powers of two (``round_scales_to_power_of_2=True`` in
    ``Float8LinearConfig.from_recipe_name``, torchao ``float8/config.py``), where fp8bench's ``fp8_rowwise`` is
    amax / max with any FP32 value; so the record says so, and the comparability key keeps them apart. ``None`` for
    the MX and 4-bit recipes, whose scale formats (E8M0, E4M3) the precision itself fixes."""
    name = recipe_name(precision, wgrad_hp)
    if name in ("mxfp8", *FP4_RECIPES):
        return None
    pow2 = getattr(torchao_config(precision, wgrad_hp), "round_scales_to_power_of_2", False)
    return SCALE_POW2 if pow2 else SCALE_FP32


def precision_support(precision: Precision, device: Device) -> str | None:
    """Why torchao cannot run ``precision`` on ``device`` (``None``: it can)."""
    try:
        recipe_name(precision)
    except Unsupported as exc:
        return str(exc)
    assert isinstance(precision, ScaledRecipe)
    return recipe_hardware_reason(device, precision)


def model_support(precision: Precision, device: Device) -> str | None:
    """The training workloads: as :func:`precision_support`, without the inference-only 4-bit configs."""
    if isinstance(precision, Fp4Recipe):
        return FP4_INFERENCE_ONLY
    return precision_support(precision, device)


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
    if low_precision_layers(layer, precision, wgrad_hp) == 0:
        raise Unsupported(f"torchao left a {n}x{k} weight in high precision (dimensions must be multiples of 16)")

    name = recipe_name(precision, wgrad_hp)
    forward = torch.no_grad()(requantizing_forward(layer, b, name, a) if name in FP4_RECIPES else lambda: layer(a))
    with refusals(f"torchao {name} failed on {ctx.device}",
                  (RuntimeError, ValueError, NotImplementedError, AssertionError)):
        forward()
    notes = [f"torchao {name} forward; it quantizes inside forward, so no separate quantize or pre-quantized GEMM "
             "time"]
    if name in FP4_RECIPES:
        notes.append("weight quantized in every call (quantize_ on the BF16 weight, then the forward), as every "
                     "backend quantizes B end to end; torchao's inference flow quantizes it once")
    return Pipeline(end_to_end=forward, phases={}, output=forward, prequantized_phases=(), notes=notes,
                    extra={"torchao_recipe": name, "torchao_api": api_shape(name)},
                    scale_format=scale_format(precision, wgrad_hp))


def requantizing_forward(layer: nn.Module, weight: torch.Tensor, name: str, a: torch.Tensor
                         ) -> Callable[[], torch.Tensor]:
    """``layer(a)`` after quantizing ``weight`` (BF16 ``[N, K]``) into ``layer`` again with ``quantize_``.

    torchao's 4-bit inference configs quantize the weight once, when ``quantize_`` transforms the module, and only
    the activation per call (``inference_workflow.py``); the other backends' end-to-end GEMM quantizes both
    operands each call, so this call does too, through the same public transform. The BF16 weight is put back
    first: ``quantize_`` takes every ``nn.Linear`` whatever its weight, and the quantized weight, which reports
    BF16, would pass the MX transform's bf16 assert and make torchao's quantizer fail on it (0.18:
    ``NotImplementedError`` for NVFP4, ``AssertionError`` for packed MXFP4). The ``extra_repr`` the
    transform chains onto the module each time is dropped, so repeated calls do not grow it.
    """
    quantize_ = importlib.import_module("torchao.quantization").quantize_
    config = fp4_api(name).config
    source = nn.Parameter(weight.to(torch.bfloat16), requires_grad=False)

    def forward() -> torch.Tensor:
        layer.weight = source
        vars(layer).pop("extra_repr", None)
        quantize_(layer, config)
        return layer(a)

    return forward


# --- model workloads: the attention block and the training step, with their linears swapped for Float8Linear ----

def api_shape(name: str) -> str:
    """The torchao API a recipe runs through (recorded as ``torchao_api``)."""
    if name in FP4_RECIPES:
        return fp4_api(name).shape
    return mx_api().shape if name == "mxfp8" else "Float8LinearConfig + convert_to_float8_training"


def low_precision_layers(module: nn.Module, precision: Precision, wgrad_hp: bool = False) -> int:
    """How many of ``module``'s linear layers torchao converted: ``Float8Linear`` modules for the float8 recipes;
    for MXFP8, what the installed API's conversion leaves (:attr:`MXApi.converted`)."""
    name = recipe_name(precision, wgrad_hp)
    if name in ("mxfp8", *FP4_RECIPES):
        converted = mx_api().converted if name == "mxfp8" else fp4_api(name).converted
        return sum(converted(m) for m in module.modules() if isinstance(m, nn.Linear))
    from torchao.float8.float8_linear import Float8Linear

    return sum(isinstance(m, Float8Linear) for m in module.modules())


def torchao_convert(precision: Precision, device: Device, wgrad_hp: bool = False) -> Callable[[nn.Module], nn.Module]:
    """``convert(module)`` for the model workloads: torchao's conversion, refusing a model it leaves untouched."""

    def convert_module(module: nn.Module) -> nn.Module:
        converted = convert(module, precision, wgrad_hp)
        if low_precision_layers(converted, precision, wgrad_hp) == 0:
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
        pipeline.notes.append(f"torchao {name}: every aligned nn.Linear converted")
        pipeline.extra.update(torchao_recipe=name, torchao_api=api_shape(name))
        pipeline.scale_format = scale_format(ctx.precision, wgrad_hp)
        return pipeline

    return builder


TORCHAO.builder("attention", supports=model_support)(_model_builder(build_attention_pipeline))
TORCHAO.builder("transformer_step", supports=model_support)(_model_builder(build_training_pipeline))
LAYER_CONVERTERS["torchao"] = torchao_convert
