"""An FP8 linear layer for training: the forward GEMM and both backward GEMMs run through a recipe's FP8 path.

A linear layer ``y = x @ W^T`` (``x`` ``[M, K]`` tokens by input features, ``W`` ``[N, K]``) costs three GEMMs per
training step, and FP8 training quantizes the operands of all three:

===========  ==========================  =============================  ===========================
GEMM         product                     left operand (``[rows, red]``)  right operand (``[cols, red]``)
===========  ==========================  =============================  ===========================
forward      ``y  = x @ W^T``  [M, N]    ``x``   [M, K]                 ``W``   [N, K]
dgrad        ``dx = dy @ W``   [M, K]    ``dy``  [M, N]                 ``W^T`` [K, N]
wgrad        ``dW = dy^T @ x`` [N, K]    ``dy^T`` [N, M]                ``x^T`` [K, M]
===========  ==========================  =============================  ===========================

Every operand is handed to :func:`fp8bench.numerics.scaled_gemm.fp8_scaled_mm` as ``[rows, reduction]`` row-major, the
layout ``torch._scaled_mm`` requires, so the backward GEMMs need transposed copies. How they are made depends on
the recipe's granularity:

* **tensorwise** (current or delayed): one scale covers a tensor and its transpose, so the FP8 data of ``x`` and
  ``W`` from the forward pass is transposed and reused, and ``dy`` is quantized once. Delayed scaling keeps one
  :class:`~fp8bench.numerics.quantize.AmaxHistory` per tensor (input, weight, gradient) in the layer, so the history
  persists across training steps, as in Transformer Engine.
* **rowwise, blockwise, MX**: scales run along the reduction dimension, which differs between the GEMMs, so each
  operand is quantized afresh along the dimension its GEMM reduces over (torchao's rowwise recipe does the same).
  The high-precision ``x`` is therefore kept for the backward pass.

Block recipes tile the weight 128x128 (forward and dgrad) and every activation or gradient 1x128 along the GEMM's
reduction dimension, the wgrad GEMM's ``x^T`` included, as Transformer Engine's ``Float8BlockScaling`` and
DeepSeek-V3's recipe do.

The 4-bit recipes (``nvfp4``, ``mxfp4``) quantize all three GEMMs' operands to E2M1 the same way, with two
options of NVIDIA's NVFP4 training recipe (Transformer Engine's ``NVFP4BlockScaling``), both on the gradient GEMMs:

* ``stochastic_rounding``: ``dy`` (in dgrad and wgrad) is rounded stochastically, so small gradients survive on
  average instead of always rounding to the nearer grid value;
* ``rht``: before the wgrad GEMM both of its operands, ``dy^T`` and ``x^T``, are multiplied along their reduction
  dimension (the tokens) by the same block-diagonal 16x16 random Hadamard matrix ``H`` (``H H^T = I``, so the
  product is unchanged in exact arithmetic); an outlier is spread over its 16-value block before the block is
  scaled. The random signs are drawn once per layer from a fixed seed (:data:`RHT_SEED`).

Gradients (``dy``) use the recipe's backward format: E5M2 under ``hybrid``, else the forward format. Outputs: all
three GEMMs write BF16 (the activation dtype); the weight gradient is then cast to the master weight's dtype (FP32),
as torchao does. BF16 is also the one output CUTLASS's per-row kernels wrote in PyTorch builds before mid-2026.
Accumulation: the forward GEMM uses the recipe's ``fast_accum`` switch, both gradient GEMMs always accumulate in
full precision (the vendors' split, see :mod:`fp8bench.core.precisions`). The quantizers are the shared ones in
:mod:`fp8bench.numerics.quantize`; nothing here re-implements scaling.

The GEMM itself is pluggable: :data:`NATIVE` calls PyTorch's scaled matmul (real FP8 kernels), :data:`EMULATED`
dequantizes and multiplies in FP32, which runs every recipe on any device with the same numbers up to accumulation
order.

``disable_scaling=True`` casts every operand with a dequantization scale of 1, i.e. no scaling at all. It exists as
a negative control for the convergence check: gradients (``|g|`` around 1e-5) then fall below E4M3's smallest
subnormal (2**-9) and flush to zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fp8bench.core.precisions import Granularity, ScaledRecipe
from fp8bench.numerics.quantize import (
    Quantized,
    Quantizer,
    cast_stats,
    hadamard_16,
    quantize_tensorwise,
    quantizer_for,
    random_hadamard_transform,
)
from fp8bench.numerics.scaled_gemm import ScaledGemm, emulated_scaled_mm, fp8_scaled_mm

GemmFn = Callable[[Quantized, Quantized, torch.dtype, bool], torch.Tensor]  # (lhs, rhs, out dtype, fast_accum)
NATIVE: GemmFn = fp8_scaled_mm
EMULATED: GemmFn = emulated_scaled_mm
# Seed of the random signs of each layer's Hadamard transform (fixed, so that runs are reproducible).
RHT_SEED = 0x4854


def _transposed(q: Quantized) -> Quantized:
    """The transpose of a tensorwise-quantized tensor: same scale, data made row-major again."""
    return Quantized(q.data.t().contiguous(), q.scale, q.fmt, q.granularity, q.block)


class _Operands:
    """The quantizers one FP8 linear layer applies, one per (GEMM, operand) that needs its own scales."""

    def __init__(self, recipe: ScaledRecipe, disable_scaling: bool) -> None:
        fwd, bwd = recipe.forward_format, recipe.backward_format
        self.reuse_transposes = recipe.granularity is Granularity.TENSORWISE or disable_scaling
        if disable_scaling:
            def unscaled(fmt: Any) -> Quantizer:
                return lambda t: quantize_tensorwise(t, fmt, torch.ones((), device=t.device))

            self.x, self.w, self.grad = unscaled(fwd), unscaled(fwd), unscaled(bwd)
            return
        # Delayed scaling: each closure owns an AmaxHistory, so these three persist across steps.
        stochastic = recipe.stochastic_rounding  # gradients only (a 4-bit option), as in NVIDIA's NVFP4 recipe
        self.x = quantizer_for(recipe, "lhs", fwd)
        self.w = quantizer_for(recipe, "rhs", fwd)
        self.grad = quantizer_for(recipe, "lhs", bwd, stochastic=stochastic)
        if not self.reuse_transposes:
            self.w_t = quantizer_for(recipe, "rhs", fwd)  # W^T [K, N] in dgrad
            self.grad_t = quantizer_for(recipe, "lhs", bwd, stochastic=stochastic)  # dy^T [N, M] in wgrad
            self.x_t = quantizer_for(recipe, "lhs", fwd)  # x^T [K, M] in wgrad: an activation, 1x128 blocks
        self.hadamard_signs: torch.Tensor | None = None
        self._hadamard: dict[torch.device, torch.Tensor] = {}  # the matrix on each device it is used on
        if recipe.rht:  # a 4-bit option
            draw = torch.rand(16, generator=torch.Generator().manual_seed(RHT_SEED))
            self.hadamard_signs = torch.where(draw < 0.5, -1.0, 1.0)

    def hadamard(self, device: torch.device) -> torch.Tensor:
        """The layer's random Hadamard matrix on ``device``, built on first use there (a case's warm-up), so that
        no timed call copies it from the host."""
        h = self._hadamard.get(device)
        if h is None:
            assert self.hadamard_signs is not None
            h = self._hadamard[device] = hadamard_16(device, self.hadamard_signs)
        return h

    def wgrad_operands(self, dy_t: torch.Tensor, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``dy^T`` and ``x^T`` as the wgrad GEMM quantizes them: Hadamard-transformed along the tokens if asked."""
        if self.hadamard_signs is None:
            return dy_t, x_t
        h = self.hadamard(dy_t.device)
        return random_hadamard_transform(dy_t, h), random_hadamard_transform(x_t, h)


