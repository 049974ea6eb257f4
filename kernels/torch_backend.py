"""The ``torch`` backend (vendor): PyTorch's own GEMM kernels.

* FP32, TF32, BF16, FP16: ``torch.matmul`` (cuBLAS on CUDA, oneDNN/MKL on the CPU). TF32 is a CUDA tensor-core
  mode; on the CPU it is refused, because ``torch.matmul`` there would silently run FP32.
* FP8 tensorwise, delayed and rowwise: ``torch._scaled_mm`` (cuBLASLt on CUDA; a reference kernel on the CPU),
  with the operands quantized by fp8bench's shared quantizers.
* FP8 blockwise, MXFP8 and the 4-bit recipes: ``torch.nn.functional.scaled_mm`` with block scaling types where this
  torch has it, else ``torch._scaled_mm`` for the FP8 block recipes (:mod:`fp8bench.numerics.scaled_gemm`); where the
  device lacks the kernels, the case is skipped with the capability rule or PyTorch's own refusal as the reason.

The ``quantize`` phase ends with both operands laid out as the kernel reads them (:meth:`ScaledGemm.prepare`); the
``gemm`` phase is the kernel launch alone.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, refusals
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import recipe_gemm_reason
from fp8bench.numerics.quantize import cast_stats, quantizer_for
from fp8bench.numerics.scaled_gemm import ScaledGemm, fp8_scaled_mm  # noqa: F401  (re-exported: other backends use it)
from fp8bench.workloads.gemm import output_dtype

# What ATen raises when it refuses a scaled GEMM: ValueError (TORCH_CHECK_VALUE, e.g. "Invalid scaling
# configuration."), RuntimeError (TORCH_CHECK on shapes, strides, scale dtypes), NotImplementedError (no kernel for
# the device or dtype), TypeError (an argument the binding does not take on this build).
ATEN_REFUSALS: tuple[type[BaseException], ...] = (ValueError, RuntimeError, NotImplementedError, TypeError)

TORCH = BACKENDS.add("torch", Backend(
    name="torch", kind="vendor",
    description="torch.matmul and torch._scaled_mm / F.scaled_mm (cuBLASLt on CUDA, reference kernels on CPU)",
    runs_eager_pipelines=True,  # a workload that brings its own PyTorch pipeline runs here with no builder added
))


def _gemm_support(precision: Precision, device: Device) -> str | None:
    if isinstance(precision, FloatPrecision):
        if precision.tf32 and not device.is_cuda:
            return "TF32 is a CUDA tensor-core mode; torch.matmul on the CPU would run plain FP32"
        return None
    assert isinstance(precision, ScaledRecipe)
    return recipe_gemm_reason(device, precision)



@TORCH.builder("gemm", supports=_gemm_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    a_src, b_src = ctx.inputs["a"], ctx.inputs["b"]
    if isinstance(precision, FloatPrecision):
        a, b = a_src.to(precision.dtype), b_src.to(precision.dtype)

        def matmul() -> torch.Tensor:
            with _tf32(precision.tf32):
                return torch.matmul(a, b.t())

        return Pipeline(end_to_end=matmul, phases={"gemm": matmul}, output=matmul, prequantized_phases=("gemm",),
                        notes=["inputs arrive in the GEMM dtype: no quantize phase; epilogue fused"])

    assert isinstance(precision, ScaledRecipe)
    act_dtype = precision.activation_dtype
    a, b = a_src.to(act_dtype), b_src.to(act_dtype)
    quant_a, quant_b = quantizer_for(precision, "lhs"), quantizer_for(precision, "rhs")
    refused = f"torch refused {precision.name} on {ctx.device}"
    with refusals(refused, ATEN_REFUSALS):  # a torch without an entry point for the recipe: ValueError
        kernel = ScaledGemm.for_recipe(precision)
    out_dtype = output_dtype(precision)
    state: dict[str, Any] = {}

    def quantize() -> None:
        # Quantization ends with the operands in the layout the kernel reads (packed, scales swizzled), as vendors'
        # quantize kernels write them, so that the gemm phase times the kernel alone.
        state["qa"], state["qb"] = quant_a(a), quant_b(b)
        state["ka"], state["kb"] = kernel.prepare(state["qa"], "lhs"), kernel.prepare(state["qb"], "rhs")

    def gemm() -> torch.Tensor:
        return kernel(state["ka"], state["kb"], out_dtype, precision.fast_accum)

    def end_to_end() -> torch.Tensor:
        quantize()
        return gemm()

    # Let PyTorch itself accept or refuse this scaling layout before anything is timed.
    with refusals(refused, ATEN_REFUSALS):
        end_to_end()

    def stats() -> dict[str, Any]:
        return {"a": cast_stats(a, state["qa"]), "b": cast_stats(b, state["qb"])}

    return Pipeline(end_to_end=end_to_end, phases={"quantize": quantize, "gemm": gemm}, output=end_to_end,
                    prequantized_phases=("gemm",), cast_stats=stats,
                    notes=[f"activations arrive in {str(act_dtype).removeprefix('torch.')}; "
                           "epilogue (scales, output cast) fused into the scaled GEMM"])


class _tf32:
    """Set cuBLAS's TF32 switch for one call and restore it (a no-op on the CPU)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __enter__(self) -> None:
        self.saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.enabled

    def __exit__(self, *exc: object) -> None:
        torch.backends.cuda.matmul.allow_tf32 = self.saved
