"""The ``grouped_gemm`` workload: the expert GEMMs of a mixture-of-experts (MoE) layer.

An MoE layer sends each of ``tokens`` tokens to ``top_k`` of its ``g`` experts (the router's choice). After the
dispatch, the token copies routed to expert ``e`` sit together, ``m_e`` rows of ``A``, and every expert multiplies
its own rows by its own weight: ``Y[rows of e] = A[rows of e] @ W[e]^T`` with ``A`` ``[sum m_e, K]``, ``W``
``[g, N, K]`` (``nn.Linear`` layout per expert) and ``Y`` ``[sum m_e, N]``. The groups are *jagged*: ``m_e``
differs from expert to expert. A grouped GEMM kernel (``torch._grouped_mm``, ``torch._scaled_grouped_mm``) runs all
of them in one launch from the int32 group end offsets ``offs``; without one, a framework loops over the experts.

Routing (deterministic: it depends on the shape alone, so every precision and backend of a run sees the same
groups, and FLOPs have a closed form):

* ``route=balanced``: token ``t``'s ``j``-th choice is expert ``(t*top_k + j) mod g``, so every expert gets
  ``tokens*top_k/g`` rows, give or take one (the ideal a load-balancing loss aims at).
* ``route=zipf``: expert popularity follows Zipf's law, ``p(rank r) ~ r^-alpha``; which expert holds which rank is a
  seeded permutation, and each token draws ``top_k`` distinct experts from ``p`` (``torch.multinomial`` without
  replacement, seeded by ``seed``). ``alpha`` (default 1.2) sets the skew: 0 would be uniform, 1.2 with 8 experts
  gives the hottest expert about three times its fair share.

Token-group padding: MoE frameworks pad each expert's group to a multiple of ``align`` rows (zero rows) so that
every group starts on a 16-byte boundary for the GPU's TMA loads and, for MX recipes, on a whole 32-row block
(torchtitan ``set_token_group_alignment_size_m``: 8 for BF16, 16 for FP8, 32 for MXFP8). ``align`` defaults to 32,
so that one shape serves every precision; ``align=1`` turns padding off. The padding rows are real work for the
kernel and are counted.

Shapes ``key=value,...``: ``g`` experts, ``tokens``, ``top_k`` (<= g), ``n`` and ``k`` (each expert's GEMM:
``N`` outputs, ``K`` inputs), ``route`` (``balanced``/``zipf``), ``alpha`` (zipf only, > 0), ``seed`` (routing),
``align``, and ``impl``: ``grouped`` (one grouped kernel; the default) or ``loop`` (a Python loop of per-expert
GEMMs, ``torch.matmul`` / ``torch._scaled_mm``). Missing keys take the defaults of :data:`DEFAULTS`.

Closed forms, per call (``m_e`` padded group sizes, ``M = sum m_e``, ``E_active`` experts with ``m_e > 0``):

* FLOPs ``= 2 * M * N * K``;
* minimum bytes ``= M*K*in + E_active*N*K*in + M*N*out``: the routed rows and every *active* expert's weight read
  once, the output written once (an idle expert's weight is never read). Scales and offsets are negligible.

Phases: ``quantize`` (both operands, every expert's weight included), ``gemm``, ``epilogue`` (the output cast,
where the kernel does not fuse it), as for ``gemm``. Precisions: ``fp32``, ``bf16``, ``fp8_rowwise`` and ``mxfp8``;
the others are refused with the reason. Numerics: against an FP64 loop over the experts on the same inputs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import Precision, ScaledRecipe
from fp8bench.core.shapes import Shape, ShapeError, parse_positive, split_pair
from fp8bench.hardware.capabilities import operand_layout
from fp8bench.hardware.grouped_rules import GROUP_ALIGN_ROWS
from fp8bench.workloads.gemm import OPERAND_BYTES, OUTPUT_BYTES, output_dtype
from fp8bench.workloads.memory import refusal
from fp8bench.workloads.transformer_step import PROBE_MIN_RATIO

ROUTES = ("balanced", "zipf")
IMPLS = ("grouped", "loop")
INT_KEYS = ("g", "tokens", "top_k", "n", "k", "seed", "align")
KEYS = ("g", "tokens", "top_k", "n", "k", "route", "alpha", "seed", "align", "impl")
# A CPU-sized MoE layer: 8 experts, 512 tokens routed to 2 each (1024 rows), 256x256 experts. Groups are padded
# to 32 rows, the strictest recipe's rule (MXFP8), so that one shape serves every precision.
DEFAULTS: dict[str, Any] = {"g": 8, "tokens": 512, "top_k": 2, "n": 256, "k": 256, "route": "balanced",
                            "seed": 0, "align": 32, "impl": "grouped"}
DEFAULT_ALPHA = 1.2
# The precisions this workload measures: the float baselines and the two FP8 recipes grouped kernels exist for.
PRECISIONS = ("fp32", "bf16", "fp8_rowwise", "mxfp8")


@dataclass(frozen=True)
class Routing:
    """Rows per expert: ``counts`` as routed, ``padded`` after token-group padding, ``offsets`` the int32 group
    ends a grouped kernel takes (``offsets[e] = padded[0] + ... + padded[e]``)."""

    counts: tuple[int, ...]
    padded: tuple[int, ...]

    @property
    def offsets(self) -> tuple[int, ...]:
        ends, total = [], 0
        for m in self.padded:
            total += m
            ends.append(total)
        return tuple(ends)

    @property
    def rows(self) -> int:
        """``M``, the rows of ``A`` and ``Y`` (padding included)."""
        return sum(self.padded)

    @property
    def active(self) -> int:
        """Experts that received at least one token."""
        return sum(1 for m in self.padded if m)

    @property
    def imbalance(self) -> float:
        """The busiest expert's rows over the mean (1.0: perfectly balanced)."""
        return max(self.counts) / (sum(self.counts) / len(self.counts))


