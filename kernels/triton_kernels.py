"""Triton FP8 kernels: fused quantizers and a scaled FP8 GEMM.

Quantizing a tensor for an FP8 GEMM is a memory-bound pass (read BF16, write one byte per element plus a few
scales) whose cost the end-to-end time must include. The kernels here fuse its three steps, amax, scale and
saturating cast, so each element is read from memory as few times as the scaling granularity allows:

* **rowwise** and **blockwise** (``1x128`` activation tiles, ``128x128`` weight tiles): every scale depends only
  on values one program owns, so one launch reads a tile, reduces its amax, derives the scale and writes FP8.
* **tensorwise**: the scale depends on every element, which needs a grid-wide barrier Triton does not offer.
  It takes two launches: a strided amax pass writing one partial maximum per program, then a cast pass in which
  every program reduces those few partials (at most :data:`_MAX_PARTIALS`) itself. No atomics, so the result is
  deterministic. Delayed scaling uses the same two launches, the cast reading the scale from the amax history.

The scale semantics are fp8bench's shared ones (:mod:`fp8bench.numerics.quantize`): dequantization scale
``s = max(amax, 1e-12) * 2**margin / fmt.max`` and ``fp8 = saturate(x / s)`` with round-to-nearest-even. The
division is ``div_rn`` (IEEE, correctly rounded) because Triton's default fp32 ``/`` on NVIDIA GPUs is an
approximate instruction that would make a few elements round differently from the reference.

The GEMM computes ``C[M, N] = (A[M, K] @ B[N, K]^T) * scales`` with FP8 operands, an FP32 accumulator and a BF16
output. Scales are applied once in the epilogue, on the
accumulator: a 0-dim scale per operand (tensorwise) or ``[M]`` and ``[N]`` vectors (rowwise). Block scales
(``1x128`` on A, ``128x128`` on B) change along K, so each 128-deep K step is its own partial product, scaled
and then accumulated in FP32 (DeepSeek-V3's recipe; it costs one extra multiply-add per K step). Tiles are visited
in groups of ``GROUP_M`` row-tiles so neighbouring programs share B tiles in L2. The same kernel is persistent
when launched with fewer programs than tiles: each program then walks tiles ``pid, pid + P, ...``, which removes
the launch tail and the per-tile prologue when tiles outnumber the SMs.

Accumulation: Hopper's FP8 wgmma instructions add their products into the accumulator in reduced precision.
Triton promotes to a true FP32 sum only as often as ``tl.dot``'s ``max_num_imprecise_acc`` says: an FP8 dot whose
value is at most its K tile accumulates into a zeroed partial and adds it to the carried accumulator with FP32 adds
every that many elements (``WarpGroupDotOp::needsPartialAccumulator`` and the WGMMA lowering's ``convertDot``).
Left unset, the value is the backend's default, ``2**30`` on compute capability 9.0 (``backends/nvidia/compiler.py``
``parse_options``, Triton 3.0 to 3.9; ``language/semantic.py`` ``dot``): never promoted, the whole K loop in reduced
precision, which is the fast accumulation of cuBLAS. So a recipe's full accumulation passes ``max_num_imprecise_acc
= BLOCK_K`` (one FP32 add per K tile: every 128 elements on the Hopper configurations, DeepSeek-V3's interval), and
fast accumulation leaves Triton's default. Block-scaled dots start from zero each 128-deep step and the kernel adds
them in FP32, so they are promoted every 128 elements either way. The argument's numerical effect is in sm_90's
WGMMA path, and fp8bench passes it only there (other architectures' default is 0; Triton's target-independent
combine pass also reads it, folding ``d + dot(a, b)`` into one dot only when it is 0).

On CUDA, the GEMM autotunes over tile configurations chosen for Hopper's FP8 tensor cores (128-wide K steps,
8 warps for the big tiles); the first call of a shape pays for the autotuning. On the CPU, the same kernel bodies
run under Triton's interpreter (``TRITON_INTERPRET=1`` at decoration time) with fixed small tiles: that checks
correctness only, and its timings mean nothing.

Importing this module never fails: without Triton, :data:`TRITON_IMPORT_ERROR` says why and every entry point
raises :class:`RuntimeError` with that reason.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

from fp8bench.core.formats import ElementFormat
from fp8bench.core.precisions import Granularity
from fp8bench.numerics.quantize import Quantized

# Interpreted or compiled Triton was chosen when the fp8bench.kernels package loaded (see its docstring).

try:  # Guarded: the triton backend reports itself unavailable instead of failing the import.
    import triton
    import triton.language as tl

    TRITON_IMPORT_ERROR: str | None = None
    INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
except Exception as exc:  # noqa: BLE001 - any import failure means "no Triton", with its message
    triton = None  # type: ignore[assignment]
    tl = None  # type: ignore[assignment]
    TRITON_IMPORT_ERROR = f"triton import failed: {type(exc).__name__}: {exc}"
    INTERPRETED = False

# The smallest amax a scale is derived from; the same floor as fp8bench.numerics.quantize (keeps all-zero groups
# finite).
AMAX_FLOOR = 1e-12
# Upper bound on programs of the tensorwise amax pass: the cast pass re-reduces this many partials per program,
# which costs a few KiB of L2 reads against the tile of elements each program casts.
_MAX_PARTIALS = 1024
_AMAX_BLOCK = 4096  # elements per amax-pass step and per cast-pass program: large enough to stream at full rate

# Tile configurations for the FP8 GEMM on Hopper (H100/H200): FP8 wgmma wants K steps of at least 32 and runs best
# with 128; the large tiles need 8 warps (two warpgroups) to hide the loads; 3-4 stages fit in 228 KiB of shared
# memory at these tile sizes (a 128x256x128 FP8 stage is 48 KiB). The small tiles serve skinny and small shapes.
HOPPER_GEMM_CONFIGS: tuple[dict[str, int], ...] = (
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 5},
)
# Interpreter tiles: the smallest legal dot shapes, so odd test shapes span several tiles and hit every mask.
INTERPRETER_GEMM_CONFIG: dict[str, int] = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2}
_ROW_TILE = 16  # rows per program of the rowwise and 1xN blockwise quantizers
_COL_TILE = 128  # columns per step of the rowwise quantizer's two sweeps


if triton is not None:

    @triton.jit
    def _round_to_fp8_grid(y, MBITS: tl.constexpr, EMIN: tl.constexpr):
        """Round FP32 ``y`` (already clamped to the format's range) to the nearest FP8 value, ties to even.

        The FP8 grid step at ``y`` is ``2**(max(e, EMIN) - MBITS)`` where ``e`` is ``y``'s binary exponent
        (below the smallest normal exponent the step stays fixed: subnormals). Dividing by a power of two is
        exact, and adding then subtracting ``1.5 * 2**23`` rounds a small FP32 value to an integer, ties to even.
        The later cast to FP8 is then exact, whatever rounding the conversion instruction uses.
        """
        bits = y.to(tl.int32, bitcast=True)
        e = ((bits >> 23) & 0xFF) - 127
        e = tl.maximum(e, EMIN) - MBITS
        step = ((e + 127) << 23).to(tl.float32, bitcast=True)
        inv_step = ((127 - e) << 23).to(tl.float32, bitcast=True)
        q = y * inv_step
        q = (q + 12582912.0) - 12582912.0
        return q * step

    def _amax_partials(x_ptr, partial_ptr, numel, num_progs, BLOCK: tl.constexpr):
        """Program ``p`` writes ``max |x|`` over chunks ``p, p + P, ...`` of ``BLOCK`` elements."""
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(pid * BLOCK, numel, num_progs * BLOCK):
            x = tl.load(x_ptr + start + offs, mask=start + offs < numel, other=0.0).to(tl.float32)
            acc = tl.maximum(acc, tl.abs(x))
        tl.store(partial_ptr + pid, tl.max(acc, axis=0))

    def _cast_tensorwise(x_ptr, y_ptr, partial_ptr, n_partials, scale_ptr, amax_ptr, numel, fmax, headroom,
                         HAS_SCALE: tl.constexpr, OUT_DTYPE: tl.constexpr, MBITS: tl.constexpr,
                         EMIN: tl.constexpr, BLOCK: tl.constexpr, PARTIALS: tl.constexpr):
        """Reduce the partial amaxes, derive the scale (or read the given one) and cast one ``BLOCK``."""
        pid = tl.program_id(0)
        p_offs = tl.arange(0, PARTIALS)
        amax = tl.max(tl.load(partial_ptr + p_offs, mask=p_offs < n_partials, other=0.0), axis=0)
        scale = tl.load(scale_ptr) if HAS_SCALE else tl.math.div_rn(tl.maximum(amax, 1e-12) * headroom, fmax)
        if pid == 0:
            tl.store(amax_ptr, amax)
            if not HAS_SCALE:
                tl.store(scale_ptr, scale)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = _round_to_fp8_grid(tl.clamp(tl.math.div_rn(x, scale), -fmax, fmax), MBITS, EMIN)
        tl.store(y_ptr + offs, y.to(OUT_DTYPE), mask=mask)

    def _quantize_rowwise(x_ptr, y_ptr, scale_ptr, rows, cols, stride_x, stride_y, fmax,
                          OUT_DTYPE: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, ROWS: tl.constexpr,
                          COLS: tl.constexpr):
        """One scale per row: sweep the row once for its amax, then again to cast (the row stays in L2)."""
        pid = tl.program_id(0)
        r = pid * ROWS + tl.arange(0, ROWS)
        c = tl.arange(0, COLS)
        rmask = r < rows
        amax = tl.zeros([ROWS], dtype=tl.float32)
        for c0 in range(0, cols, COLS):
            m = rmask[:, None] & (c0 + c < cols)[None, :]
            x = tl.load(x_ptr + r[:, None] * stride_x + (c0 + c)[None, :], mask=m, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))
        scale = tl.math.div_rn(tl.maximum(amax, 1e-12), fmax)
        tl.store(scale_ptr + r, scale, mask=rmask)
        for c0 in range(0, cols, COLS):
            m = rmask[:, None] & (c0 + c < cols)[None, :]
            x = tl.load(x_ptr + r[:, None] * stride_x + (c0 + c)[None, :], mask=m, other=0.0).to(tl.float32)
            y = _round_to_fp8_grid(tl.clamp(tl.math.div_rn(x, scale[:, None]), -fmax, fmax), MBITS, EMIN)
            tl.store(y_ptr + r[:, None] * stride_y + (c0 + c)[None, :], y.to(OUT_DTYPE), mask=m)

    def _quantize_blockwise(x_ptr, y_ptr, scale_ptr, rows, stride_x, stride_y, stride_s, fmax,
                            OUT_DTYPE: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                            TILE_ROWS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        """One program: ``TILE_ROWS`` rows by one block of columns, fully fused.

        ``BLOCK_ROWS == 1`` (``1xBLOCK_COLS`` tiles): one scale per row of the tile. Otherwise the tile is one
        ``BLOCK_ROWS x BLOCK_COLS`` block (``TILE_ROWS == BLOCK_ROWS``) with a single scale.
        """
        pid_r = tl.program_id(0)
        pid_c = tl.program_id(1)
        r = pid_r * TILE_ROWS + tl.arange(0, TILE_ROWS)
        c = pid_c * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        rmask = r < rows
        m = rmask[:, None]
        x = tl.load(x_ptr + r[:, None] * stride_x + c[None, :], mask=m, other=0.0).to(tl.float32)
        if BLOCK_ROWS == 1:
            amax = tl.max(tl.abs(x), axis=1)
            scale = tl.math.div_rn(tl.maximum(amax, 1e-12), fmax)
            tl.store(scale_ptr + r * stride_s + pid_c, scale, mask=rmask)
            y = tl.math.div_rn(x, scale[:, None])
        else:
            amax = tl.max(tl.max(tl.abs(x), axis=1), axis=0)
            scale = tl.math.div_rn(tl.maximum(amax, 1e-12), fmax)
            tl.store(scale_ptr + pid_r * stride_s + pid_c, scale)
            y = tl.math.div_rn(x, scale)
        y = _round_to_fp8_grid(tl.clamp(y, -fmax, fmax), MBITS, EMIN)
        tl.store(y_ptr + r[:, None] * stride_y + c[None, :], y.to(OUT_DTYPE), mask=m)

    def _scaled_mm(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
                   stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk, SCALES: tl.constexpr,
                   SCALE_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, PROMOTE: tl.constexpr):
        """``C = (A @ B^T) * scales``; a program handles tiles ``pid, pid + P, ...`` (persistent when P < tiles).

        ``SCALES``: 0 tensorwise, 1 rowwise (both applied once, on the final accumulator), 2 blockwise: A has one
        scale per row and ``SCALE_BLOCK`` columns, B one per ``SCALE_BLOCK x SCALE_BLOCK`` tile, so each K step
        (``BLOCK_K == SCALE_BLOCK``) is a separate FP32 partial product scaled before it is accumulated.
        ``PROMOTE``: full accumulation, the carried accumulator gets an FP32 add after every K tile (module
        docstring, "Accumulation"); otherwise Triton's default, the fast mode on sm_90.
        """
        pid = tl.program_id(0)
        n_progs = tl.num_programs(0)
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        per_group = GROUP_M * tiles_n
        for tile in range(pid, tiles_m * tiles_n, n_progs):
            # Grouped order: GROUP_M row-tiles sweep the same column-tiles together, reusing B from L2.
            group = tile // per_group
            first_m = group * GROUP_M
            group_rows = min(tiles_m - first_m, GROUP_M)
            pid_m = first_m + (tile % per_group) % group_rows
            pid_n = (tile % per_group) // group_rows
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            mmask = offs_m < M
            nmask = offs_n < N
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kmask = k0 + offs_k < K
                a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                            mask=mmask[:, None] & kmask[None, :], other=0.0)
                b = tl.load(b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                            mask=kmask[:, None] & nmask[None, :], other=0.0)
                if SCALES == 2:
                    kb = k0 // SCALE_BLOCK
                    sa = tl.load(sa_ptr + offs_m * stride_sam + kb * stride_sak, mask=mmask, other=0.0)
                    sb = tl.load(sb_ptr + (offs_n // SCALE_BLOCK) * stride_sbn + kb * stride_sbk, mask=nmask,
                                 other=0.0)
                    acc += tl.dot(a, b, out_dtype=tl.float32) * sa[:, None] * sb[None, :]
                elif PROMOTE:
                    acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K, out_dtype=tl.float32)
                else:
                    acc = tl.dot(a, b, acc, out_dtype=tl.float32)
            if SCALES == 1:
                sa = tl.load(sa_ptr + offs_m * stride_sam, mask=mmask, other=0.0)
                sb = tl.load(sb_ptr + offs_n * stride_sbn, mask=nmask, other=0.0)
                acc = acc * sa[:, None] * sb[None, :]
            elif SCALES == 0:
                acc = acc * (tl.load(sa_ptr) * tl.load(sb_ptr))
            tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.bfloat16),
                     mask=mmask[:, None] & nmask[None, :])


@dataclass(frozen=True)
class _KernelSet:
    amax_partials: Any
    cast_tensorwise: Any
    quantize_rowwise: Any
    quantize_blockwise: Any
    scaled_mm: Any  # autotuned on CUDA, plain under the interpreter


_KERNELS: _KernelSet | None = None
_DECORATE_LOCK = threading.Lock()


def _decorate() -> _KernelSet:
    """``triton.jit`` the kernel bodies once; on CUDA the GEMM is wrapped in the Hopper autotuner."""
    global _KERNELS
    with _DECORATE_LOCK:
        if _KERNELS is None:
            mm = triton.jit(_scaled_mm)
            if not INTERPRETED:
                configs = [triton.Config({k: v for k, v in c.items() if k.isupper()}, num_warps=c["num_warps"],
                                         num_stages=c["num_stages"]) for c in HOPPER_GEMM_CONFIGS]
                mm = triton.autotune(configs=configs, key=["M", "N", "K", "SCALES", "PROMOTE"])(mm)
            _KERNELS = _KernelSet(triton.jit(_amax_partials), triton.jit(_cast_tensorwise),
                                  triton.jit(_quantize_rowwise), triton.jit(_quantize_blockwise), mm)
        return _KERNELS


def best_config() -> dict[str, int] | None:
    """The tiles Triton's autotuner chose for the GEMM it last launched (CUDA): its ``BLOCK_*``/``GROUP_M``
    meta-parameters with ``num_warps`` and ``num_stages``. ``None`` before any tuned launch, and under the
    interpreter (fixed tiles, no autotuner). ``Autotuner.run`` keeps its choice in ``best_config``."""
    chosen = getattr(_KERNELS.scaled_mm, "best_config", None) if _KERNELS is not None else None
    if chosen is None:
        return None
    return {**chosen.kwargs, "num_warps": chosen.num_warps, "num_stages": chosen.num_stages}


def device_reason(device: torch.device) -> str | None:
    """Why the kernels cannot run on tensors of ``device`` in this process (``None``: they can)."""
    if TRITON_IMPORT_ERROR is not None:
        return TRITON_IMPORT_ERROR
    if device.type == "cuda" and INTERPRETED:
        return "Triton runs in interpreter mode in this process (TRITON_INTERPRET=1); CUDA kernels need it unset"
    if device.type != "cuda" and not INTERPRETED:
        return ("Triton was imported in compiled mode; CPU tensors run only under its interpreter "
                "(set TRITON_INTERPRET=1 before triton is imported)")
    return None


def _kernels_for(t: torch.Tensor) -> tuple[_KernelSet, bool]:
    reason = device_reason(t.device)
    if reason is not None:
        raise RuntimeError(reason)
    return _decorate(), INTERPRETED


def _tl_dtype(fmt: ElementFormat) -> Any:
    names = {"e4m3": "float8e4nv", "e5m2": "float8e5", "e4m3fnuz": "float8e4b8", "e5m2fnuz": "float8e5b16"}
    return getattr(tl, names[fmt.name])


def _format_args(fmt: ElementFormat) -> dict[str, Any]:
    """Compile-time constants describing ``fmt``: Triton dtype, mantissa bits, smallest normal exponent."""
    return {"OUT_DTYPE": _tl_dtype(fmt), "MBITS": fmt.mantissa_bits, "EMIN": int(math.log2(fmt.min_normal))}


def _check_2d(x: torch.Tensor, what: str) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"{what}: expected a 2-D tensor, got shape {tuple(x.shape)}")
    return x if x.stride(1) == 1 else x.contiguous()


def quantize_tensorwise(x: torch.Tensor, fmt: ElementFormat, scale: torch.Tensor | None = None, margin: int = 0
                        ) -> tuple[Quantized, torch.Tensor]:
    """Per-tensor quantization in two launches; returns the :class:`Quantized` and the tensor's amax (0-dim).

    With ``scale`` (a 0-dim FP32 dequantization scale, delayed scaling) the cast uses it instead of the current
    amax; the amax is still computed, for the caller's history. ``margin`` widens a current scale by
    ``2**margin``.
    """
    k, _ = _kernels_for(x)
    x = x.contiguous()
    numel = x.numel()
    n_progs = max(1, min(_MAX_PARTIALS, triton.cdiv(numel, _AMAX_BLOCK)))
    partials = torch.empty(n_progs, dtype=torch.float32, device=x.device)
    k.amax_partials[(n_progs,)](x, partials, numel, n_progs, BLOCK=_AMAX_BLOCK)
    y = torch.empty(x.shape, dtype=fmt.dtype, device=x.device)
    amax = torch.empty((), dtype=torch.float32, device=x.device)
    has_scale = scale is not None
    out_scale = scale.to(device=x.device, dtype=torch.float32).reshape(()) if has_scale else torch.empty(
        (), dtype=torch.float32, device=x.device)
    grid = (max(1, triton.cdiv(numel, _AMAX_BLOCK)),)
    k.cast_tensorwise[grid](x, y, partials, n_progs, out_scale, amax, numel, fmt.max, 2.0**margin, HAS_SCALE=has_scale,
                            **_format_args(fmt), BLOCK=_AMAX_BLOCK, PARTIALS=_MAX_PARTIALS)
    return Quantized(y, out_scale, fmt, Granularity.TENSORWISE), amax


def quantize_rowwise(x: torch.Tensor, fmt: ElementFormat) -> Quantized:
    """One scale per row (``[rows, 1]``), fused in one launch."""
    k, _ = _kernels_for(x)
    x = _check_2d(x, "rowwise quantize")
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=fmt.dtype, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    k.quantize_rowwise[(triton.cdiv(rows, _ROW_TILE),)](x, y, scale, rows, cols, x.stride(0), y.stride(0),
                                                         fmt.max, **_format_args(fmt), ROWS=_ROW_TILE,
                                                         COLS=_COL_TILE)
    return Quantized(y, scale, fmt, Granularity.ROWWISE)


def quantize_blockwise(x: torch.Tensor, fmt: ElementFormat, block: tuple[int, int]) -> Quantized:
    """One scale per ``block`` tile (``(1, 128)`` or ``(128, 128)``), fused in one launch.

    The block's column count must divide the columns, and a multi-row block's row count the rows, as in
    :func:`fp8bench.numerics.quantize.quantize_blockwise`; both must be powers of two (Triton tile sizes).
    """
    k, _ = _kernels_for(x)
    x = _check_2d(x, "blockwise quantize")
    rows, cols = x.shape
    br, bc = block
    if rows % br or cols % bc:
        raise ValueError(f"a {rows}x{cols} tensor does not split into {br}x{bc} blocks")
    if bc & (bc - 1) or br & (br - 1):
        raise ValueError(f"Triton block tiles must be powers of two, got {br}x{bc}")
    tile_rows = _ROW_TILE if br == 1 else br
    y = torch.empty((rows, cols), dtype=fmt.dtype, device=x.device)
    scale = torch.empty((rows // br, cols // bc), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(rows, tile_rows), cols // bc)
    k.quantize_blockwise[grid](x, y, scale, rows, x.stride(0), y.stride(0), scale.stride(0), fmt.max,
                               **_format_args(fmt), TILE_ROWS=tile_rows, BLOCK_ROWS=br, BLOCK_COLS=bc)
    return Quantized(y, scale, fmt, Granularity.BLOCKWISE, block)


def device_program_limit(device: torch.device) -> int:
    """Programs a persistent launch keeps resident: one per SM on CUDA (a fixed small number elsewhere)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: fewer programs than tiles, so the persistent loop is exercised


_SCALE_MODES = {Granularity.TENSORWISE: 0, Granularity.ROWWISE: 1, Granularity.BLOCKWISE: 2}
GEMM_SCALE_BLOCK = 128  # the blockwise GEMM's scale tile: 1x128 activations, 128x128 weights (= BLOCK_K)


def promotes_on(device: torch.device) -> bool:
    """Whether the GEMM passes ``max_num_imprecise_acc`` on ``device``: where its numerical effect is, compute
    capability 9.0 exactly (the WGMMA path; Triton's own test is the capability equal to 90, and ROCm's MI300
    reports (9, 4)), and under the interpreter, which stands in for it in tests. Elsewhere the argument has no
    effect on the accumulation, and an untested argument is not sent to another architecture's compiler."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) == (9, 0)


def _scale_strides(q: Quantized) -> tuple[torch.Tensor, int, int]:
    """FP32 scales and their (row, K-block) strides as the kernel indexes them."""
    s = q.scale.float()
    if q.granularity is Granularity.TENSORWISE:
        return s.reshape(1).contiguous(), 0, 0
    if q.granularity is Granularity.ROWWISE:
        s = s.reshape(-1).contiguous()
        return s, 1, 0
    s = s.contiguous()
    return s, s.stride(0), s.stride(1)


def scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype = torch.bfloat16, persistent: bool = False,
              config: dict[str, int] | None = None, fast_accum: bool = False) -> torch.Tensor:
    """``qa.data @ qb.data^T`` with FP8 operands; ``qa`` is ``[M, K]``, ``qb`` ``[N, K]``.

    Scales: tensorwise or rowwise on both operands, or blockwise with ``1x128`` tiles on ``qa`` and ``128x128``
    tiles on ``qb`` (DeepSeek-V3's layout; K and N multiples of 128). FP32 accumulation, BF16 output.
    ``persistent`` launches at most one program per SM. ``config`` pins the tile sizes (``BLOCK_M/N/K``,
    ``GROUP_M``), bypassing autotuning (the interpreter always uses fixed tiles). ``fast_accum`` leaves the
    tensorwise and rowwise dots in Triton's default accumulation (fast on sm_90); off, they are promoted to FP32
    every K tile. Blockwise dots are promoted every 128 elements either way.
    """
    if out_dtype != torch.bfloat16:
        raise ValueError(f"the Triton FP8 GEMM writes bfloat16 only, got {out_dtype}")
    g = qa.granularity
    if g is not qb.granularity or g not in _SCALE_MODES:
        raise ValueError(f"the Triton FP8 GEMM takes tensorwise, rowwise or blockwise scales on both operands, "
                         f"got {qa.granularity.value} x {qb.granularity.value}")
    blk = GEMM_SCALE_BLOCK
    if g is Granularity.BLOCKWISE and (qa.block != (1, blk) or qb.block != (blk, blk)):
        raise ValueError(f"the Triton blockwise GEMM takes 1x{blk} tiles on A and {blk}x{blk} on B, got "
                         f"{qa.block[0]}x{qa.block[1]} and {qb.block[0]}x{qb.block[1]}")
    a, b = qa.data, qb.data
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"expected A [M, K] and B [N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    k, interpret = _kernels_for(a)
    m, kdim = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    sa, sam, sak = _scale_strides(qa)
    sb, sbn, sbk = _scale_strides(qb)
    limit = device_program_limit(a.device) if persistent else None

    def grid(meta: dict[str, int]) -> tuple[int]:
        tiles = triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])
        return (min(tiles, limit) if limit else tiles,)

    args = (a, b, c, sa, sb, m, n, kdim, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1), sam, sak, sbn, sbk)
    modes = {"SCALES": _SCALE_MODES[g], "SCALE_BLOCK": blk, "PROMOTE": not fast_accum and promotes_on(a.device)}
    if interpret or config is not None:
        cfg = dict(config or INTERPRETER_GEMM_CONFIG)
        if g is Granularity.BLOCKWISE:
            cfg["BLOCK_K"] = blk  # one K step per scale block
        fn = k.scaled_mm.fn if hasattr(k.scaled_mm, "configs") else k.scaled_mm
        launch = {key: v for key, v in cfg.items() if key.isupper()}
        extra = {key: v for key, v in cfg.items() if key in ("num_warps", "num_stages") and not interpret}
        fn[grid](*args, **modes, **launch, **extra)
    else:  # every Hopper config steps K by 128 = GEMM_SCALE_BLOCK and tiles N by a divisor or multiple of 128
        k.scaled_mm[grid](*args, **modes)
    return c
