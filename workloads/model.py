"""A small GPT-style decoder, its presets, and closed-form FLOP and memory counts.

The model is the Llama layout at any size: token and learned position embeddings, then ``layers`` pre-norm blocks
(RMSNorm -> grouped-query causal attention -> residual; RMSNorm -> SwiGLU MLP -> residual), a final RMSNorm and an
output head. Its *precision-controlled projections* are the four ``nn.Linear`` layers of each block (``attn.qkv``,
``attn.out``, ``mlp.gate_up``, ``mlp.down``), which a backend swaps for its FP8 layers by converting
``model.blocks``; embeddings, norms, softmax and the head stay in BF16/FP32, as in practice.

Dtype policy under autocast: parameters are FP32 master weights; embeddings and the residual stream are FP32; norms
compute in FP32; the projections, attention and head run in the autocast dtype; the loss is taken in FP32.

FLOP convention (a multiply-add counts 2; only matrix products are counted, as ``FlopCounterMode`` does):

* a linear layer over ``T`` tokens: ``2*T*in*out`` forward, twice that backward (dgrad and wgrad);
* attention scores and the weighted sum of values: ``4*b*h*s*s*d`` forward, twice that backward (no recompute).
  A **causal** mask needs only the lower triangle, so fp8bench counts causal attention as half of that (the
  convention of FlashAttention's benchmarks). ``dense=True`` counts the full square, which is what PyTorch's
  math kernels compute and what ``FlopCounterMode`` reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.precisions import Precision, ScaledRecipe
from fp8bench.core.shapes import ShapeError, parse_positive, split_pair


@dataclass(frozen=True)
class ModelConfig:
    """Decoder dimensions. ``seq`` is the training sequence length; ``max_seq`` the preset's context limit."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    batch: int
    max_seq: int

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ShapeError(f"heads = {self.heads} does not divide width = {self.width}; "
                             f"choose heads among the divisors of {self.width}")
        if self.heads % self.kv_heads:
            raise ShapeError(f"kv_heads = {self.kv_heads} does not divide heads = {self.heads} "
                             "(grouped-query attention shares each K/V head among a whole number of query heads)")
        if self.seq > self.max_seq:
            raise ShapeError(f"seq = {self.seq} exceeds this preset's context limit max_seq = {self.max_seq}")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def tokens(self) -> int:
        """Tokens per training step."""
        return self.batch * self.seq

    def parameters(self) -> int:
        """Parameter count (embeddings, blocks, norms, head)."""
        d = self.head_dim
        per_layer = (self.width * (self.heads + 2 * self.kv_heads) * d + self.heads * d * self.width
                     + 3 * self.width * self.ffn + 2 * self.width)
        return self.vocab * self.width * 2 + self.max_seq * self.width + self.layers * per_layer + self.width


# Presets: "tiny" and "small" are CPU-sized; the others follow published configurations (GPT-2 small: 12 layers,
# 768 wide, 12 heads, 1024 context; Llama 3.2 1B: 16 layers, 2048 wide, 32 heads, 8 KV heads, FFN 8192, vocabulary
# 128256) with a batch and sequence a single GPU trains.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(layers=2, width=128, heads=4, kv_heads=2, ffn=384, vocab=256, seq=64, batch=4, max_seq=256),
    "small": ModelConfig(layers=4, width=256, heads=8, kv_heads=4, ffn=768, vocab=512, seq=128, batch=8, max_seq=512),
    "gpt2_small": ModelConfig(layers=12, width=768, heads=12, kv_heads=12, ffn=2048, vocab=50304, seq=1024, batch=8,
                              max_seq=1024),
    "llama_1b": ModelConfig(layers=16, width=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, seq=2048, batch=4,
                            max_seq=8192),
}


def linear_flops(tokens: int, in_features: int, out_features: int, backward: bool) -> int:
    fwd = 2 * tokens * in_features * out_features
    return 3 * fwd if backward else fwd


def attention_core_flops(b: int, h: int, s: int, d: int, causal: bool, backward: bool, dense: bool = False) -> int:
    """FLOPs of ``softmax(Q K^T) V`` for ``h`` query heads (K/V sharing under GQA does not change the products)."""
    fwd = 4 * b * h * s * s * d
    if causal and not dense:
        fwd //= 2
    return 3 * fwd if backward else fwd


def block_flops(cfg: ModelConfig, backward: bool, dense: bool = False) -> int:
    t, w, d = cfg.tokens, cfg.width, cfg.head_dim
    return (linear_flops(t, w, (cfg.heads + 2 * cfg.kv_heads) * d, backward)
            + attention_core_flops(cfg.batch, cfg.heads, cfg.seq, d, True, backward, dense)
            + linear_flops(t, cfg.heads * d, w, backward)
            + linear_flops(t, w, 2 * cfg.ffn, backward) + linear_flops(t, cfg.ffn, w, backward))


def model_flops(cfg: ModelConfig, backward: bool = True, dense: bool = False) -> int:
    """Matrix-product FLOPs of one forward (+ backward) pass over ``cfg.tokens`` tokens, head included."""
    return cfg.layers * block_flops(cfg, backward, dense) + linear_flops(cfg.tokens, cfg.width, cfg.vocab, backward)


def training_memory_bytes(cfg: ModelConfig) -> int:
    """A floor on one training step's memory: FP32 weights, gradients and two AdamW moments (16 bytes/parameter),
    plus activations kept for the backward pass (about 20 values per token and width per layer in BF16, the
    attention probabilities of the math kernel, and FP32 logits)."""
    params = cfg.parameters()
    acts = cfg.layers * (20 * cfg.tokens * cfg.width * 2 + 2 * cfg.batch * cfg.heads * cfg.seq * cfg.seq * 2)
    logits = 3 * cfg.tokens * cfg.vocab * 4
    return 16 * params + acts + logits


