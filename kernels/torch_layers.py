"""``attention`` and ``transformer_step`` on the ``torch`` backend.

Float precisions run the model's ``nn.Linear`` layers as they are (cuBLAS/oneDNN GEMMs under autocast). FP8 recipes
swap every precision-controlled projection for :class:`fp8bench.numerics.fp8_linear.Fp8Linear` with native scaled GEMMs
(``torch._scaled_mm`` / ``F.scaled_mm``) in all three GEMMs of each layer. What the device cannot run is refused
with the same capability rule as the ``gemm`` workload, or with PyTorch's own error.

On the CPU (torch 2.13) ``torch._scaled_mm`` with per-tensor scales takes a slow path (about 0.7 s for a 256x128x128
product) while per-row scales are fast, so ``fp8_tensorwise`` and ``fp8_delayed`` layer cases usually end as
``skipped: over budget`` there: a measured property of that kernel, reported as such.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, refusals
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import recipe_gemm_reason
from fp8bench.kernels.torch_backend import ATEN_REFUSALS, TORCH
from fp8bench.numerics.fp8_linear import NATIVE, Fp8Linear, swap_linears
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline


def layer_support(precision: Precision, device: Device) -> str | None:
    if isinstance(precision, FloatPrecision):
        if precision.tf32 and not device.is_cuda:
            return "TF32 is a CUDA tensor-core mode; on the CPU the GEMMs would run plain FP32"
        return None
    assert isinstance(precision, ScaledRecipe)
    # Every FP8 projection runs its forward, dgrad and wgrad GEMMs (the attention block's forward-only mode too is
    # judged by all three: one rule for the workload, whatever its flags).
    return recipe_gemm_reason(device, precision, backward=True)


def torch_convert(precision: Precision, device: Device) -> Callable[[nn.Module], nn.Module]:
    """Swap ``nn.Linear`` for native FP8 layers under an FP8 recipe; leave them alone otherwise."""
    if isinstance(precision, ScaledRecipe):
        return lambda module: swap_linears(module, lambda lin: Fp8Linear.from_linear(lin, precision, gemm=NATIVE))
    return lambda module: module


def _aten_refusal(exc: BaseException) -> bool:
    """A refusal of the scaled GEMM, not a failure elsewhere in the layer: every type but RuntimeError is ATen's
    refusal as raised (see :data:`ATEN_REFUSALS`); a RuntimeError counts when it names the scaled-GEMM kernel."""
    return not isinstance(exc, RuntimeError) or "scaled_mm" in str(exc).lower()


def _guarded(build: Callable[[BuildContext, Callable[[nn.Module], nn.Module]], Pipeline],
             ctx: BuildContext) -> Pipeline:
    # Builders run the case once: PyTorch accepts or refuses the scaling layout before anything is timed.
    with refusals(f"torch refused {ctx.precision.name} on {ctx.device}", ATEN_REFUSALS, when=_aten_refusal):
        return build(ctx, torch_convert(ctx.precision, ctx.device))


@TORCH.builder("attention", supports=layer_support)
def build_attention(ctx: BuildContext) -> Pipeline:
    return _guarded(build_attention_pipeline, ctx)


@TORCH.builder("transformer_step", supports=layer_support)
def build_transformer_step(ctx: BuildContext) -> Pipeline:
    return _guarded(build_training_pipeline, ctx)


LAYER_CONVERTERS["torch"] = torch_convert