def zipf_probabilities(g: int, alpha: float) -> torch.Tensor:
    """``p(rank r) = r^-alpha / sum_j j^-alpha`` for ranks 1..g (FP64)."""
    weights = torch.arange(1, g + 1, dtype=torch.float64) ** -alpha
    return weights / weights.sum()


_ROUTE_CHUNK = 16384  # tokens routed per multinomial draw


@functools.lru_cache(maxsize=64)
def route_counts(g: int, tokens: int, top_k: int, route: str, alpha: float, seed: int) -> tuple[int, ...]:
    """Rows each expert receives (before padding); they sum to ``tokens * top_k``. See the module docstring."""
    if route == "balanced":
        total = tokens * top_k
        return tuple(total // g + (1 if e < total % g else 0) for e in range(g))
    if route != "zipf":
        raise ValueError(f"route {route!r}; accepted: {', '.join(ROUTES)}")
    gen = torch.Generator().manual_seed(seed)
    holder = torch.randperm(g, generator=gen)  # holder[r] is the expert with popularity rank r + 1
    probs = zipf_probabilities(g, alpha).float()
    counts = torch.zeros(g, dtype=torch.int64)
    # Tokens are drawn in chunks so that a million tokens over 256 experts never holds a [tokens, g] matrix.
    for start in range(0, tokens, _ROUTE_CHUNK):
        rows = min(_ROUTE_CHUNK, tokens - start)
        ranks = torch.multinomial(probs.expand(rows, g), top_k, replacement=False, generator=gen)
        counts += torch.bincount(holder[ranks].reshape(-1), minlength=g)
    return tuple(counts.tolist())


def routing(shape: Shape) -> Routing:
    """The (deterministic) routing of a parsed ``grouped_gemm`` shape."""
    counts = route_counts(shape["g"], shape["tokens"], shape["top_k"], str(shape["route"]),
                          float(shape.get("alpha", 0.0)), shape["seed"])
    align = shape["align"]
    return Routing(counts, tuple(-(-c // align) * align for c in counts))


def _parse_value(text: str, key: str, raw: str) -> Any:
    what = f"grouped_gemm shape {text!r}: {key}"
    if key == "seed":  # any non-negative integer; 0 is the default
        if not raw.isdigit():
            raise ShapeError(f"{what} = {raw!r} must be a non-negative integer")
        return int(raw)
    if key in INT_KEYS:
        return parse_positive(raw, what)
    if key == "route":
        if raw not in ROUTES:
            raise ShapeError(f"{what} = {raw!r}; accepted: {', '.join(ROUTES)}")
        return raw
    if key == "impl":
        if raw not in IMPLS:
            raise ShapeError(f"{what} = {raw!r}; accepted: {', '.join(IMPLS)}")
        return raw
    try:  # alpha
        alpha = float(raw)
    except ValueError:
        raise ShapeError(f"{what} = {raw!r} is not a number (the Zipf exponent, for example 1.2)") from None
    if not (math.isfinite(alpha) and 0 < alpha <= 10):
        raise ShapeError(f"{what} = {raw!r} must be a Zipf exponent in (0, 10]")
    return alpha


class GroupedGemm(Workload):
    name = "grouped_gemm"
    phases = ("quantize", "gemm", "epilogue")
    description = "MoE expert GEMMs: tokens routed (balanced or Zipf) to g experts, Y_e = A_e @ W_e^T per expert"
    default_shape = "g=8,tokens=512,top_k=2,n=256,k=256"

    def parse_shape(self, text: str) -> Shape:
        values: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, raw = split_pair(part, text, "grouped_gemm shape", f"; keys: {', '.join(KEYS)}")
            if key not in KEYS:
                raise ShapeError(f"grouped_gemm shape {text!r}: unknown key {key!r}; accepted: {', '.join(KEYS)}")
            if key in values:
                raise ShapeError(f"grouped_gemm shape {text!r}: {key} is given twice")
            values[key] = _parse_value(text, key, raw)
        shape = {**DEFAULTS, **values}
        if shape["route"] == "zipf":
            shape.setdefault("alpha", DEFAULT_ALPHA)
        elif "alpha" in values:
            raise ShapeError(f"grouped_gemm shape {text!r}: alpha applies to route=zipf only (route is "
                             f"{shape['route']})")
        if shape["top_k"] > shape["g"]:
            raise ShapeError(f"grouped_gemm shape {text!r}: top_k = {shape['top_k']} exceeds g = {shape['g']} "
                             "(each token picks top_k distinct experts)")
        return {key: shape[key] for key in KEYS if key in shape}

    def flops(self, shape: Shape) -> int:
        return 2 * routing(shape).rows * shape["n"] * shape["k"]

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        r = routing(shape)
        n, k = shape["n"], shape["k"]
        in_bytes = 1 if isinstance(precision, ScaledRecipe) else precision.dtype.itemsize
        return (r.rows * k + r.active * n * k) * in_bytes + r.rows * n * output_dtype(precision).itemsize

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        if precision.name not in PRECISIONS:
            return (f"grouped_gemm measures {', '.join(PRECISIONS)}; {precision.name} is not among them "
                    "(no grouped kernel takes it)")
        if not isinstance(precision, ScaledRecipe):
            return None
        _need_m, need_n, need_k = precision.gemm_alignment()
        bad = [f"{key} = {shape[key]} (multiple of {need})" for key, need in (("n", need_n), ("k", need_k))
               if shape[key] % need]
        # The token-group alignment the recipe's grouped kernel needs, rows (the conformance rule's own table).
        align = GROUP_ALIGN_ROWS[operand_layout(precision.granularity)]
        if shape["align"] % align:
            bad.append(f"align = {shape['align']} (token groups padded to a multiple of {align} rows)")
        if bad:
            return f"{precision.name} grouped GEMM needs " + ", ".join(bad)
        return None

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        r = routing(shape)
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(r.rows, shape["k"], generator=gen)
        # Padding rows are zeros, as a framework's padded dispatch fills them.
        start = 0
        for count, padded in zip(r.counts, r.padded, strict=True):
            a[start + count:start + padded] = 0
            start += padded
        # Weights with the 1/sqrt(K) fan-in scale of a trained layer keep outputs O(1).
        w = torch.randn(shape["g"], shape["n"], shape["k"], generator=gen) / shape["k"] ** 0.5
        offs = torch.tensor(r.offsets, dtype=torch.int32)
        return {"a": a.to(device.torch), "w": w.to(device.torch), "offs": offs.to(device.torch)}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        a, w = inputs["a"].double(), inputs["w"].double()
        out = torch.zeros(a.shape[0], w.shape[1], dtype=torch.float64, device=a.device)
        for e, start, end in group_bounds(inputs["offs"]):
            out[start:end] = a[start:end] @ w[e].t()
        return out

    def memory_bytes(self, shape: Shape, device: Device) -> int:
        """Bytes one case holds at its peak (the ``gemm`` workload's per-element accounting, every expert's
        weight counted: the kernel's working copies quantize all of them)."""
        r = routing(shape)
        n, k = shape["n"], shape["k"]
        per_output = OUTPUT_BYTES["device" if device.is_cuda else "cpu"]
        return OPERAND_BYTES * (r.rows * k + shape["g"] * n * k) + per_output * r.rows * n

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        return refusal(device, self.memory_bytes(shape, device), "this grouped GEMM",
                       "FP32 routed rows and expert weights, the kernel's working copies, the output, the copies "
                       "the output check keeps and the FP64 reference")

    def probe_shape(self, shape: Shape, max_flops: float) -> Shape | None:
        # A small case is dominated by per-expert call overheads, so extrapolating it by FLOPs from a smaller one
        # would be far too pessimistic: only cases well above the probe level are probed (as transformer_step).
        if self.flops(shape) <= PROBE_MIN_RATIO * max_flops:
            return None
        probe = dict(shape)
        # Fewer tokens, same experts: the probe keeps the per-expert GEMM sizes and the routing's character.
        while probe["tokens"] > probe["g"] and self.flops(probe) > max_flops:
            probe["tokens"] = max(probe["g"], probe["tokens"] // 2)
        return probe


def routing_fields(shape: Shape) -> dict[str, Any]:
    """Record extras describing a case's routing: rows after padding, active experts, the busiest expert's rows
    and its share over the mean (``expert_imbalance``, 1.0 = balanced)."""
    r = routing(shape)
    return {"routed_rows": r.rows, "experts_active": r.active, "expert_rows_max": max(r.padded),
            "expert_imbalance": round(r.imbalance, 3)}


def group_bounds(offs: torch.Tensor) -> list[tuple[int, int, int]]:
    """``(expert, first row, end row)`` of every non-empty group, from int32 group end offsets."""
    out, start = [], 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out.append((e, start, end))
        start = end
    return out


GROUPED_GEMM = WORKLOADS.add("grouped_gemm", GroupedGemm())