class _Fp8LinearFunction(torch.autograd.Function):
    """``y = x @ W^T`` with FP8 operands in all three GEMMs (see the module docstring for the layouts)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, layer: Fp8Linear) -> torch.Tensor:
        ops = layer.operands
        qx, qw = ops.x(x), ops.w(weight)
        y = layer.matmul(qx, qw, x.dtype, layer.recipe.fast_accum)
        if layer.sample_stats:
            layer.note_stats("input", x, qx)
            layer.note_stats("weight", weight, qw)
        ctx.layer = layer
        ctx.quantized = (qx, qw)
        # Tensorwise recipes reuse the FP8 copies; the others requantize x along M in the wgrad GEMM.
        ctx.save_for_backward(None if ops.reuse_transposes else x, weight)
        ctx.x_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        layer: Fp8Linear = ctx.layer
        ops = layer.operands
        x, weight = ctx.saved_tensors
        qx, qw = ctx.quantized
        dy = dy.contiguous()
        qg = ops.grad(dy)
        if layer.sample_stats:
            layer.note_stats("grad_output", dy, qg)
        dx = dw = None
        if ctx.needs_input_grad[0]:
            qw_t = _transposed(qw) if ops.reuse_transposes else ops.w_t(weight.t().contiguous())
            dx = layer.matmul(qg, qw_t, ctx.x_dtype, False)
        if ctx.needs_input_grad[1]:
            if ops.reuse_transposes:
                qg_t, qx_t = _transposed(qg), _transposed(qx)
            else:
                dy_t, x_t = ops.wgrad_operands(dy.t().contiguous(), x.t().contiguous())
                qg_t, qx_t = ops.grad_t(dy_t), ops.x_t(x_t)
            dw = layer.matmul(qg_t, qx_t, torch.bfloat16, False).to(weight.dtype)
        return dx, dw, None


class Fp8Linear(nn.Module):
    """Drop-in replacement of ``nn.Linear`` whose three GEMMs run in FP8 under ``recipe``.

    The weight stays a high-precision master parameter (FP32 in training); activations are computed in
    ``compute_dtype`` (BF16), or in the autocast dtype when autocast is on. ``gemm`` picks native or emulated
    FP8 GEMMs. Set ``sample_stats`` to record amax and overflow/underflow fractions of the operands on the next
    calls (read them from :attr:`stats`); sampling costs extra passes over each tensor, so it is off by default.
    """

    def __init__(self, in_features: int, out_features: int, recipe: ScaledRecipe, *, bias: bool = False,
                 gemm: GemmFn = NATIVE, disable_scaling: bool = False, compute_dtype: torch.dtype = torch.bfloat16,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        self.recipe, self.gemm, self.disable_scaling = recipe, gemm, disable_scaling
        # The native kernel is chosen here, once, outside any compiled region: choosing it asks torch what it has.
        # Without scaling every operand is cast tensorwise with a unit scale.
        self.kernel: ScaledGemm | None = None
        if gemm is NATIVE:
            self.kernel = (ScaledGemm(Granularity.TENSORWISE, False) if disable_scaling
                           else ScaledGemm.for_recipe(recipe))
        self.compute_dtype = compute_dtype
        self.operands = _Operands(recipe, disable_scaling)
        self.sample_stats = False
        self.stats: dict[str, dict[str, float]] = {}

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: ScaledRecipe, **kwargs: Any) -> Fp8Linear:
        """An FP8 layer sharing ``linear``'s parameters (so an optimizer built later sees the same tensors)."""
        layer = cls(linear.in_features, linear.out_features, recipe, bias=False, device="meta", **kwargs)
        layer.weight = linear.weight  # type: ignore[assignment]  # torch types nn.Linear.weight as Tensor
        layer.bias = linear.bias
        return layer

    def matmul(self, lhs: Quantized, rhs: Quantized, out_dtype: torch.dtype, fast_accum: bool) -> torch.Tensor:
        """``lhs @ rhs^T`` through the layer's GEMM (the native kernel it holds, or the emulated product)."""
        if self.kernel is not None:
            return self.kernel.product(lhs, rhs, out_dtype, fast_accum)
        return self.gemm(lhs, rhs, out_dtype, fast_accum)

    def note_stats(self, name: str, source: torch.Tensor, q: Quantized) -> None:
        """Record one operand's amax and cast statistics (fractions of its elements)."""
        cs = cast_stats(source.detach(), q)
        self.stats[name] = {"amax": source.detach().abs().max().item(), "overflow_frac": cs.overflow_frac,
                            "underflow_frac": cs.underflow_frac}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.compute_dtype
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            y = _Fp8LinearFunction.apply(x2, self.weight, self)
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        scaling = "no scaling" if self.disable_scaling else self.recipe.describe()
        gemm = "native" if self.gemm is NATIVE else "emulated"
        return f"in_features={self.in_features}, out_features={self.out_features}, {scaling}, {gemm} GEMM"


