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

Delayed scaling keeps per-tensor state: :class:`AmaxHistory` remembers the last ``N`` amaxes and derives the next
scale from their maximum, so a tensor is cast with a scale computed *before* its own amax is known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp8bench.formats import Fp8Format
from fp8bench.recipes import Fp8Recipe, Granularity

# A group whose amax is zero (an all-zero row, say) would get a zero scale and divide by it; this floor keeps the
# scale finite. It is far below any amax a real tensor has (FP32's smallest normal is ~1.2e-38).
_AMAX_FLOOR = 1e-12


@dataclass
class Quantized:
    """FP8 data plus dequantization scales.

    ``scale`` broadcasts against ``data`` after :func:`expand_scale`: a 0-dim tensor (tensorwise), ``[rows, 1]``
    (rowwise), ``[rows / br, cols / bc]`` (blockwise, tile ``block``) or ``[rows, cols / 32]`` (MX, power of two).
    """

    data: torch.Tensor
    scale: torch.Tensor
    fmt: Fp8Format
    granularity: Granularity
    block: tuple[int, int] = (1, 1)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.data.to(dtype) * expand_scale(self.scale, self.block, self.data.shape).to(dtype))

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


def _cast(x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    return (x.float() / scale).clamp_(-fmt.max, fmt.max).to(fmt.dtype)


def _cast_blocks(x: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], fmt: Fp8Format) -> torch.Tensor:
    """Cast with one scale per tile, by viewing the tensor as tiles (no expanded copy of the scales)."""
    rows, cols = x.shape
    br, bc = block
    tiles = x.float().reshape(rows // br, br, cols // bc, bc) / scale[:, None, :, None]
    return tiles.clamp_(-fmt.max, fmt.max).to(fmt.dtype).reshape(rows, cols)


def scale_from_amax(amax: torch.Tensor, fmt: Fp8Format, margin: int = 0) -> torch.Tensor:
    """Dequantization scale that maps ``amax`` onto ``fmt.max`` (times ``2**margin`` headroom)."""
    return amax.float().clamp(min=_AMAX_FLOOR) * (2.0**margin) / fmt.max


def quantize_tensorwise(x: torch.Tensor, fmt: Fp8Format, scale: torch.Tensor | None = None) -> Quantized:
    """One scale for the whole tensor: current scaling, or a given (delayed) scale."""
    if scale is None:
        scale = scale_from_amax(x.abs().amax(), fmt)
    return Quantized(_cast(x, scale, fmt), scale, fmt, Granularity.TENSORWISE)


def quantize_rowwise(x: torch.Tensor, fmt: Fp8Format) -> Quantized:
    """One scale per row (``[rows, 1]``): per token for activations, per output channel for ``[N, K]`` weights."""
    scale = scale_from_amax(x.abs().amax(dim=-1, keepdim=True), fmt)
    return Quantized(_cast(x, scale, fmt), scale, fmt, Granularity.ROWWISE)


def _block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    rows, cols = x.shape
    br, bc = block
    if rows % br or cols % bc:
        raise ValueError(f"a {rows}x{cols} tensor does not split into {br}x{bc} blocks")
    return x.abs().reshape(rows // br, br, cols // bc, bc).amax(dim=(1, 3))


def quantize_blockwise(x: torch.Tensor, fmt: Fp8Format, block: tuple[int, int]) -> Quantized:
    """One FP32 scale per ``block`` tile (1x128 for activations, 128x128 for weights in DeepSeek-V3's recipe)."""
    scale = scale_from_amax(_block_amax(x, block), fmt)
    return Quantized(_cast_blocks(x, scale, block, fmt), scale, fmt, Granularity.BLOCKWISE, block)


def quantize_mx(x: torch.Tensor, fmt: Fp8Format, block_size: int = 32) -> Quantized:
    """OCP MX: one power-of-two (E8M0) scale per ``block_size`` values along the last dimension.

    The shared exponent is ``floor(log2(amax)) - emax`` (OCP MX v1.0, section 6.3), where ``emax`` is the exponent
    of the element format's largest power of two (8 for E4M3). The block's largest value then lands in
    ``[2**emax, 2**(emax+1))``, which can exceed the format's max (448 < 512): such values saturate, as the spec says.
    """
    block = (1, block_size)
    amax = _block_amax(x, block).float().clamp(min=_AMAX_FLOOR)
    scale = torch.exp2(torch.floor(torch.log2(amax)) - fmt.mx_emax).clamp(2.0**-127, 2.0**127)
    return Quantized(_cast_blocks(x, scale, block, fmt), scale, fmt, Granularity.MX, block)


class AmaxHistory:
    """Delayed-scaling state for one tensor: a ring of the last ``length`` amaxes.

    The scale for iteration ``t`` comes from the amaxes of iterations ``< t``: their maximum (``algo="max"``,
    Transformer Engine's default) or the latest one (``"most_recent"``); the current amax is pushed afterwards.
    Before the first push there is no history, so the first call falls back to current scaling (the warm-up
    iterations of a benchmark fill the history before timing starts).
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

    def scale(self, fmt: Fp8Format) -> torch.Tensor | None:
        return None if self.count == 0 else scale_from_amax(self.amax(), fmt, self.margin)

    def push(self, amax: torch.Tensor) -> None:
        self.history = self.history.to(amax.device)
        self.history[self.count % len(self.history)] = amax.float()
        self.count += 1


def quantize_delayed(x: torch.Tensor, fmt: Fp8Format, history: AmaxHistory) -> Quantized:
    """Cast with the scale from earlier iterations, then record this tensor's amax."""
    amax = x.abs().amax()
    scale = history.scale(fmt)
    q = quantize_tensorwise(x, fmt, scale if scale is not None else scale_from_amax(amax, fmt, history.margin))
    history.push(amax)
    return q


Quantizer = Callable[[torch.Tensor], Quantized]


def quantizer_for(recipe: Fp8Recipe, role: str, fmt: Fp8Format | None = None) -> Quantizer:
    """The quantizer a recipe applies to one GEMM operand.

    ``role`` is ``"lhs"`` (activations or gradients, ``[M, K]``) or ``"rhs"`` (weights, ``[N, K]``): blockwise
    recipes tile them differently. Delayed scaling returns a closure that owns its amax history, so each operand
    keeps its own state across calls.
    """
    if role not in ("lhs", "rhs"):
        raise ValueError(f"operand role must be 'lhs' or 'rhs', got {role!r}")
    fmt = fmt or recipe.forward_format
    g = recipe.granularity
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
    return lambda x: quantize_mx(x, fmt, recipe.mx_block)


@dataclass(frozen=True)
class CastStats:
    """What a cast did to one tensor, as fractions of its elements."""

    overflow_frac: float  # |x / s| above the format's max: saturated
    underflow_frac: float  # non-zero x that became zero


def cast_stats(x: torch.Tensor, q: Quantized) -> CastStats:
    """Overflow and underflow fractions of quantizing ``x`` into ``q`` (not timed; for the numerics report)."""
    scaled = x.float() / expand_scale(q.scale, q.block, x.shape)
    n = max(x.numel(), 1)
    # With current scaling the amax element lands on fmt.max only up to FP32 rounding of x / s (it can come out a
    # few ulps above); that is not an overflow, so allow a relative slack far below one FP8 step.
    overflow = (scaled.abs() > q.fmt.max * (1 + 2.0**-20)).sum().item() / n
    underflow = ((x != 0) & (q.data.float() == 0)).sum().item() / n
    return CastStats(overflow, underflow)
