"""The ``numpy`` backend: the FP32 GEMM through NumPy's own BLAS on the CPU, a baseline from outside PyTorch."""

from __future__ import annotations

import torch

from fp8bench.core.devices import Device
from fp8bench.core.libraries import Library
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import Precision

# NumPy 1.22 is the oldest release with the ``ndarray @`` semantics and BLAS dispatch used here.
NUMPY_LIBRARY = Library("numpy", (1, 22))

NUMPY = BACKENDS.add("numpy", Backend(
    name="numpy", kind="custom", description="NumPy's BLAS: FP32 GEMM on the CPU",
    device_kinds=("cpu",), requires=(NUMPY_LIBRARY,),
))


def gemm_support(precision: Precision, device: Device) -> str | None:
    """NumPy has no scaled or half-precision GEMM: FP32 only."""
    return None if precision.name == "fp32" else "NumPy's GEMM runs fp32 only"


@NUMPY.builder("gemm", supports=gemm_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    a, b = ctx.inputs["a"].numpy(), ctx.inputs["b"].numpy()  # FP32 CPU tensors share their memory: no copy

    def gemm() -> torch.Tensor:
        return torch.from_numpy(a @ b.T)

    return Pipeline(end_to_end=gemm, phases={"gemm": gemm}, output=gemm, prequantized_phases=("gemm",),
                    notes=["NumPy BLAS, FP32 operands: no quantize phase"])
