"""The ``torch`` backend's ``collective`` pipelines: ``torch.distributed`` collectives (NCCL between GPUs, gloo
between CPU processes), FP8 packed by :mod:`fp8bench.numerics.fp8_comm`, the tensor-parallel GEMM by ``torch.matmul`` or
``torch._scaled_mm`` as in the ``gemm`` workload.

Each phase closure works on the state the previous one left (see :mod:`fp8bench.core.pipeline`), so ``communicate``
times the collective alone on a buffer already encoded. Collectives go through the single-tensor entry points
(``all_gather_single``, ``reduce_scatter_single`` in torch 2.13; their older names ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` on older releases) and ``all_to_all_single``, which every backend implements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import recipe_gemm_reason
from fp8bench.hardware.distributed import world
from fp8bench.kernels.torch_backend import ATEN_REFUSALS, TORCH
from fp8bench.numerics.fp8_comm import WIRE_GRANULARITIES, WireLayout, decode, pack
from fp8bench.numerics.quantize import Quantized, cast_stats, quantizer_for
from fp8bench.numerics.scaled_gemm import fp8_scaled_mm
from fp8bench.workloads.collective import COLLECTIVE, collective_extra, op_of, result_dtype
from fp8bench.workloads.gemm import output_dtype

# torch 2.13 renamed the single-tensor collectives; GPU runners may bring an older torch (>= 2.4).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _support(precision: Precision, device: Device) -> str | None:
    if isinstance(precision, FloatPrecision):
        if precision.tf32:
            return "TF32 is a GEMM mode on FP32 data; fp32 communicates FP32"
        return None
    assert isinstance(precision, ScaledRecipe)
    if precision.granularity not in WIRE_GRANULARITIES:
        return (f"FP8 communication packs {' or '.join(g.value for g in WIRE_GRANULARITIES)} scales; "
                f"{precision.granularity.value} scales are not implemented for collectives")
    return None


@TORCH.builder("collective", supports=_support)
def build_collective(ctx: BuildContext) -> Pipeline:
    op = op_of(ctx.shape)
    rank, ranks = world()
    build = {"all_gather": _all_gather_pipeline, "reduce_scatter": _reduce_scatter_pipeline,
             "tp_linear": _tp_linear_pipeline}[op]
    pipeline = build(ctx, rank, ranks)
    nbytes = COLLECTIVE.min_bytes(ctx.shape, ctx.precision)
    pipeline.extra.update(collective_extra(ctx.shape, ranks, str(dist.get_backend()), nbytes))
    with refusals(f"torch.distributed refused {op} in {ctx.precision.name} on {ctx.device}", ATEN_REFUSALS):
        pipeline.end_to_end()  # every rank runs it: fills the state each phase reads, or refuses on every rank
    return pipeline


def _stats(sources: dict[str, torch.Tensor], quantized: dict[str, Quantized]) -> dict[str, Any]:
    return {name: cast_stats(sources[name], q) for name, q in quantized.items() if name in sources}


def _all_gather_pipeline(ctx: BuildContext, rank: int, ranks: int) -> Pipeline:
    precision, device = ctx.precision, ctx.device.torch
    m, n = ctx.shape["m"], ctx.shape["n"]
    rows = m // ranks
    out_dtype = result_dtype(precision, "all_gather")
    shard = ctx.inputs["w"][rank * rows:(rank + 1) * rows].to(precision.activation_dtype)
    state: dict[str, Any] = {}

    if isinstance(precision, FloatPrecision):
        gathered = torch.empty(m, n, dtype=shard.dtype, device=device)

        def communicate() -> torch.Tensor:
            _all_gather(gathered, shard)
            return gathered

        return Pipeline(end_to_end=communicate, phases={"communicate": communicate}, output=communicate,
                        prequantized_phases=("communicate",),
                        notes=[f"the shard arrives in {_name(shard.dtype)}: nothing to encode"])

    assert isinstance(precision, ScaledRecipe)
    layout = WireLayout(rows, n, 1, precision.forward_format, precision.granularity)
    quantize = quantizer_for(precision, "rhs")
    received = torch.empty(ranks, layout.chunk_bytes, dtype=torch.uint8, device=device)

    def encode_() -> None:
        state["q"] = quantize(shard)
        state["packed"] = _pack(state["q"], layout)

    def communicate_() -> None:
        _all_gather(received.view(-1), state["packed"])

    def decode_() -> torch.Tensor:
        return decode(received, layout).reshape(m, n).to(out_dtype)

    return _fp8_pipeline(encode_, communicate_, decode_, lambda: _stats({"w": shard}, {"w": state["q"]}),
                         [_fp8_note(precision, layout, "shard")])


def _reduce_scatter_pipeline(ctx: BuildContext, rank: int, ranks: int) -> Pipeline:
    precision, device = ctx.precision, ctx.device.torch
    m, n = ctx.shape["m"], ctx.shape["n"]
    out_dtype = result_dtype(precision, "reduce_scatter")
    grad = ctx.inputs["grad"].to(precision.activation_dtype)
    state: dict[str, Any] = {}

    if isinstance(precision, FloatPrecision):
        reduced = torch.empty(m // ranks, n, dtype=grad.dtype, device=device)

        def communicate() -> torch.Tensor:
            _reduce_scatter(reduced, grad, op=dist.ReduceOp.SUM)
            return reduced

        return Pipeline(end_to_end=communicate, phases={"communicate": communicate}, output=communicate,
                        prequantized_phases=("communicate",),
                        notes=[f"the gradient arrives in {_name(grad.dtype)} and is summed in it by the backend"])

    assert isinstance(precision, ScaledRecipe)
    layout = WireLayout(m, n, ranks, precision.backward_format, precision.granularity)
    quantize = quantizer_for(precision, "rhs", precision.backward_format)
    received = torch.empty(ranks, layout.chunk_bytes, dtype=torch.uint8, device=device)

    def encode_() -> None:
        state["q"] = quantize(grad)
        state["packed"] = _pack(state["q"], layout)

    def communicate_() -> None:
        dist.all_to_all_single(received, state["packed"])

    def decode_() -> torch.Tensor:
        return decode(received, layout).sum(dim=0).to(out_dtype)

    return _fp8_pipeline(encode_, communicate_, decode_, lambda: _stats({"grad": grad}, {"grad": state["q"]}),
                         [_fp8_note(precision, layout, "gradient"),
                          "FP8 reduce-scatter: all-to-all of FP8 chunks, then dequantize and sum in FP32"])


def _tp_linear_pipeline(ctx: BuildContext, rank: int, ranks: int) -> Pipeline:
    """A column-parallel linear layer: each rank multiplies by its ``n / ranks`` columns of the weight, then the
    output blocks are all-gathered."""
    precision = ctx.precision
    cols = ctx.shape["n"] // ranks
    x = ctx.inputs["x"].to(precision.activation_dtype)
    w = ctx.inputs["w"][rank * cols:(rank + 1) * cols].to(precision.activation_dtype)
    if isinstance(precision, FloatPrecision):
        return _tp_linear_float(ctx, x, w, ranks)
    assert isinstance(precision, ScaledRecipe)
    return _tp_linear_fp8(ctx, precision, x, w, ranks)


def _reassemble(chunks: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """``[ranks, m, n/ranks]`` column blocks into ``[m, n]``."""
    return chunks.permute(1, 0, 2).reshape(m, n)


def _tp_linear_float(ctx: BuildContext, x: torch.Tensor, w: torch.Tensor, ranks: int) -> Pipeline:
    """The column-parallel layer in an unscaled precision: the GEMM's output is gathered in its own dtype."""
    m, n = ctx.shape["m"], ctx.shape["n"]
    cols = n // ranks
    gathered = torch.empty(ranks * m, cols, dtype=x.dtype, device=ctx.device.torch)
    state: dict[str, Any] = {}

    def gemm() -> None:
        state["y"] = torch.matmul(x, w.t())

    def communicate() -> None:
        _all_gather(gathered, state["y"])

    def decode_() -> torch.Tensor:
        return _reassemble(gathered.view(ranks, m, cols), m, n)

    def end_to_end() -> torch.Tensor:
        gemm()
        communicate()
        return decode_()

    return Pipeline(end_to_end=end_to_end, phases={"gemm": gemm, "communicate": communicate, "decode": decode_},
                    output=end_to_end, prequantized_phases=("gemm", "communicate"),
                    notes=[f"column-parallel: each rank's GEMM is {m}x{cols}x{ctx.shape['k']}; the output is "
                           f"gathered in {_name(x.dtype)}"])


