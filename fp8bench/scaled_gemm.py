"""The scaled FP8 GEMM call: one function that feeds fp8bench's :class:`~fp8bench.quantize.Quantized` operands to
PyTorch's scaled-matmul entry points, shared by the ``gemm`` workload and the FP8 linear layer.

``torch._scaled_mm(a, b, scale_a, scale_b)`` computes ``(a * scale_a) @ (b * scale_b)`` with FP32 accumulation and
writes ``out_dtype``. cuBLASLt wants ``a`` row-major ``[M, K]`` and ``b`` column-major ``[K, N]``; an ``[N, K]``
row-major tensor transposed with ``.t()`` is exactly that, which is why every right-hand operand in fp8bench is
quantized in the ``[N, K]`` layout of an ``nn.Linear`` weight. Scales are the dequantization scales the shared
quantizers produce:

* tensorwise: two 0-dim FP32 tensors;
* rowwise: ``[M, 1]`` for ``a`` and ``[1, N]`` for ``b`` (one per output row and column);
* blockwise (1x128 / 128x128) and MX (1x32, E8M0) go through ``torch.nn.functional.scaled_mm`` with explicit
  scaling types, where the device has those kernels.
"""

from __future__ import annotations

import torch

from fp8bench.quantize import Quantized
from fp8bench.recipes import Granularity


def fp8_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype) -> torch.Tensor:
    """``qa.data @ qb.data^T`` with each recipe's scales, through PyTorch's scaled-GEMM entry points.

    ``qa`` is ``[M, K]`` and ``qb`` is ``[N, K]``; ``qb.data.t()`` is then the column-major ``[K, N]`` operand
    cuBLASLt needs. Rowwise scales go in as ``[M, 1]`` and ``[1, N]``.
    """
    g = qa.granularity
    if g is Granularity.TENSORWISE:
        return torch._scaled_mm(qa.data, qb.data.t(), scale_a=qa.scale, scale_b=qb.scale, out_dtype=out_dtype)
    if g is Granularity.ROWWISE:
        return torch._scaled_mm(qa.data, qb.data.t(), scale_a=qa.scale, scale_b=qb.scale.reshape(1, -1),
                                out_dtype=out_dtype)
    import torch.nn.functional as F

    scaling = F.ScalingType
    if g is Granularity.BLOCKWISE:
        # 1x128 activation scales are consumed K-major ("outer-dim-major") by the Hopper kernels.
        sa = qa.scale.t().contiguous().t()
        return F.scaled_mm(qa.data, qb.data.t(), sa, scaling.BlockWise1x128, qb.scale, scaling.BlockWise128x128,
                           output_dtype=out_dtype)
    e8m0 = torch.float8_e8m0fnu
    return F.scaled_mm(qa.data, qb.data.t(), qa.scale.to(e8m0), scaling.BlockWise1x32, qb.scale.to(e8m0),
                       scaling.BlockWise1x32, swizzle_a=F.SwizzleType.NO_SWIZZLE,
                       swizzle_b=F.SwizzleType.NO_SWIZZLE, output_dtype=out_dtype)


def emulated_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype) -> torch.Tensor:
    """The same product computed by dequantizing both operands and multiplying in FP32 (any device, any recipe).

    It equals what a native kernel with FP32 accumulation returns, up to the order of the additions.
    """
    return (qa.dequantize() @ qb.dequantize().t()).to(out_dtype)
