"""The ``emulated`` backend (reference): every precision as quantize-dequantize around an FP32 GEMM.

Each operand goes through the precision's rounding (FP8 recipes through fp8bench's shared quantizers, BF16/FP16 by
a cast round trip, TF32 by rounding the FP32 mantissa to 10 bits) and back to FP32; the GEMM then runs in FP32 and
the epilogue casts the result to the precision's output dtype. The numbers match what a native kernel with FP32
accumulation computes (up to accumulation order), on any device, which makes this the correctness reference for
custom kernels. Its timings measure the emulation, not FP8 hardware.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.numerics.quantize import cast_stats, quantizer_for
from fp8bench.workloads.gemm import output_dtype

EMULATED = BACKENDS.add("emulated", Backend(
    name="emulated", kind="reference",
    description="quantize-dequantize reference for every recipe, FP32 GEMM, any device",
))


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round FP32 values to TF32 (10 mantissa bits), nearest with ties away from zero, as FP32 tensors."""
    bits = x.float().contiguous().view(torch.int32)
    # Adding half of the dropped range (bit 12 of the 13 dropped bits) then masking rounds to nearest.
    rounded = (bits + 0x1000) & ~0x1FFF
    return rounded.view(torch.float32)


def qdq_float(x: torch.Tensor, precision: FloatPrecision) -> torch.Tensor:
    """Quantize-dequantize to a float precision, returned in FP32."""
    if precision.tf32:
        return round_to_tf32(x)
    return x.to(precision.dtype).float()


def activations(x: torch.Tensor, precision: Precision) -> torch.Tensor:
    """The source tensor in the dtype this precision's activations arrive in."""
    return x.to(precision.activation_dtype)


def emulated_gemm_pipeline(precision: Precision, a: torch.Tensor, b: torch.Tensor,
                           gemm_fp32: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], note: str,
                           names: tuple[str, str] = ("a", "b"), extra: dict[str, Any] | None = None) -> Pipeline:
    """The reference's three phases for a GEMM of ``a`` by ``b`` (both ``[rows, K]``, ``b`` transposed by
    ``gemm_fp32``):

    * quantize: both operands through the shared quantizers for a scaled recipe, or rounded to a float precision;
      either way dequantized to FP32;
    * gemm: ``gemm_fp32(dequantized a, dequantized b)``, an FP32 result;
    * epilogue: the cast to the precision's output dtype.

    ``names`` label the operands' cast statistics."""
    out_dtype = output_dtype(precision)
    state: dict[str, Any] = {}
    if isinstance(precision, ScaledRecipe):
        quant_a, quant_b = quantizer_for(precision, "lhs"), quantizer_for(precision, "rhs")

        def quantize() -> None:
            state["qa"], state["qb"] = quant_a(a), quant_b(b)
            state["da"], state["db"] = state["qa"].dequantize(), state["qb"].dequantize()
    else:
        def quantize() -> None:
            state["da"], state["db"] = qdq_float(a, precision), qdq_float(b, precision)

    def gemm() -> None:
        state["acc"] = gemm_fp32(state["da"], state["db"])

    def epilogue() -> torch.Tensor:
        return state["acc"].to(out_dtype)

    def end_to_end() -> torch.Tensor:
        quantize()
        gemm()
        return epilogue()

    def stats() -> dict[str, Any]:
        if "qa" not in state:
            return {}
        return {names[0]: cast_stats(a, state["qa"]), names[1]: cast_stats(b, state["qb"])}

    end_to_end()  # fills the state every phase reads
    return Pipeline(end_to_end=end_to_end, phases={"quantize": quantize, "gemm": gemm, "epilogue": epilogue},
                    output=end_to_end, prequantized_phases=("gemm", "epilogue"), cast_stats=stats, notes=[note],
                    extra=extra or {})


@EMULATED.builder("gemm")
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    a, b = activations(ctx.inputs["a"], precision), activations(ctx.inputs["b"], precision)
    return emulated_gemm_pipeline(precision, a, b, lambda da, db: da @ db.t(),
                                  "emulated: FP32 GEMM on dequantized operands; timings measure the emulation")