def _tp_linear_fp8(ctx: BuildContext, precision: ScaledRecipe, x: torch.Tensor, w: torch.Tensor,
                   ranks: int) -> Pipeline:
    """The column-parallel layer in a scaled recipe: a scaled GEMM, its output quantized and gathered as FP8."""
    why = recipe_gemm_reason(ctx.device, precision)
    if why:
        raise Unsupported(f"torch does not run {precision.name} GEMMs on {ctx.device}: {why}")
    m, n = ctx.shape["m"], ctx.shape["n"]
    cols = n // ranks
    quant_x, quant_w = quantizer_for(precision, "lhs"), quantizer_for(precision, "rhs")
    quant_y = quantizer_for(precision, "lhs")
    layout = WireLayout(m, cols, 1, precision.forward_format, precision.granularity)
    received = torch.empty(ranks, layout.chunk_bytes, dtype=torch.uint8, device=ctx.device.torch)
    out_dtype = output_dtype(precision)
    state: dict[str, Any] = {}

    def quantize() -> None:
        state["qx"], state["qw"] = quant_x(x), quant_w(w)

    def gemm() -> None:
        state["y"] = fp8_scaled_mm(state["qx"], state["qw"], out_dtype, precision.fast_accum)

    def encode_() -> None:
        state["qy"] = quant_y(state["y"])
        state["packed"] = _pack(state["qy"], layout)

    def communicate_() -> None:
        _all_gather(received.view(-1), state["packed"])

    def decode_() -> torch.Tensor:
        return _reassemble(decode(received, layout), m, n).to(out_dtype)

    def end_to_end() -> torch.Tensor:
        quantize()
        gemm()
        encode_()
        communicate_()
        return decode_()

    return Pipeline(end_to_end=end_to_end,
                    phases={"quantize": quantize, "gemm": gemm, "encode": encode_, "communicate": communicate_,
                            "decode": decode_},
                    output=end_to_end, prequantized_phases=("gemm", "communicate"),
                    cast_stats=lambda: _stats({"x": x, "w": w, "y": state["y"]},
                                              {"x": state["qx"], "w": state["qw"], "y": state["qy"]}),
                    notes=[f"column-parallel: each rank's FP8 GEMM is {m}x{cols}x{ctx.shape['k']}",
                           _fp8_note(precision, layout, "output shard")])


