"""The scaled FP8 GEMM call: one function that feeds fp8bench's :class:`~fp8bench.quantize.Quantized` operands to
PyTorch's scaled-matmul entry points, shared by the ``gemm`` workload and the FP8 linear layer.

``torch._scaled_mm(a, b, scale_a, scale_b)`` computes ``(a * scale_a) @ (b * scale_b)`` with FP32 accumulation and
writes ``out_dtype``. cuBLASLt wants ``a`` row-major ``[M, K]`` and ``b`` column-major ``[K, N]``; an ``[N, K]``
row-major tensor transposed with ``.t()`` is exactly that, which is why every right-hand operand in fp8bench is
quantized in the ``[N, K]`` layout of an ``nn.Linear`` weight.

The shared quantizers keep scales in one natural layout (``[rows, K / block]`` per operand, see
:class:`~fp8bench.quantize.Quantized`); the kernels want each kind laid out its own way, and this module converts
at the call (the CUDA rule each layout follows is checked on fake CUDA tensors by :mod:`fp8bench.conformance`):

* **tensorwise**: two 0-dim FP32 tensors (``torch._scaled_mm``).
* **rowwise**: ``[M, 1]`` for ``a`` and ``[1, N]`` for ``b`` (``torch._scaled_mm``).
* **1x128 / 128x128 FP32 blocks** (``F.scaled_mm``; ``aten/src/ATen/native/cuda/ScaledBlas.cpp``,
  ``_scaled_block1x128_block128x128`` and ``_scaled_block1x128_block1x128``):

  - a 1x128 operand's scales are ``[rows, K/128]`` *outer-dim-major*, stride ``(1, rows)``;
  - a 128x128 right operand's scales are ``[L4, N/128]`` with stride ``(1, L4)``, where ``L4 = round_up(K/128, 4)``:
    the K-blocks padded to a multiple of four (the padding is never read).

* **MX** (E8M0 scales per 32 elements, ``F.scaled_mm``; ``_scaled_mxfp8_mxfp8``): each operand's ``[rows, K/32]``
  scales are padded to ``[round_up(rows, 128), round_up(K/32, 4)]`` and rearranged into cuBLAS's blocked layout
  (``SWIZZLE_32_4_4``, :func:`to_blocked_scales`), flattened and contiguous.

* **4-bit** (E2M1 operands packed two per byte as ``float4_e2m1fn_x2``, :func:`fp8bench.quantize.pack_e2m1`; the
  packed ``[rows, K/2]`` tensors go in as for FP8, ``b`` transposed to column-major):

  - NVFP4 (``F.scaled_mm``, ``_scaled_nvfp4_nvfp4``): each operand's ``[rows, K/16]`` E4M3 block scales in the
    same blocked layout as MX (``SWIZZLE_32_4_4``), *plus* its FP32 tensor scale as a second ``TensorWise`` level:
    ``scale_a=[blocked, s_t]``, ``scale_recipe_a=[BlockWise1x16, TensorWise]``; the kernel multiplies the two
    tensor scales into cuBLASLt's ``alpha``.
  - MXFP4 (``torch._scaled_mm``): E8M0 scales blocked as for MXFP8. ``F.scaled_mm``'s MXFP4 kernel
    (``_scaled_mxfp4_mxfp4``) is ROCm-only in CUDA builds, while ``torch._scaled_mm`` recognises packed FP4 with
    E8M0 scales as ``BlockWise1x32`` (``is_blockwise_1x32_scaling``) and hands it to cuBLASLt.

Fast accumulation (``use_fast_accum``) applies to tensorwise, rowwise and 1x128/128x128 kernels; PyTorch ignores it
for MX (``_scaled_mxfp8_mxfp8`` always passes ``false``), so it is not sent there.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8bench.quantize import Quantized, pack_e2m1
from fp8bench.recipes import Granularity

BLOCKED_ROWS, BLOCKED_COLS = 128, 4  # one tile of cuBLAS's blocked scale layout: 128 rows x 4 scale columns


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def to_blocked_scales(scales: torch.Tensor) -> torch.Tensor:
    """``[rows, cols]`` block scales in cuBLAS's blocked ("32_4_4" swizzled) layout, flattened.

    cuBLAS reads 1D block-scaling factors in tiles of 128 rows x 4 columns, zero-padded to whole tiles, tiles in
    row-major order. Inside a tile, the scale of row ``r`` and column ``c`` sits at offset
    ``(r % 32) * 16 + (r // 32) * 4 + c``: the 128 rows are read as four interleaved groups of 32
    (cuBLAS documentation, "1D Block Scaling Factors Layout").
    """
    rows, cols = scales.shape
    padded_rows, padded_cols = _round_up(rows, BLOCKED_ROWS), _round_up(cols, BLOCKED_COLS)
    padded = torch.zeros(padded_rows, padded_cols, dtype=scales.dtype, device=scales.device)
    padded[:rows, :cols] = scales
    # [row tile, 4 row groups of 32, 32 rows, col tile, 4 cols] -> [row tile, col tile, 32 rows, 4 groups, 4 cols]
    tiles = padded.reshape(padded_rows // BLOCKED_ROWS, 4, 32, padded_cols // BLOCKED_COLS, BLOCKED_COLS)
    return tiles.permute(0, 3, 2, 1, 4).reshape(-1)


def _outer_dim_major(scales: torch.Tensor) -> torch.Tensor:
    """``[rows, kb]`` scales with stride ``(1, rows)``: the K-block index is the slow one."""
    return scales.t().contiguous().t()


def _k_major_padded(scales: torch.Tensor) -> torch.Tensor:
    """``[nb, kb]`` 128x128 weight scales as ``[round_up(kb, 4), nb]`` with stride ``(1, round_up(kb, 4))``."""
    nb, kb = scales.shape
    padded = torch.zeros(nb, _round_up(kb, 4), dtype=scales.dtype, device=scales.device)
    padded[:, :kb] = scales
    return padded.t()


def _block_operand(q: Quantized) -> tuple[torch.Tensor, Any]:
    """The scale tensor and ``ScalingType`` of one FP32-block-scaled operand (1x128 or 128x128 tiles)."""
    import torch.nn.functional as F

    if q.block == (1, 128):
        return _outer_dim_major(q.scale), F.ScalingType.BlockWise1x128
    if q.block == (128, 128):
        return _k_major_padded(q.scale), F.ScalingType.BlockWise128x128
    raise ValueError(f"no scaled-GEMM kernel takes {q.block[0]}x{q.block[1]} FP32 block scales; "
                     "accepted: 1x128, 128x128")


def fp8_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """``qa.data @ qb.data^T`` with each recipe's scales, through PyTorch's scaled-GEMM entry points.

    ``qa`` is ``[M, K]`` and ``qb`` is ``[N, K]``; ``qb.data.t()`` is then the column-major ``[K, N]`` operand
    cuBLASLt needs. ``fast_accum`` selects the tensor cores' fast accumulation where the kernel has it.
    """
    g = qa.granularity
    if qa.fmt.is_fp4:
        return _fp4_scaled_mm(qa, qb, out_dtype)
    if g is Granularity.TENSORWISE:
        return torch._scaled_mm(qa.data, qb.data.t(), scale_a=qa.scale, scale_b=qb.scale, out_dtype=out_dtype,
                                use_fast_accum=fast_accum)
    if g is Granularity.ROWWISE:
        return torch._scaled_mm(qa.data, qb.data.t(), scale_a=qa.scale, scale_b=qb.scale.reshape(1, -1),
                                out_dtype=out_dtype, use_fast_accum=fast_accum)
    import torch.nn.functional as F

    if g is Granularity.BLOCKWISE:
        (sa, kind_a), (sb, kind_b) = _block_operand(qa), _block_operand(qb)
        return F.scaled_mm(qa.data, qb.data.t(), sa, kind_a, sb, kind_b, output_dtype=out_dtype,
                           use_fast_accum=fast_accum)
    e8m0 = torch.float8_e8m0fnu
    swizzled = F.SwizzleType.SWIZZLE_32_4_4
    return F.scaled_mm(qa.data, qb.data.t(), to_blocked_scales(qa.scale.to(e8m0)), F.ScalingType.BlockWise1x32,
                       to_blocked_scales(qb.scale.to(e8m0)), F.ScalingType.BlockWise1x32, swizzle_a=swizzled,
                       swizzle_b=swizzled, output_dtype=out_dtype)


def fp8_scaled_grouped_mm(qa: Quantized, qw: Quantized, experts: int, offs: torch.Tensor,
                          bounds: list[tuple[int, int, int]], out_dtype: torch.dtype,
                          fast_accum: bool = False) -> torch.Tensor:
    """``torch._scaled_grouped_mm``: row group ``e`` of ``qa`` ``[M, K]`` times expert ``e``'s weight, for every
    expert at once.

    ``qw`` is the expert weights quantized as one ``[G*N, K]`` stack (rows ``e*N:(e+1)*N`` are expert ``e``);
    ``offs`` the int32 group ends and ``bounds`` the same groups as ``(expert, first row, end row)`` (known when the
    case is built, so no device-to-host copy happens per call). Layouts (checked on fake CUDA tensors by
    :mod:`fp8bench.conformance`; rules in :mod:`fp8bench.grouped_rules`):

    * ``A`` row-major ``[M, K]``; ``B`` the ``[G, N, K]`` stack transposed: column-major ``[G, K, N]``;
    * **rowwise**: FP32 scales ``[M]`` for ``A`` and ``[G, N]`` for ``B``;
    * **MX**: E8M0 scales in cuBLAS's blocked layout (:func:`to_blocked_scales`), per group: ``A``'s groups each
      padded to whole 128-row tiles and stacked (``[sum round_up(m_e, 128), round_up(K/32, 4)]``, as torchao's
      ``triton_mx_block_rearrange_2d_M_groups`` lays them out); ``B``'s as ``[G, round_up(N, 128) *
      round_up(K/32, 4)]``, one flattened blocked tile set per expert. Fast accumulation is not sent (MX kernels
      accumulate in full precision).
    """
    rows_w, k = qw.data.shape
    n = rows_w // experts
    mat_b = qw.data.reshape(experts, n, k).transpose(-2, -1)
    if qa.granularity is Granularity.ROWWISE:
        return torch._scaled_grouped_mm(qa.data, mat_b, qa.scale.reshape(-1), qw.scale.reshape(experts, n),
                                        offs=offs, out_dtype=out_dtype, use_fast_accum=fast_accum)
    if qa.granularity is not Granularity.MX:
        raise ValueError(f"no grouped kernel takes {qa.granularity.value} scales; accepted: rowwise, mx")
    e8m0 = torch.float8_e8m0fnu
    cols = _round_up(qa.scale.shape[1], BLOCKED_COLS)
    scale_a = torch.cat([to_blocked_scales(qa.scale[start:end].to(e8m0)).reshape(-1, cols)
                         for _e, start, end in bounds])
    scale_b = torch.stack([to_blocked_scales(qw.scale[e * n:(e + 1) * n].to(e8m0)) for e in range(experts)])
    return torch._scaled_grouped_mm(qa.data, mat_b, scale_a, scale_b, offs=offs, out_dtype=out_dtype)


def _fp4_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype) -> torch.Tensor:
    """NVFP4 or MXFP4 operands through PyTorch (see the module docstring); FP4 has no fast accumulation."""
    a, b = pack_e2m1(qa.data), pack_e2m1(qb.data)
    if qa.granularity is Granularity.MX:
        e8m0 = torch.float8_e8m0fnu
        return torch._scaled_mm(a, b.t(), scale_a=to_blocked_scales(qa.scale.to(e8m0)),
                                scale_b=to_blocked_scales(qb.scale.to(e8m0)), out_dtype=out_dtype)
    import torch.nn.functional as F

    if qa.tensor_scale is None or qb.tensor_scale is None:
        raise ValueError("NVFP4 operands carry a tensor scale; got an operand without one")
    e4m3 = torch.float8_e4m3fn
    recipe = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
    swizzle = [F.SwizzleType.SWIZZLE_32_4_4, F.SwizzleType.NO_SWIZZLE]
    return F.scaled_mm(a, b.t(), [to_blocked_scales(qa.scale.to(e4m3)), qa.tensor_scale.float()], recipe,
                       [to_blocked_scales(qb.scale.to(e4m3)), qb.tensor_scale.float()], recipe,
                       swizzle_a=swizzle, swizzle_b=swizzle, output_dtype=out_dtype)


def emulated_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """The same product computed by dequantizing both operands and multiplying in FP32 (any device, any recipe).

    It equals what a native kernel with FP32 accumulation returns, up to the order of the additions
    (``fast_accum`` has no meaning here and is accepted for a common signature).
    """
    return (qa.dequantize() @ qb.dequantize().t()).to(out_dtype)
