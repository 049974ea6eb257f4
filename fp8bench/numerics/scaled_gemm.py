"""The scaled FP8 and FP4 GEMM calls: fp8bench's :class:`~fp8bench.numerics.quantize.Quantized` operands laid out for,
and fed to, PyTorch's scaled-matmul entry points. Shared by the ``gemm`` and ``grouped_gemm`` workloads, the FP8 linear
layer and the FP8 collective.

``torch._scaled_mm(a, b, scale_a, scale_b)`` computes ``(a * scale_a) @ (b * scale_b)`` with FP32 accumulation and
writes ``out_dtype``. cuBLASLt wants ``a`` row-major ``[M, K]`` and ``b`` column-major ``[K, N]``; an ``[N, K]``
row-major tensor transposed with ``.t()`` is exactly that, which is why every right-hand operand in fp8bench is
quantized in the ``[N, K]`` layout of an ``nn.Linear`` weight.

**Two steps, two phases.** The quantizers keep scales in one natural layout (``[rows, K / block]`` per operand); each
kernel reads its own. :meth:`ScaledGemm.prepare` turns a quantized operand into a :class:`KernelOperand`, exactly what
the kernel reads (E2M1 pairs packed into bytes, scales transposed, padded or swizzled), and belongs to the timed
``quantize`` phase, as Transformer Engine's and torchao's quantize kernels write those layouts themselves.
:meth:`ScaledGemm.__call__` then launches the kernel alone: the pre-quantized ``gemm`` phase dispatches the GEMM op and
views, nothing else (checked by :mod:`fp8bench.verify.phase_audit`).

**Which entry point** is decided once per :class:`ScaledGemm`, from what the installed torch has
(:func:`fp8bench.numerics.torch_api.gemm_entry_point`): ``torch.nn.functional.scaled_mm`` (``aten._scaled_mm_v2``, torch
2.10+) for block scales where it exists, ``torch._scaled_mm`` otherwise. The layouts (each CUDA rule is checked on fake
CUDA tensors by :mod:`fp8bench.verify.cuda_replay`):

* **tensorwise**: two 0-dim FP32 tensors (``torch._scaled_mm``).
* **rowwise**: ``[M, 1]`` for ``a`` and ``[1, N]`` for ``b`` (``torch._scaled_mm``).
* **1x128 / 128x128 FP32 blocks** through ``F.scaled_mm`` (``ScaledBlas.cpp``, ``_scaled_block1x128_block128x128``,
  ``_scaled_block1x128_block1x128``): a 1x128 operand's scales are ``[rows, K/128]`` outer-dim-major, stride
  ``(1, rows)``; a 128x128 right operand's are ``[L4, N/128]`` with stride ``(1, L4)``, ``L4 = round_up(K/128, 4)``
  (the K-blocks padded to a multiple of four; the padding is never read).
* **the same blocks through** ``torch._scaled_mm`` (torch 2.9, ``Blas.cpp``: ``get_joint_scaling``, which checks
  ``b``'s scales transposed): ``a`` as above; a 128x128 ``b``'s scales ``[K/128, N/128]`` with stride ``(1, K/128)``
  (no padding); a 1x128 ``b``'s ``[K/128, N]`` row-major.
* **MX** (E8M0 scales per 32 elements; ``_scaled_mxfp8_mxfp8``): each operand's ``[rows, K/32]`` scales padded to
  ``[round_up(rows, 128), round_up(K/32, 4)]`` and rearranged into cuBLAS's blocked layout (``SWIZZLE_32_4_4``,
  :func:`to_blocked_scales`), flattened; ``F.scaled_mm`` is told the swizzle, ``torch._scaled_mm`` assumes it.
* **4-bit** (E2M1 operands packed two per byte as ``float4_e2m1fn_x2``, :func:`fp8bench.numerics.quantize.pack_e2m1`),
  through ``F.scaled_mm`` only:

  - NVFP4 (``_scaled_nvfp4_nvfp4``): each operand's ``[rows, K/16]`` E4M3 block scales blocked as for MX, *plus* its
    FP32 tensor scale as a second ``TensorWise`` level; the kernel multiplies the two tensor scales into cuBLASLt's
    ``alpha``.
  - MXFP4 (``_scaled_mxfp4_mxfp4``): E8M0 scales blocked as for MX. On CUDA this kernel exists from torch 2.10 (FBGEMM's
    ``f4f4bf16``), while ``torch._scaled_mm`` takes packed FP4 with E8M0 scales on ROCm only.

Fast accumulation (``use_fast_accum``) applies to tensorwise and rowwise kernels; block-scaled recipes accumulate in
full precision (:mod:`fp8bench.core.precisions`), and cuBLASLt refuses the flag with 1x128/128x128 scales
(``CUDABlas.cpp``: ``scaled_gemm``) and with FP4 operands.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from fp8bench.core.precisions import Granularity, ScaledRecipe
from fp8bench.numerics import torch_api
from fp8bench.numerics.quantize import Quantized, pack_e2m1

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


@dataclass(frozen=True)
class KernelOperand:
    """One GEMM operand exactly as its kernel reads it: ``data`` row-major ``[rows, K]`` (FP8) or ``[rows, K/2]``
    (packed FP4), and the entry point's scale tensor(s) in its layout (one, or NVFP4's block and tensor scales).
    For ``F.scaled_mm``, ``recipe`` and ``swizzle`` are the ``ScalingType`` and ``SwizzleType`` lists naming them."""

    data: torch.Tensor
    scales: tuple[torch.Tensor, ...]
    recipe: list[Any] | None = None
    swizzle: list[Any] | None = None


def _check_block(q: Quantized) -> None:
    if q.block not in ((1, 128), (128, 128)):
        raise ValueError(f"no scaled-GEMM kernel takes {q.block[0]}x{q.block[1]} FP32 block scales; "
                         "accepted: 1x128, 128x128")


class ScaledGemm:
    """The scaled GEMM of one scaling kind through the entry point this torch has (see the module docstring).

    ``granularity`` and ``fp4`` name the kind; ``surface`` is the torch to call (default: the installed one,
    :func:`fp8bench.numerics.torch_api.detect`). Raises :class:`ValueError` with the reason when that torch has no entry
    point for the kind (NVFP4 and MXFP4 without ``torch.nn.functional.scaled_mm``). Build it outside any compiled
    region (a layer builds its own at construction): choosing the entry point asks torch what it has.
    """

    @classmethod
    def for_recipe(cls, recipe: ScaledRecipe) -> ScaledGemm:
        """The scaled GEMM of ``recipe``'s kind on the installed torch."""
        return cls(recipe.granularity, recipe.element_bits == 4)

    def __init__(self, granularity: Granularity, fp4: bool, surface: torch_api.TorchSurface | None = None) -> None:
        surface = surface or torch_api.detect()
        api = torch_api.gemm_entry_point(granularity, fp4, surface)
        if api is None:
            kind = ("nvfp4" if granularity is Granularity.NVFP4 else "mxfp4") if fp4 else granularity.value
            raise ValueError(torch_api.entry_point_reason(kind, granularity, fp4, surface))
        self.api, self.granularity, self.fp4 = api, granularity, fp4
        self._scaled_mm = torch_api.entry_point("torch._scaled_mm")
        if api == torch_api.V2:
            import torch.nn.functional as F

            # F.scaled_mm's scaling and swizzle lists, fixed per kind: built once, not on every call.
            self._scaled_mm_v2 = torch_api.entry_point("torch.nn.functional.scaled_mm")
            swizzled, plain = F.SwizzleType.SWIZZLE_32_4_4, F.SwizzleType.NO_SWIZZLE
            self._v2 = {
                Granularity.NVFP4: ([F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise], [swizzled, plain]),
                Granularity.MX: ([F.ScalingType.BlockWise1x32], [swizzled]),
                (1, 128): ([F.ScalingType.BlockWise1x128], None),
                (128, 128): ([F.ScalingType.BlockWise128x128], None),
            }

    def _operand(self, data: torch.Tensor, scales: tuple[torch.Tensor, ...], kind: Any) -> KernelOperand:
        """A :class:`KernelOperand` with ``F.scaled_mm``'s scaling and swizzle lists for ``kind`` (a granularity or
        an FP32 block tile), when that is the entry point."""
        if self.api != torch_api.V2:
            return KernelOperand(data, scales)
        recipe, swizzle = self._v2[kind]
        return KernelOperand(data, scales, recipe, swizzle)

    def prepare(self, q: Quantized, role: str) -> KernelOperand:
        """``q`` laid out as this kernel reads it; ``role`` is ``"lhs"`` (``a`` ``[M, K]``) or ``"rhs"`` (``b``
        ``[N, K]``, passed transposed). This is quantize-phase work (see the module docstring)."""
        if role not in ("lhs", "rhs"):
            raise ValueError(f"operand role must be 'lhs' or 'rhs', got {role!r}")
        g = self.granularity
        data = pack_e2m1(q.data) if self.fp4 else q.data
        if g is Granularity.TENSORWISE:
            return KernelOperand(data, (q.scale,))
        if g is Granularity.ROWWISE:
            return KernelOperand(data, (q.scale if role == "lhs" else q.scale.reshape(1, -1),))
        if g is Granularity.BLOCKWISE:
            _check_block(q)
            return self._operand(data, (self._block_scales(q, role),), q.block)
        if g is Granularity.NVFP4:
            if q.tensor_scale is None:
                raise ValueError("NVFP4 operands carry a tensor scale; got an operand without one")
            scales = (to_blocked_scales(q.scale.to(torch.float8_e4m3fn)), q.tensor_scale.float())
            return self._operand(data, scales, g)
        return self._operand(data, (to_blocked_scales(q.scale.to(torch.float8_e8m0fnu)),), g)

    def _block_scales(self, q: Quantized, role: str) -> torch.Tensor:
        """FP32 1x128/128x128 scales in the layout of this entry point (module docstring)."""
        if self.api == torch_api.V2:
            return _outer_dim_major(q.scale) if q.block == (1, 128) else _k_major_padded(q.scale)
        # torch._scaled_mm checks b's scales transposed against b^T: a 1x128 b as [K/128, N] row-major, a 128x128
        # b as [K/128, N/128] K-block-fastest.
        if role == "lhs":
            return _outer_dim_major(q.scale)
        return _outer_dim_major(q.scale).t() if q.block == (1, 128) else q.scale.contiguous().t()

    def __call__(self, a: KernelOperand, b: KernelOperand, out_dtype: torch.dtype,
                 fast_accum: bool = False) -> torch.Tensor:
        """``a @ b^T`` with both operands already prepared, written in ``out_dtype``: the kernel launch alone."""
        if self.api == torch_api.V1:
            return self._scaled_mm(a.data, b.data.t(), scale_a=a.scales[0], scale_b=b.scales[0],
                                   out_dtype=out_dtype, use_fast_accum=fast_accum)
        return self._scaled_mm_v2(a.data, b.data.t(), list(a.scales), a.recipe, list(b.scales), b.recipe,
                                  swizzle_a=a.swizzle, swizzle_b=b.swizzle, output_dtype=out_dtype,
                                  use_fast_accum=fast_accum)

    def product(self, qa: Quantized, qb: Quantized, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
        """``qa.data @ qb.data^T``: both operands prepared, then the kernel. For a layer, where quantization and the
        GEMM are one timed step; a pipeline that times the GEMM alone prepares in its quantize phase instead."""
        return self(self.prepare(qa, "lhs"), self.prepare(qb, "rhs"), out_dtype, fast_accum)


def scaled_gemm_for(q: Quantized) -> ScaledGemm:
    """The :class:`ScaledGemm` of ``q``'s scaling kind on the installed torch (one per kind, reused)."""
    return _cached_gemm(q.granularity, q.fmt.is_fp4, torch_api.generation())


@lru_cache(maxsize=64)
def _cached_gemm(granularity: Granularity, fp4: bool, generation: int) -> ScaledGemm:
    """One :class:`ScaledGemm` per kind for each state of what torch shows (``generation``)."""
    return ScaledGemm(granularity, fp4)


def fp8_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """``qa.data @ qb.data^T`` with each recipe's scales (:meth:`ScaledGemm.product` of ``qa``'s kind).

    ``qa`` is ``[M, K]`` and ``qb`` is ``[N, K]``. Eager code only: a compiled layer holds its own
    :class:`ScaledGemm`, built before compilation.
    """
    return scaled_gemm_for(qa).product(qa, qb, out_dtype, fast_accum)


class ScaledGroupedGemm:
    """``torch._scaled_grouped_mm``: row group ``e`` of ``A`` ``[M, K]`` times expert ``e``'s weight, for every expert
    at once, with both operands prepared in the quantize phase.

    ``B`` is the expert weights quantized as one ``[G*N, K]`` stack (rows ``e*N:(e+1)*N`` are expert ``e``). Layouts
    (checked on fake CUDA tensors by :mod:`fp8bench.verify.cuda_replay`; rules in
    :mod:`fp8bench.hardware.grouped_rules`):

    * ``A`` row-major ``[M, K]``; ``B`` the ``[G, N, K]`` stack transposed: column-major ``[G, K, N]``;
    * **rowwise**: FP32 scales ``[M]`` for ``A`` and ``[G, N]`` for ``B``;
    * **MX**: E8M0 scales in cuBLAS's blocked layout (:func:`to_blocked_scales`), per group: ``A``'s groups each
      padded to whole 128-row tiles and stacked (``[sum round_up(m_e, 128), round_up(K/32, 4)]``, as torchao's
      ``triton_mx_block_rearrange_2d_M_groups`` lays them out); ``B``'s as ``[G, round_up(N, 128) *
      round_up(K/32, 4)]``, one flattened blocked tile set per expert. Fast accumulation is not sent (MX kernels
      accumulate in full precision).
    """

    def __init__(self, granularity: Granularity, experts: int, bounds: list[tuple[int, int, int]],
                 out_dtype: torch.dtype, fast_accum: bool = False) -> None:
        if granularity not in (Granularity.ROWWISE, Granularity.MX):
            raise ValueError(f"no grouped kernel takes {granularity.value} scales; accepted: rowwise, mx")
        self.granularity, self.experts, self.bounds = granularity, experts, bounds
        self.out_dtype, self.fast_accum = out_dtype, fast_accum
        self._scaled_grouped_mm = torch_api.entry_point("torch._scaled_grouped_mm")

    def prepare_lhs(self, qa: Quantized) -> KernelOperand:
        if self.granularity is Granularity.ROWWISE:
            return KernelOperand(qa.data, (qa.scale.reshape(-1),))
        cols = _round_up(qa.scale.shape[1], BLOCKED_COLS)
        e8m0 = qa.scale.to(torch.float8_e8m0fnu)
        return KernelOperand(qa.data, (torch.cat([to_blocked_scales(e8m0[start:end]).reshape(-1, cols)
                                                  for _e, start, end in self.bounds]),))

    def prepare_rhs(self, qw: Quantized) -> KernelOperand:
        rows_w, k = qw.data.shape
        n = rows_w // self.experts
        data = qw.data.reshape(self.experts, n, k)
        if self.granularity is Granularity.ROWWISE:
            return KernelOperand(data, (qw.scale.reshape(self.experts, n),))
        e8m0 = qw.scale.to(torch.float8_e8m0fnu)
        return KernelOperand(data, (torch.stack([to_blocked_scales(e8m0[e * n:(e + 1) * n])
                                                 for e in range(self.experts)]),))

    def __call__(self, a: KernelOperand, w: KernelOperand, offs: torch.Tensor) -> torch.Tensor:
        fast = {"use_fast_accum": self.fast_accum} if self.granularity is Granularity.ROWWISE else {}
        return self._scaled_grouped_mm(a.data, w.data.transpose(-2, -1), a.scales[0], w.scales[0], offs=offs,
                                       out_dtype=self.out_dtype, **fast)


def emulated_scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """The same product computed by dequantizing both operands and multiplying in FP32 (any device, any recipe).

    It equals what a native kernel with FP32 accumulation returns, up to the order of the additions
    (``fast_accum`` has no meaning here and is accepted for a common signature).
    """
    return (qa.dequantize() @ qb.dequantize().t()).to(out_dtype)
