"""``attention`` and ``transformer_step`` on the ``emulated`` (reference) backend.

Every precision-controlled projection becomes a layer whose GEMM operands are rounded to the precision and
multiplied in FP32:

* FP8 recipes: :class:`fp8bench.numerics.fp8_linear.Fp8Linear` with the emulated GEMM (dequantize, FP32 product), so the
  forward, dgrad and wgrad GEMMs see exactly the FP8 operands and scales a native kernel would;
* float precisions: :class:`RoundedLinear`, which rounds input and weight to BF16/FP16/TF32 (FP32: unchanged) and
  multiplies in FP32; gradients pass through the rounding unchanged (straight-through), and the backward GEMMs run in
  FP32 on those rounded operands.

Attention, norms, embeddings and the head run as on the ``torch`` backend. Timings measure the emulation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.kernels.emulated import EMULATED, qdq_float
from fp8bench.numerics.fp8_linear import EMULATED as EMULATED_GEMM
from fp8bench.numerics.fp8_linear import Fp8Linear, swap_linears
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline


def _rounded(x: torch.Tensor, precision: FloatPrecision) -> torch.Tensor:
    """``x`` rounded to ``precision`` in FP32, with an identity gradient."""
    return x + (qdq_float(x.detach(), precision) - x).detach()


class RoundedLinear(nn.Module):
    """``nn.Linear`` (no bias) whose operands are rounded to a float precision and multiplied in FP32."""

    def __init__(self, linear: nn.Linear, precision: FloatPrecision) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias, self.precision = linear.weight, linear.bias, precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        with torch.autocast(x.device.type, enabled=False):
            y = _rounded(x.float(), self.precision) @ _rounded(self.weight.float(), self.precision).t()
            if self.bias is not None:
                y = y + self.bias.float()
        return y.to(dtype)


def emulated_convert(precision: Precision, device: Device) -> Callable[[nn.Module], nn.Module]:
    if isinstance(precision, ScaledRecipe):
        return lambda m: swap_linears(m, lambda lin: Fp8Linear.from_linear(lin, precision, gemm=EMULATED_GEMM))
    assert isinstance(precision, FloatPrecision)
    return lambda m: swap_linears(m, lambda lin: RoundedLinear(lin, precision))


@EMULATED.builder("attention")
def build_attention(ctx: BuildContext) -> Pipeline:
    pipeline = build_attention_pipeline(ctx, emulated_convert(ctx.precision, ctx.device))
    pipeline.notes.append("emulated: projections as FP32 GEMMs on rounded operands; timings measure the emulation")
    return pipeline


@EMULATED.builder("transformer_step")
def build_transformer_step(ctx: BuildContext) -> Pipeline:
    pipeline = build_training_pipeline(ctx, emulated_convert(ctx.precision, ctx.device))
    pipeline.notes.append("emulated: projections as FP32 GEMMs on rounded operands; timings measure the emulation")
    return pipeline


LAYER_CONVERTERS["emulated"] = emulated_convert
