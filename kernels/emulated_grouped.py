"""``grouped_gemm`` on the ``emulated`` backend: the per-expert loop reference for every precision, any device.

Operands go through the precision's rounding (FP8 recipes through the shared quantizers, exactly the operands and
scales the ``torch`` backend feeds its kernels; BF16 by a cast round trip), then each non-empty expert's rows are
multiplied by its weight in FP32 into one accumulator, and the epilogue casts it to the output dtype. The result
matches a native kernel with FP32 accumulation up to the order of additions. Timings measure the emulation.

The emulation is a loop by construction, so it runs ``impl=loop`` shapes and refuses ``impl=grouped`` ones with
the reason rather than record the same loop twice under two names.
"""

from __future__ import annotations

import torch

from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported
from fp8bench.kernels.emulated import EMULATED, activations, emulated_gemm_pipeline
from fp8bench.workloads.grouped_gemm import group_bounds, routing_fields


@EMULATED.builder("grouped_gemm")
def build_grouped_gemm(ctx: BuildContext) -> Pipeline:
    if ctx.shape["impl"] != "loop":
        raise Unsupported("the emulated backend is the per-expert loop reference: it runs impl=loop shapes only")
    precision = ctx.precision
    experts, n, k = ctx.inputs["w"].shape
    a = activations(ctx.inputs["a"], precision)
    w = activations(ctx.inputs["w"].reshape(experts * n, k), precision)
    bounds = group_bounds(ctx.inputs["offs"])
    acc = torch.zeros(a.shape[0], n, dtype=torch.float32, device=a.device)

    def per_expert(da: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        for e, start, end in bounds:
            torch.mm(da[start:end], dw[e * n:(e + 1) * n].t(), out=acc[start:end])
        return acc

    return emulated_gemm_pipeline(
        precision, a, w, per_expert,
        "emulated: per-expert FP32 GEMMs on rounded operands; timings measure the emulation",
        names=("a", "w"), extra=routing_fields(ctx.shape))