class RMSNorm(nn.Module):
    """Root-mean-square normalization, computed and returned in FP32 (FP64 for the FP64 reference)."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float() if x.dtype != torch.float64 else x
        return xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * self.weight.to(xf.dtype)


class Attention(nn.Module):
    """Fused QKV projection -> scaled-dot-product attention (grouped-query) -> output projection.

    ``qkv_hook``, when set, maps the ``(q, k, v)`` tensors before attention (FP8 attention emulation).
    """

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, causal: bool = True) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.causal = heads, kv_heads, head_dim, causal
        self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.out = nn.Linear(heads * head_dim, width, bias=False)
        self.qkv_hook = None

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[b, s, (h + 2 kv) d]`` -> q ``[b, h, s, d]``, k and v ``[b, kv, s, d]``."""
        b, s, _ = qkv.shape
        d, h, kv = self.head_dim, self.heads, self.kv_heads
        q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
        return (q.reshape(b, s, h, d).transpose(1, 2), k.reshape(b, s, kv, d).transpose(1, 2),
                v.reshape(b, s, kv, d).transpose(1, 2))

    def core(self, qkv: torch.Tensor) -> torch.Tensor:
        """Attention on the projected ``qkv``; returns ``[b, s, h*d]``."""
        q, k, v = self.split_heads(qkv)
        if self.qkv_hook is not None:
            q, k, v = self.qkv_hook(q, k, v)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.kv_heads != self.heads)
        b, _, s, _ = o.shape
        return o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.core(self.qkv(x)))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate) * up)`` with gate and up fused in one projection."""

    def __init__(self, width: int, ffn: int) -> None:
        super().__init__()
        self.ffn = ffn
        self.gate_up = nn.Linear(width, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.ffn, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(cfg.width), RMSNorm(cfg.width)
        self.attn = Attention(cfg.width, cfg.heads, cfg.kv_heads, cfg.head_dim, causal=True)
        self.mlp = MLP(cfg.width, cfg.ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """The GPT-style decoder. ``forward(tokens)`` returns logits ``[b, s, vocab]``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.width)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy (mean over tokens, in FP32 or FP64) of ``tokens`` ``[b, seq + 1]``."""
        logits = self(tokens[:, :-1])
        acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
        return F.cross_entropy(logits.to(acc).flatten(0, 1), tokens[:, 1:].flatten())


def init_parameters(cfg: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic FP32 initial parameters (GPT-2 scheme): N(0, 0.02), residual outputs scaled by
    ``1/sqrt(2*layers)``, norms at 1. Generated on the CPU so every device starts from the same weights."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {name: p.shape for name, p in Decoder(cfg).to("meta").named_parameters()}
    params = {}
    for name, shape in shapes.items():
        if "norm" in name:
            params[name] = torch.ones(shape)
            continue
        std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("attn.out.weight", "mlp.down.weight")) else 0.02
        params[name] = torch.randn(shape, generator=gen) * std
    return params


def build_decoder(cfg: ModelConfig, params: dict[str, torch.Tensor], device: torch.device | str,
                  dtype: torch.dtype = torch.float32) -> Decoder:
    """A :class:`Decoder` on ``device`` holding copies of ``params`` in ``dtype``."""
    with torch.device("meta"):
        model = Decoder(cfg)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
    return model.to(dtype)


def autocast_dtype(precision: Precision) -> torch.dtype | None:
    """The autocast dtype a precision trains under: BF16 for BF16 and every FP8 recipe (FP8 layers quantize BF16
    activations), FP16 for FP16, none for FP32/TF32."""
    if isinstance(precision, ScaledRecipe):
        return torch.bfloat16
    return None if precision.dtype == torch.float32 else precision.dtype


@contextmanager
def precision_context(precision: Precision, device: Device) -> Iterator[None]:
    """Autocast (and, for TF32, cuBLAS's TF32 switch) around one call in ``precision``."""
    dtype = autocast_dtype(precision)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(getattr(precision, "tf32", False))
    try:
        if dtype is None:
            yield
        else:
            with torch.autocast(device.torch.type, dtype=dtype):
                yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def parse_preset_shape(text: str, presets: dict[str, dict[str, int]], default: str, int_keys: tuple[str, ...],
                       flag_keys: tuple[str, ...] = (), what: str = "shape") -> tuple[str, dict[str, int]]:
    """Parse ``PRESET[,key=value...]`` or ``key=value,...`` (keys not given come from ``default``).

    ``int_keys`` take positive integers, ``flag_keys`` take 0 or 1. Returns the preset name and the values.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    name = default
    if parts and "=" not in parts[0]:
        name = parts.pop(0)
        if name not in presets:
            raise ShapeError(f"{what} {text!r}: unknown preset {name!r}; accepted: {', '.join(presets)} "
                             "(or key=value pairs)")
    values = dict(presets[name])
    for part in parts:
        key, raw = split_pair(part, text, what)
        if key in flag_keys:
            if raw not in ("0", "1"):
                raise ShapeError(f"{what} {text!r}: {key} = {raw!r} must be 0 or 1")
            values[key] = int(raw)
        elif key in int_keys:
            values[key] = parse_positive(raw, f"{what} {text!r}: {key}")
        else:
            raise ShapeError(f"{what} {text!r}: unknown key {key!r}; accepted: {', '.join([*int_keys, *flag_keys])}")
    return name, values
