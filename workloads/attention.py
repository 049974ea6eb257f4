"""The ``attention`` workload: one attention block, ``x -> QKV projection -> attention -> output projection``.

``x`` is ``[b, s, h*d]``; the fused QKV projection makes ``h`` query heads and ``kv_heads`` key/value heads of size
``d`` (grouped-query attention when ``kv_heads < h``); scaled-dot-product attention (causal by default) mixes the
sequence; the output projection maps ``h*d`` back to the width. The two projections are the precision-controlled
linear layers. Attention itself runs in the activation dtype (BF16 for FP8 recipes); with ``fp8_attn=1`` Q, K and V
are first quantize-dequantized to the recipe's FP8 format with per-tensor scales, which is what FP8 attention
kernels do to their inputs (emulated on every device: PyTorch has no FP8 attention inputs on the CPU).

Shapes: ``PRESET[,key=value...]`` or ``b=..,h=..,s=..,d=..[,kv_heads=..]`` plus flags ``causal`` (default 1),
``backward`` (0: forward only, the default; 1: forward and backward) and ``fp8_attn`` (default 0). Presets take their
head layout from real models: ``tiny`` (CPU), ``gpt2_small`` (12 heads of 64), ``llama3_8b`` (32 query and 8 KV heads
of 128), ``llama3_70b`` (64 and 8 of 128); a preset's ``s`` may not exceed its context limit.

Phases: ``qkv_proj``, ``attention``, ``out_proj``; with ``backward=1`` also ``out_proj_bwd``, ``attention_bwd``,
``qkv_proj_bwd`` (gradients of the layer input and of both weights). Each phase runs on the tensors the previous one
left, cut out of the graph, so phases time separately and add up to the end-to-end call.

FLOPs: :func:`fp8bench.workloads.model.linear_flops` for the projections and
:func:`~fp8bench.workloads.model.attention_core_flops` for attention (causal counted as half).

Numerics: ``output()`` is the block's output ``y`` (forward mode) or ``y`` followed by the input gradient ``dx``
(forward+backward), flattened; the reference computes the same in FP64 from the same FP32 weights. The timed call
returns ``y`` or ``(y, dx)`` unflattened (flattening and the FP64 copy stay out of the samples); its last value is
checked against ``output()`` after timing. Bitwise, except ``dx`` on CUDA: PyTorch's flash and memory-efficient
attention backward kernels "default to a non-deterministic algorithm" (their own warning, in
``aten/src/ATen/native/transformers/cuda/attention_backward.cu``, torch 2.x), so there the two are compared by SQNR.

Backend contract: :func:`build_attention_pipeline` takes ``convert``, which receives the block (an ``nn.Module`` whose
``qkv`` and ``out`` children are plain ``nn.Linear``) and returns it with those layers swapped for the backend's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, TimedReturn, Unsupported
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import Precision, ScaledRecipe
from fp8bench.core.shapes import Shape, ShapeError
from fp8bench.numerics.fp8_linear import alignment_reason
from fp8bench.numerics.quantize import quantize_tensorwise
from fp8bench.workloads.memory import CHECKED_OUTPUTS, refusal
from fp8bench.workloads.model import (
    Attention,
    attention_core_flops,
    linear_flops,
    parse_preset_shape,
    precision_context,
)
from fp8bench.workloads.transformer_step import PROBE_MIN_RATIO

Convert = Callable[[nn.Module], nn.Module]

SHAPE_KEYS = ("b", "h", "s", "d", "kv_heads")
FLAG_KEYS = ("causal", "backward", "fp8_attn")
# Head layouts of published models; ``max_seq`` is each model's context length (Llama 3.1: 128K tokens).
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"b": 4, "h": 4, "s": 64, "d": 32, "kv_heads": 2, "max_seq": 256},
    "gpt2_small": {"b": 8, "h": 12, "s": 1024, "d": 64, "kv_heads": 12, "max_seq": 1024},
    "llama3_8b": {"b": 1, "h": 32, "s": 8192, "d": 128, "kv_heads": 8, "max_seq": 131072},
    "llama3_70b": {"b": 1, "h": 64, "s": 8192, "d": 128, "kv_heads": 8, "max_seq": 131072},
}
_META_KEYS = ("b", "h", "s", "d", "kv_heads", "causal", "backward", "fp8_attn")


def fp8_qkv_hook(recipe: ScaledRecipe) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Quantize-dequantize Q, K, V to the recipe's forward format with per-tensor scales.

    The backward pass treats the rounding as identity (straight-through), as FP8 attention kernels do.
    """
    fmt = recipe.forward_format

    def qdq(t: torch.Tensor) -> torch.Tensor:
        rounded = quantize_tensorwise(t.detach(), fmt).dequantize(t.dtype)
        return t + (rounded - t).detach()

    def hook(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return qdq(q), qdq(k), qdq(v)

    return hook


class AttentionBlock(Workload):
    name = "attention"
    phases = ("qkv_proj", "attention", "out_proj", "out_proj_bwd", "attention_bwd", "qkv_proj_bwd")
    description = "x -> fused QKV projection -> scaled-dot-product attention (GQA, causal) -> output projection"
    default_shape = "tiny"

    def parse_shape(self, text: str) -> Shape:
        first = text.split(",")[0].strip()
        named = bool(first) and "=" not in first
        base = {**PRESETS, "": {k: 1 for k in SHAPE_KEYS}}
        name, values = parse_preset_shape(text, base, "", (*SHAPE_KEYS, "max_seq"), FLAG_KEYS, "attention shape")
        if not named:
            keys = {p.split("=")[0].strip() for p in text.split(",") if "=" in p}
            missing = [k for k in ("b", "h", "s", "d") if k not in keys]
            if missing:
                raise ShapeError(f"attention shape {text!r}: missing {', '.join(missing)}; expected b,h,s,d "
                                 f"[,kv_heads,causal,backward,fp8_attn] or a preset ({', '.join(PRESETS)})")
            if "kv_heads" not in keys:
                values["kv_heads"] = values["h"]
        if values["h"] % values["kv_heads"]:
            raise ShapeError(f"attention shape {text!r}: kv_heads = {values['kv_heads']} does not divide "
                             f"h = {values['h']}")
        limit = values.get("max_seq") if named or "max_seq" in text else None
        if limit is not None and values["s"] > limit:
            raise ShapeError(f"attention shape {text!r}: s = {values['s']} exceeds the {name} preset's context "
                             f"limit of {limit}")
        values.setdefault("causal", 1)
        values.setdefault("backward", 0)
        values.setdefault("fp8_attn", 0)
        return {k: values[k] for k in _META_KEYS}

    def trains(self, shape: Shape) -> bool:
        return bool(shape["backward"])

    def flops(self, shape: Shape) -> int:
        b, h, s, d, kv = (shape[k] for k in SHAPE_KEYS)
        bwd = bool(shape["backward"])
        tokens, width = b * s, h * d
        return (linear_flops(tokens, width, (h + 2 * kv) * d, bwd)
                + attention_core_flops(b, h, s, d, bool(shape["causal"]), bwd)
                + linear_flops(tokens, h * d, width, bwd))

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        b, h, s, d, kv = (shape[k] for k in SHAPE_KEYS)
        width, tokens = h * d, b * s
        elem = 1 if isinstance(precision, ScaledRecipe) else precision.dtype.itemsize
        act = 2 if isinstance(precision, ScaledRecipe) else elem
        weights = ((h + 2 * kv) * d * width + width * width) * elem
        fwd = tokens * width * act * 2 + weights  # x read, y written, weights read
        if not shape["backward"]:
            return fwd
        return 2 * fwd + ((h + 2 * kv) * d * width + width * width) * 4  # + dy read, dx written, FP32 dW written

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        if shape["fp8_attn"] and not isinstance(precision, ScaledRecipe):
            return f"fp8_attn=1 quantizes Q, K, V with an FP8 recipe; {precision.name} is not one"
        if isinstance(precision, ScaledRecipe):
            need_m, need_n, need_k = precision.gemm_alignment()
            tokens, width = shape["b"] * shape["s"], shape["h"] * shape["d"]
            qkv = (shape["h"] + 2 * shape["kv_heads"]) * shape["d"]
            bad = [f"{what} = {v} (multiple of {m})" for what, v, m in (
                ("tokens b*s", tokens, need_m), ("width h*d", width, max(need_n, need_k)),
                ("qkv features", qkv, need_n)) if v % m]
            # The weight-gradient GEMM reduces over tokens, so tokens must meet the K rule too in backward mode.
            if shape["backward"] and tokens % need_k and not bad:
                bad.append(f"tokens b*s = {tokens} (multiple of {need_k} for the weight-gradient GEMM)")
            if bad:
                return f"{precision.name} projections need aligned GEMM dimensions: " + ", ".join(bad)
            # The same rule GEMM by GEMM (catches, e.g., a dgrad GEMM reducing over the qkv features).
            return alignment_reason(precision, tokens, {"qkv projection": (width, qkv), "output projection": (
                width, width)}, backward=bool(shape["backward"]))
        return None

    def memory_bytes(self, shape: Shape) -> int:
        """Bytes one case holds at its peak: FP32 source tensors (x, dy, weights), activations kept for backward,
        the outputs the output check keeps beside the call's own ([tokens, width] FP32 each; with backward, ``y``
        and ``dx`` in FP64, plus the copy :func:`_flat` makes of the last timed value before it is kept), and one
        FP32 score matrix, which PyTorch's math attention kernel materializes (the fused kernels do not; the worst
        case)."""
        b, h, s, d, kv = (shape[k] for k in SHAPE_KEYS)
        tokens, width = b * s, h * d
        checked = (CHECKED_OUTPUTS + 1) * 16 if shape["backward"] else CHECKED_OUTPUTS * 4
        return 4 * (2 * tokens * width + ((h + 2 * kv) * d + h * d) * width) + 8 * tokens * width * 4 \
            + checked * tokens * width + 4 * b * h * s * s * (2 if shape["backward"] else 1)

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        return refusal(device, self.memory_bytes(shape), "this attention case", "FP32 inputs and weights, "
                       "activations kept for the backward pass, the output check's copies, the math kernel's "
                       "score matrix")

    def probe_shape(self, shape: Shape, max_flops: float) -> Shape | None:
        if self.flops(shape) <= PROBE_MIN_RATIO * max_flops:  # see TransformerStep.probe_shape
            return None
        probe = dict(shape)
        # Halve batch, then sequence, keeping at least 128 tokens (whole blocks for every FP8 recipe).
        for key, floor in (("b", 1), ("s", min(shape["s"], 128))):
            while probe[key] > floor and self.flops(probe) > max_flops:
                probe[key] = max(floor, probe[key] // 2)
        return probe

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        b, h, s, d, kv = (shape[k] for k in SHAPE_KEYS)
        width = h * d
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(b, s, width, generator=gen)
        w_qkv = torch.randn((h + 2 * kv) * d, width, generator=gen) / width**0.5
        w_out = torch.randn(width, h * d, generator=gen) / (h * d) ** 0.5
        dy = torch.randn(b, s, width, generator=gen)
        meta = torch.tensor([shape[k] for k in _META_KEYS], dtype=torch.int64)
        return {"x": x.to(device.torch), "w_qkv": w_qkv.to(device.torch), "w_out": w_out.to(device.torch),
                "dy": dy.to(device.torch), "config": meta}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        shape = dict(zip(_META_KEYS, inputs["config"].tolist(), strict=True))
        block = _block(shape, inputs, torch.float64)
        x = inputs["x"].double().requires_grad_(bool(shape["backward"]))
        y = block(x)
        return _output(y, x, inputs["dy"].double(), bool(shape["backward"]))


def _block(shape: dict[str, int], inputs: dict[str, torch.Tensor], dtype: torch.dtype) -> Attention:
    b, h, s, d, kv = (shape[k] for k in SHAPE_KEYS)
    block = Attention(h * d, h, kv, d, causal=bool(shape["causal"]))
    with torch.no_grad():
        block.qkv.weight.copy_(inputs["w_qkv"])
        block.out.weight.copy_(inputs["w_out"])
    return block.to(device=inputs["x"].device, dtype=dtype)


def _output(y: torch.Tensor, x: torch.Tensor, dy: torch.Tensor, backward: bool) -> torch.Tensor:
    if not backward:
        return _flat(y)
    (dx,) = torch.autograd.grad(y, x, dy.to(y.dtype))
    return _flat((y, dx))


def _flat(value: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The numerics output from ``y`` or ``(y, dx)``: ``y`` flattened, or ``y`` then ``dx`` flattened in FP64."""
    if isinstance(value, torch.Tensor):
        return value.detach().reshape(-1)
    y, dx = value
    return torch.cat([y.detach().reshape(-1).to(torch.float64), dx.reshape(-1).to(torch.float64)])


def build_attention_pipeline(ctx: BuildContext, convert: Convert) -> Pipeline:
    """The ``attention`` pipeline of any backend whose layers ``convert`` swaps in (see the module docstring)."""
    shape, precision = ctx.shape, ctx.precision
    train = bool(shape["backward"])
    block = convert(_block(shape, ctx.inputs, torch.float32))
    notes = _quantize_qkv(block, shape, precision)
    x = ctx.inputs["x"].to(precision.activation_dtype).detach().requires_grad_(train)
    state: dict[str, Any] = {}

    def amp_ctx() -> Any:
        return precision_context(precision, ctx.device)

    def end_to_end() -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # Returns what output() computes, unflattened (the runner flattens the last timed value after timing).
        with amp_ctx():
            y = block(x)
        if not train:
            return y
        return y, torch.autograd.grad(y, [x, *_params(block)], state["dy"])[0]

    def output() -> torch.Tensor:
        x_out = x.detach().requires_grad_(train)
        with amp_ctx():
            y = block(x_out)
        return _output(y, x_out, ctx.inputs["dy"], train)

    with amp_ctx():
        state["dy"] = ctx.inputs["dy"].to(block(x).dtype)
    end_to_end()
    phases = _phases(block, x, state, amp_ctx, train)
    for fn in phases.values():  # every phase's state exists even if the runner's budget skips an earlier phase
        fn()
    notes.append("phases cut the graph between projections and attention; end_to_end runs it whole")
    return Pipeline(end_to_end=end_to_end, phases=phases, output=output, notes=notes,
                    extra={"tokens_per_step": shape["b"] * shape["s"]},
                    returns=timed_return(train, ctx.device))


def timed_return(train: bool, device: Device) -> TimedReturn:
    """What the timed call returns: ``y`` or ``(y, dx)``, flattened into ``output()``'s form after timing; bitwise
    reproducible except the attention backward on CUDA (module docstring, "Numerics")."""
    return TimedReturn.output(_flat, bitwise=not (train and device.is_cuda))


def _quantize_qkv(block: Attention, shape: dict[str, int], precision: Precision) -> list[str]:
    """With ``fp8_attn=1``, hook FP8 quantize-dequantize of Q, K and V into ``block``; the notes that say so."""
    if not shape["fp8_attn"]:
        return []
    if not isinstance(precision, ScaledRecipe):
        raise Unsupported(f"fp8_attn=1 needs an FP8 recipe, got {precision.name}")
    block.qkv_hook = fp8_qkv_hook(precision)
    return [f"FP8 attention emulated: Q, K, V quantize-dequantized to {precision.forward_format.name} with "
            "per-tensor scales; attention in BF16"]


def _params(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def _phases(block: Attention, x: torch.Tensor, state: dict[str, Any], amp_ctx: Callable[[], Any],
            train: bool) -> dict[str, Callable[[], Any]]:
    """The block cut between its projections and attention: each piece forward, and backward when ``train``
    (each backward from the upstream gradient its forward's output received)."""

    def qkv_proj() -> torch.Tensor:
        with amp_ctx():
            state["qkv"] = block.qkv(x)
        return state["qkv"]

    def attention() -> torch.Tensor:
        state["qkv_in"] = state["qkv"].detach().requires_grad_(train)
        with amp_ctx():
            state["o"] = block.core(state["qkv_in"])
        return state["o"]

    def out_proj() -> torch.Tensor:
        state["o_in"] = state["o"].detach().requires_grad_(train)
        with amp_ctx():
            state["y"] = block.out(state["o_in"])
        return state["y"]

    def out_proj_bwd() -> None:
        grads = torch.autograd.grad(state["y"], [state["o_in"], *_params(block.out)], state["dy"], retain_graph=True)
        state["do"] = grads[0]

    def attention_bwd() -> None:
        (state["dqkv"],) = torch.autograd.grad(state["o"], state["qkv_in"], state["do"], retain_graph=True)

    def qkv_proj_bwd() -> None:
        torch.autograd.grad(state["qkv"], [x, *_params(block.qkv)], state["dqkv"], retain_graph=True)

    phases: dict[str, Callable[[], Any]] = {"qkv_proj": qkv_proj, "attention": attention, "out_proj": out_proj}
    if train:
        phases.update(out_proj_bwd=out_proj_bwd, attention_bwd=attention_bwd, qkv_proj_bwd=qkv_proj_bwd)
    return phases


ATTENTION = WORKLOADS.add("attention", AttentionBlock())