def _pack(q: Quantized, layout: WireLayout) -> torch.Tensor:
    """One rank's packed buffer; an all-gather sends its one chunk flat, into a flat ``[ranks * chunk]`` output."""
    packed = pack(q, layout)
    return packed.reshape(-1) if layout.chunks == 1 else packed


def _fp8_note(precision: ScaledRecipe, layout: WireLayout, what: str) -> str:
    scales = "one scale per rank's " + what if layout.scales_per_chunk == 1 else "one scale per row"
    return (f"FP8 on the wire: {layout.fmt.name} bytes + FP32 scales ({scales}), "
            f"{layout.chunk_bytes} bytes per chunk")


def _fp8_pipeline(encode_: Callable[[], None], communicate_: Callable[[], None],
                  decode_: Callable[[], torch.Tensor], cast_stats: Callable[[], Any], notes: list[str]) -> Pipeline:
    """An FP8 collective's pipeline: encode (quantize and pack), communicate (the collective alone, the
    pre-quantized figure), decode (unpack and dequantize); end to end is the three in order."""

    def end_to_end() -> torch.Tensor:
        encode_()
        communicate_()
        return decode_()

    return Pipeline(end_to_end=end_to_end, phases={"encode": encode_, "communicate": communicate_, "decode": decode_},
                    output=end_to_end, prequantized_phases=("communicate",), cast_stats=cast_stats, notes=notes)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")

