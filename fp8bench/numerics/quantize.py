"""The FP8 quantizers, written once and shared by every backend.

Quantizing ``x`` to FP8 takes three steps, which fp8bench times together as the ``quantize`` phase:

1. **amax**: the largest ``|x|`` over each group of values that will share a scale (the whole tensor, a row, a
   block);
2. **scale**: the dequantization scale ``s = amax / fmt.max`` (so the group's largest value lands on the format's
   largest finite value), or for MX a power of two;
3. **cast**: ``fp8 = saturate(x / s)``. Saturation clamps to ``+-fmt.max``: PyTorch's plain cast would turn an
   out-of-range E4M3 value into NaN.

A :class:`Quantized` carries the FP8 data and its scales in the layout ``torch._scaled_mm`` expects, and can
dequantize itself (``x ~= data * s``), which is how the emulated reference backend runs every recipe on any device.

The 4-bit recipes quantize to E2M1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6), which torch cannot cast to:
:func:`round_to_e2m1` rounds to that grid (to nearest, ties to the even code, as the hardware's ``cvt.rn`` does, or
stochastically) and the values stay unpacked in a BF16 tensor, which holds each of them exactly;
:func:`pack_e2m1` makes the two-per-byte ``float4_e2m1fn_x2`` tensor the kernels read. ``nvfp4`` scales in two
levels (:func:`quantize_nvfp4`): an FP32 scale per tensor and an E4M3 scale per 16 values; ``mxfp4`` is
:func:`quantize_mx` with E2M1 elements.

Delayed scaling keeps per-tensor state: :class:`AmaxHistory` remembers the last ``N`` amaxes and derives the next
scale from their maximum, so a tensor is cast with a scale computed *before* its own amax is known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp8bench.core.formats import E2M1, E4M3, ElementFormat
from fp8bench.core.precisions import Granularity, ScaledRecipe

# A group whose amax is zero (an all-zero row, say) would get a zero scale and divide by it; this floor keeps the
# scale finite. It is far below any amax a real tensor has (FP32's smallest normal is ~1.2e-38).
_AMAX_FLOOR = 1e-12


@dataclass
class Quantized:
    """FP8 data plus dequantization scales.

    ``scale`` broadcasts against ``data`` after :func:`expand_scale`: a 0-dim tensor (tensorwise), ``[rows, 1]``
    (rowwise), ``[rows / br, cols / bc]`` (blockwise, tile ``block``), ``[rows, cols / 32]`` (MX, power of two) or
    ``[rows, cols / 16]`` (NVFP4: E4M3 values, held in FP32). ``tensor_scale`` is NVFP4's second level, a 0-dim FP32
    scale that multiplies every block scale (``None`` elsewhere). 4-bit ``data`` holds the E2M1 values unpacked
    in BF16 (see :func:`pack_e2m1`).
    """

    data: torch.Tensor
    scale: torch.Tensor
    fmt: ElementFormat
    granularity: Granularity
    block: tuple[int, int] = (1, 1)
    tensor_scale: torch.Tensor | None = None

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        scale = expand_scale(self.scale, self.block, self.data.shape).to(dtype)
        if self.tensor_scale is not None:
            scale = scale * self.tensor_scale.to(dtype)
        return self.data.to(dtype) * scale

    def full_scale(self) -> torch.Tensor:
        """The per-group dequantization scale including NVFP4's tensor scale (FP32, unexpanded)."""
        return self.scale if self.tensor_scale is None else self.scale * self.tensor_scale

    def rows(self, start: int, end: int) -> Quantized:
        """Rows ``start:end`` with their scales (views, no copy): one expert's token group or weight.

        Per-tensor scales are shared; per-row, MX and 1-row block scales are sliced with their rows. A slice of
        a multi-row block tile would split scales, so it is refused unless it falls on tile boundaries.
        """
        if self.granularity is Granularity.TENSORWISE:
            return Quantized(self.data[start:end], self.scale, self.fmt, self.granularity, self.block)
        br = self.block[0]
        if start % br or end % br:
            raise ValueError(f"rows {start}:{end} split {br}-row scale tiles")
        return Quantized(self.data[start:end], self.scale[start // br:end // br], self.fmt, self.granularity,
                         self.block)


def expand_scale(scale: torch.Tensor, block: tuple[int, int], shape: torch.Size) -> torch.Tensor:
    """Broadcast a per-group scale to the element grid (a no-op for tensorwise and rowwise scales)."""
    if scale.dim() < 2 or block == (1, 1):
        return scale
    return scale.repeat_interleave(block[0], dim=0)[: shape[0]].repeat_interleave(block[1], dim=1)[:, : shape[1]]


def _cast(x: torch.Tensor, scale: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    return (x.float() / scale).clamp_(-fmt.max, fmt.max).to(fmt.dtype)


def _cast_blocks(x: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], fmt: ElementFormat) -> torch.Tensor:
    """Cast with one scale per tile, by viewing the tensor as tiles (no expanded copy of the scales)."""
    rows, cols = x.shape
    br, bc = block
    tiles = x.float().reshape(rows // br, br, cols // bc, bc) / scale[:, None, :, None]
    return tiles.clamp_(-fmt.max, fmt.max).to(fmt.dtype).reshape(rows, cols)


# E2M1's magnitudes in code order (code = index; bit 3 is the sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# The grid and the midpoints rounding decides at, as tensors on each device that has used them. Built on first use,
# which is a case's warm-up: a timed call then finds them on its device (a host tensor moved with ``.to(device)`` on
# every call would be a host-to-device copy inside the timed region, and one a CUDA graph cannot capture).
_E2M1_TABLES: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _e2m1_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """E2M1's grid and rounding midpoints on ``device`` (built once per device)."""
    tables = _E2M1_TABLES.get(device)
    if tables is None:
        grid = torch.tensor(E2M1_VALUES, device=device)
        tables = _E2M1_TABLES[device] = (grid, (grid[1:] + grid[:-1]) / 2)
    return tables


def round_to_e2m1(u: torch.Tensor, stochastic: bool = False, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """``u`` rounded to E2M1 (saturating at +-6), as FP32 values.

    Round to nearest breaks ties towards the even code (0.25 -> 0, 0.75 -> 1, 5 -> 4), PTX ``cvt.rn.satfinite``'s
    rule. ``stochastic`` rounds ``|u|`` between its two neighbours ``lo <= |u| < hi`` up with probability
    ``(|u| - lo) / (hi - lo)``, so ``E[round(u)] = u`` inside the range (values beyond 6 still saturate).
    """
    mag = u.float().abs().clamp_(max=E2M1.max)
    grid, mids = _e2m1_tables(mag.device)
    if stochastic:
        lo_idx = (torch.bucketize(mag, grid, right=True) - 1).clamp_(0, len(E2M1_VALUES) - 2)
        lo, hi = grid[lo_idx], grid[lo_idx + 1]
        draw = torch.rand(mag.shape, device=mag.device, generator=generator)
        out = torch.where(draw < (mag - lo) / (hi - lo), hi, lo)
    else:
        idx = torch.bucketize(mag, mids)  # a tie lands on the lower neighbour ...
        tie = (idx < len(mids)) & (mag == mids[idx.clamp(max=len(mids) - 1)]) & (idx % 2 == 1)
        out = grid[idx + tie.long()]  # ... and moves up when that one's code is odd
    return torch.copysign(out, u.float())


def pack_e2m1(values: torch.Tensor) -> torch.Tensor:
    """E2M1 values (exactly on the grid) packed two per byte as ``float4_e2m1fn_x2``, ``[rows, cols / 2]``.

    The element at an even column goes in the low nibble, the next one in the high nibble (torchao's
    ``pack_uint4``, ``torchao/prototype/mx_formats/kernels.py``); each nibble is ``sign << 3 | code``.
    """
    rows, cols = values.shape
    if cols % 2:
        raise ValueError(f"E2M1 packs two values per byte; {cols} columns is odd")
    mag = values.float().abs()
    code = torch.bucketize(mag, _e2m1_tables(mag.device)[0]).to(torch.uint8)
    code |= (torch.signbit(values.float()).to(torch.uint8) << 3)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.view(torch.float4_e2m1fn_x2)


def _cast_e2m1(x: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], stochastic: bool,
               generator: torch.Generator | None) -> torch.Tensor:
    """E2M1 cast with one (FP32, already combined) scale per ``1 x block`` group; a zero scale gives zeros."""
    rows, cols = x.shape
    br, bc = block
    tiles = x.float().reshape(rows // br, br, cols // bc, bc)
    s = scale[:, None, :, None]
    scaled = torch.where(s > 0, tiles / torch.where(s > 0, s, 1.0), 0.0)
    return round_to_e2m1(scaled, stochastic, generator).reshape(rows, cols).to(torch.bfloat16)


def scale_from_amax(amax: torch.Tensor, fmt: ElementFormat, margin: int = 0) -> torch.Tensor:
    """Dequantization scale that maps ``amax`` onto ``fmt.max`` (times ``2**margin`` headroom)."""
    return amax.float().clamp(min=_AMAX_FLOOR) * (2.0**margin) / fmt.max


def quantize_tensorwise(x: torch.Tensor, fmt: ElementFormat, scale: torch.Tensor | None = None) -> Quantized:
    """One scale for the whole tensor: current scaling, or a given (delayed) scale."""
    if scale is None:
        scale = scale_from_amax(x.abs().amax(), fmt)
    return Quantized(_cast(x, scale, fmt), scale, fmt, Granularity.TENSORWISE)


def quantize_rowwise(x: torch.Tensor, fmt: ElementFormat) -> Quantized:
    """One scale per row (``[rows, 1]``): per token for activations, per output channel for ``[N, K]`` weights."""
    scale = scale_from_amax(x.abs().amax(dim=-1, keepdim=True), fmt)
    return Quantized(_cast(x, scale, fmt), scale, fmt, Granularity.ROWWISE)


def _block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    rows, cols = x.shape
    br, bc = block
    if rows % br or cols % bc:
        raise ValueError(f"a {rows}x{cols} tensor does not split into {br}x{bc} blocks")
    return x.abs().reshape(rows // br, br, cols // bc, bc).amax(dim=(1, 3))


def quantize_blockwise(x: torch.Tensor, fmt: ElementFormat, block: tuple[int, int]) -> Quantized:
    """One FP32 scale per ``block`` tile (1x128 for activations, 128x128 for weights in DeepSeek-V3's recipe)."""
    scale = scale_from_amax(_block_amax(x, block), fmt)
    return Quantized(_cast_blocks(x, scale, block, fmt), scale, fmt, Granularity.BLOCKWISE, block)


def quantize_mx(x: torch.Tensor, fmt: ElementFormat, block_size: int = 32, stochastic: bool = False,
                generator: torch.Generator | None = None) -> Quantized:
    """OCP MX: one power-of-two (E8M0) scale per ``block_size`` values along the last dimension.

    The shared exponent is ``floor(log2(amax)) - emax`` (OCP MX v1.0, section 6.3), where ``emax`` is the exponent
    of the element format's largest power of two (8 for E4M3, 2 for E2M1). The block's largest value then lands in
    ``[2**emax, 2**(emax+1))``, which can exceed the format's max (448 < 512, 6 < 8): such values saturate, as the
    spec says. ``stochastic`` applies to E2M1 elements only (MXFP4 gradients).
    """
    block = (1, block_size)
    amax = _block_amax(x, block).float().clamp(min=_AMAX_FLOOR)
    scale = torch.exp2(torch.floor(torch.log2(amax)) - fmt.mx_emax).clamp(2.0**-127, 2.0**127)
    if fmt.is_fp4:
        return Quantized(_cast_e2m1(x, scale, block, stochastic, generator), scale, fmt, Granularity.MX, block)
    return Quantized(_cast_blocks(x, scale, block, fmt), scale, fmt, Granularity.MX, block)


def quantize_nvfp4(x: torch.Tensor, block_size: int = 16, stochastic: bool = False,
                   generator: torch.Generator | None = None) -> Quantized:
    """NVFP4: E2M1 values, one E4M3 scale per ``block_size`` values along the last dimension, one FP32 tensor scale.

    The tensor scale is ``s_t = amax / (6 * 448)``, so that the largest block scale, ``block_amax / 6 / s_t``, is
    E4M3's max. Each block scale is rounded to E4M3 (to nearest, as ``.to(float8_e4m3fn)`` does); the elements are
    then cast with the rounded scale, so a block whose scale rounded down saturates its largest values at 6, and a
    block whose scale underflows E4M3 (its amax below ``2**-10`` of the tensor's ``amax / 448``) becomes zeros.
    This is the quantization of Transformer Engine's NVFP4 recipe and torchao's ``NVFP4Tensor`` with a per-tensor
    scale (``common/cast/nvfp4``; ``torchao/prototype/mx_formats/nvfp4_tensor.py``: ``nvfp4_quantize``).
    """
    block = (1, block_size)
    tensor_scale = scale_from_amax(x.abs().amax(), E2M1) / E4M3.max
    block_scale = (_block_amax(x, block).float() / E2M1.max / tensor_scale).clamp_(max=E4M3.max)
    block_scale = block_scale.to(E4M3.dtype).float()  # the E4M3 value the kernel reads
    data = _cast_e2m1(x, block_scale * tensor_scale, block, stochastic, generator)
    return Quantized(data, block_scale, E2M1, Granularity.NVFP4, block, tensor_scale)


def hadamard_16(device: torch.device | str | None = None, signs: torch.Tensor | None = None) -> torch.Tensor:
    """The orthonormal 16x16 Hadamard matrix (Sylvester), optionally with random column signs (``diag(signs)``).

    ``H H^T = I``, so transforming both operands of a GEMM along its reduction dimension by the same ``H`` leaves
    the product unchanged while spreading each 16-value block's outliers over the whole block.
    """
    h = torch.ones(1, 1)
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = h / 4.0  # 1 / sqrt(16): orthonormal
    if signs is not None:
        h = h * signs.float().cpu()[None, :]
    return h.to(device)


def random_hadamard_transform(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``x`` (``[rows, cols]``, cols a multiple of 16) times the block-diagonal ``diag(h, h, ...)``: each run of 16
    values along the last dimension mixed by ``h`` (FP32, on ``x``'s device: build it once per device, so that no
    call copies it there). Computed in FP32, returned in ``x``'s dtype."""
    rows, cols = x.shape
    if cols % 16:
        raise ValueError(f"the 16x16 Hadamard transform needs a multiple of 16 along the reduction dim, got {cols}")
    if h.device != x.device:
        raise ValueError(f"the Hadamard matrix is on {h.device} and the tensor on {x.device}; build the matrix on "
                         "the tensor's device once (hadamard_16(device=...)) instead of copying it on every call")
    return (x.float().reshape(rows, cols // 16, 16) @ h).reshape(rows, cols).to(x.dtype)


class AmaxHistory:
    """Delayed-scaling state for one tensor: a ring of the last ``length`` amaxes.

    The scale for iteration ``t`` comes from the amaxes of iterations ``< t``: their maximum (``algo="max"``,
    Transformer Engine's default) or the latest one (``"most_recent"``); the current amax is pushed afterwards.
    Before the first push there is no history, so the first call falls back to current scaling. After it, each
    update does the same work however full the ring is, and with ``max`` and fixed inputs the scale no longer
    changes, so a warm-up of a few calls (far fewer than ``length``) leaves the timed calls in their steady state
    (Transformer Engine's update likewise reduces its whole history buffer each step).
    """

    def __init__(self, length: int, margin: int = 0, algo: str = "max") -> None:
        if algo not in ("max", "most_recent"):
            raise ValueError(f"amax algorithm {algo!r}; accepted: max, most_recent")
        self.history = torch.zeros(length)
        self.margin = margin
        self.algo = algo
        self.count = 0

    def amax(self) -> torch.Tensor:
        """The amax the next scale is derived from (call only after a push)."""
        if self.algo == "most_recent":
            return self.history[(self.count - 1) % len(self.history)]
        return self.history.max()

    def scale(self, fmt: ElementFormat) -> torch.Tensor | None:
        return None if self.count == 0 else scale_from_amax(self.amax(), fmt, self.margin)

    def push(self, amax: torch.Tensor) -> None:
        self.history = self.history.to(amax.device)
        self.history[self.count % len(self.history)] = amax.float()
        self.count += 1


def quantize_delayed(x: torch.Tensor, fmt: ElementFormat, history: AmaxHistory) -> Quantized:
    """Cast with the scale from earlier iterations, then record this tensor's amax."""
    amax = x.abs().amax()
    scale = history.scale(fmt)
    q = quantize_tensorwise(x, fmt, scale if scale is not None else scale_from_amax(amax, fmt, history.margin))
    history.push(amax)
    return q


Quantizer = Callable[[torch.Tensor], Quantized]


def quantizer_for(recipe: ScaledRecipe, role: str, fmt: ElementFormat | None = None, stochastic: bool = False,
                  generator: torch.Generator | None = None) -> Quantizer:
    """The quantizer a recipe applies to one GEMM operand.

    ``role`` is ``"lhs"`` (activations or gradients, ``[M, K]``) or ``"rhs"`` (weights, ``[N, K]``): blockwise
    recipes tile them differently. Delayed scaling returns a closure that owns its amax history, so each operand
    keeps its own state across calls. ``stochastic`` (4-bit recipes only) rounds the elements stochastically,
    drawing from ``generator``.
    """
    if role not in ("lhs", "rhs"):
        raise ValueError(f"operand role must be 'lhs' or 'rhs', got {role!r}")
    fmt = fmt or recipe.forward_format
    g = recipe.granularity
    if stochastic and not fmt.is_fp4:
        raise ValueError(f"{recipe.name}: stochastic rounding is implemented for E2M1 elements only")
    if g is Granularity.NVFP4:
        return lambda x: quantize_nvfp4(x, recipe.block_elements, stochastic, generator)
    if g is Granularity.TENSORWISE and recipe.delayed:
        history = AmaxHistory(recipe.amax_history_len, recipe.margin, recipe.amax_compute_algo)
        return lambda x: quantize_delayed(x, fmt, history)
    if g is Granularity.TENSORWISE:
        return lambda x: quantize_tensorwise(x, fmt)
    if g is Granularity.ROWWISE:
        return lambda x: quantize_rowwise(x, fmt)
    if g is Granularity.BLOCKWISE:
        block = recipe.activation_block if role == "lhs" else recipe.weight_block
        return lambda x: quantize_blockwise(x, fmt, block)
    return lambda x: quantize_mx(x, fmt, recipe.mx_block, stochastic, generator)


@dataclass(frozen=True)
class CastStats:
    """What a cast did to one tensor, as fractions of its elements."""

    overflow_frac: float  # |x / s| above the format's max: saturated
    underflow_frac: float  # non-zero x that became zero


def cast_stats(x: torch.Tensor, q: Quantized) -> CastStats:
    """Overflow and underflow fractions of quantizing ``x`` into ``q`` (not timed; for the numerics report)."""
    scaled = x.float() / expand_scale(q.full_scale(), q.block, x.shape)
    n = max(x.numel(), 1)
    # With current scaling the amax element lands on fmt.max only up to FP32 rounding of x / s (it can come out a
    # few ulps above); that is not an overflow, so allow a relative slack far below one FP8 step.
    overflow = (scaled.abs() > q.fmt.max * (1 + 2.0**-20)).sum().item() / n
    underflow = ((x != 0) & (q.data.float() == 0)).sum().item() / n
    return CastStats(overflow, underflow)