def alignment_reason(recipe: ScaledRecipe, tokens: int, layers: dict[str, tuple[int, int]],
                     backward: bool = True) -> str | None:
    """Why FP8 linear layers of these sizes cannot run under ``recipe`` (``None``: every GEMM is aligned).

    ``layers`` maps a name to ``(in_features, out_features)``. Each GEMM's ``(M, N, K)`` must meet the recipe's
    :meth:`~fp8bench.core.precisions.ScaledRecipe.gemm_alignment`: forward ``(tokens, out, in)``, and in training also
    dgrad ``(tokens, in, out)`` and wgrad ``(out, in, tokens)``, whose reduction runs over the tokens.
    """
    need = recipe.gemm_alignment()
    bad: list[str] = []
    for name, (fan_in, fan_out) in layers.items():
        gemms = {"forward": (tokens, fan_out, fan_in)}
        if backward:
            gemms.update(dgrad=(tokens, fan_in, fan_out), wgrad=(fan_out, fan_in, tokens))
        for gemm, dims in gemms.items():
            off = [f"{axis}={v} (multiple of {d})" for axis, v, d in zip("MNK", dims, need, strict=True) if v % d]
            if off:
                bad.append(f"{name} {gemm} GEMM {', '.join(off)}")
    if not bad:
        return None
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{recipe.name} GEMMs need aligned dimensions: " + "; ".join(bad[:3]) + more


def swap_linears(module: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``module`` (recursively, in place) by ``make(linear)``; returns it.

    A bare ``nn.Linear`` passed as ``module`` itself is returned converted.
    """
    if type(module) is nn.Linear:
        return make(module)
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            setattr(module, name, make(child))
        else:
            swap_linears(child, make)
    return module


def fp8_layers(module: nn.Module) -> list[tuple[str, Fp8Linear]]:
    """Every :class:`Fp8Linear` in ``module`` with its qualified name."""
    return [(name, m) for name, m in module.named_modules() if isinstance(m, Fp8Linear)]
