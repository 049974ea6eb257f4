"""``grouped_gemm`` on the ``torch`` backend: PyTorch's grouped kernels, or a loop of its per-expert GEMMs.

* ``impl=grouped``: ``torch._grouped_mm`` for FP32/BF16 (CUDA's CUTLASS kernel for BF16 on compute capability
  9.0/10.0; elsewhere, the CPU included, ATen's fallback, a loop of ``mm`` over the groups), and
  ``torch._scaled_grouped_mm`` for ``fp8_rowwise`` and ``mxfp8`` (CUDA only; :mod:`fp8bench.hardware.grouped_rules`). On
  the CPU, torch 2.13 has no scaled grouped kernel and refuses the call: the case is skipped with that reason.
* ``impl=loop``: one GEMM per non-empty expert, ``torch.mm`` into slices of one output (float precisions) or
  a :class:`fp8bench.numerics.scaled_gemm.ScaledGemm` on each group's rows and the expert's weight (FP8;
  ``torch._scaled_mm`` runs rowwise scales on the CPU), the results concatenated in the ``epilogue`` phase. This is what
  a framework without a grouped kernel does, and the baseline the grouped kernel must beat.

FP8 operands are quantized by fp8bench's shared quantizers: activations per row (per token) or per 32-element MX
block, every expert's weight per output channel or per MX block, all of them in the timed ``quantize`` phase, which
also lays every operand out as its kernel reads it (MX scales blocked per group and per expert); the ``gemm`` phase is
the kernel launches alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import capabilities_for, forward_gemm_spec, recipe_gemm_reason
from fp8bench.hardware.grouped_rules import GroupedGemmSpec, grouped_gemm_reason
from fp8bench.kernels.torch_backend import ATEN_REFUSALS, TORCH
from fp8bench.numerics.quantize import cast_stats, quantizer_for
from fp8bench.numerics.scaled_gemm import ScaledGemm, ScaledGroupedGemm
from fp8bench.workloads.gemm import output_dtype
from fp8bench.workloads.grouped_gemm import group_bounds, routing_fields


def _grouped_support(precision: Precision, device: Device) -> str | None:
    if isinstance(precision, FloatPrecision):
        return None  # the workload refuses the float precisions it does not measure
    assert isinstance(precision, ScaledRecipe)
    # The per-expert scaled GEMM's rules hold for both implementations; the grouped kernel's own rules are
    # checked when a grouped case is built (they depend on the routing).
    return recipe_gemm_reason(device, precision)


def _grouped_kernel_reason(ctx: BuildContext, n: int, k: int) -> str | None:
    """On a real GPU, why ``torch._scaled_grouped_mm`` cannot run this case (``None``: it can)."""
    precision = ctx.precision
    assert isinstance(precision, ScaledRecipe)
    target = capabilities_for(ctx.device).target if ctx.device.is_cuda else None
    if target is None:
        return None  # the CPU: PyTorch itself refuses the call, and its message is the reason
    spec = GroupedGemmSpec(forward_gemm_spec(precision), n, k, tuple(ctx.inputs["offs"].tolist()))
    found = grouped_gemm_reason(spec, target)
    return found[1] if found else None


@TORCH.builder("grouped_gemm", supports=_grouped_support)
def build_grouped_gemm(ctx: BuildContext) -> Pipeline:
    precision, grouped = ctx.precision, ctx.shape["impl"] == "grouped"
    refused = f"torch refused {precision.name} grouped_gemm (impl={ctx.shape['impl']}) on {ctx.device}"
    if isinstance(precision, FloatPrecision):
        return _float_grouped_gemm(ctx, precision, grouped, refused)
    assert isinstance(precision, ScaledRecipe)
    if grouped:
        experts, n, k = ctx.inputs["w"].shape
        why = _grouped_kernel_reason(ctx, n, k)
        if why:
            raise Unsupported(f"{refused}: {why}")
        return _scaled_grouped_kernel(ctx, precision, refused)
    return _scaled_expert_loop(ctx, precision, refused)


def _float_grouped_gemm(ctx: BuildContext, precision: FloatPrecision, grouped: bool, refused: str) -> Pipeline:
    """An unscaled precision: one grouped kernel (``torch._grouped_mm``) or a loop of ``mm`` over the experts."""
    a_src, w_src, offs = ctx.inputs["a"], ctx.inputs["w"], ctx.inputs["offs"]
    n = w_src.shape[1]
    bounds = group_bounds(offs)  # once, at build time: the routing is fixed by the shape
    a, w = a_src.to(precision.dtype), w_src.to(precision.dtype)
    # The loop writes every group into one output, as the grouped kernel does (no concatenation copy).
    out = torch.empty(0 if grouped else a.shape[0], n, dtype=precision.dtype, device=a.device)

    def grouped_mm() -> torch.Tensor:
        return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)

    def loop_mm() -> torch.Tensor:
        for e, start, end in bounds:
            torch.mm(a[start:end], w[e].t(), out=out[start:end])
        return out

    gemm: Callable[[], torch.Tensor] = grouped_mm if grouped else loop_mm
    with refusals(refused, ATEN_REFUSALS):
        gemm()
    return Pipeline(end_to_end=gemm, phases={"gemm": gemm}, output=gemm, prequantized_phases=("gemm",),
                    notes=[_impl_note(grouped, a.device.type == "cpu"),
                           "inputs arrive in the GEMM dtype: no quantize phase; epilogue fused"],
                    extra=routing_fields(ctx.shape))


def _scaled_operands(ctx: BuildContext, precision: ScaledRecipe) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
    """The activations and the experts' weights (stacked as one ``(experts * n, k)`` matrix) in the recipe's
    activation dtype, with the quantizer of each."""
    experts, n, k = ctx.inputs["w"].shape
    a = ctx.inputs["a"].to(precision.activation_dtype)
    w = ctx.inputs["w"].reshape(experts * n, k).to(precision.activation_dtype)
    return a, w, quantizer_for(precision, "lhs"), quantizer_for(precision, "rhs")


def _scaled_pipeline(ctx: BuildContext, end_to_end: Callable[[], torch.Tensor], phases: dict[str, Callable[[], Any]],
                     state: dict[str, Any], a: torch.Tensor, w: torch.Tensor, grouped: bool, refused: str) -> Pipeline:
    """The pipeline of a scaled grouped GEMM, once PyTorch has accepted (or refused) its scaling layout."""
    with refusals(refused, ATEN_REFUSALS):  # before anything is timed
        end_to_end()

    def stats() -> dict[str, Any]:
        return {"a": cast_stats(a, state["qa"]), "w": cast_stats(w, state["qw"])}

    return Pipeline(end_to_end=end_to_end, phases=phases, output=end_to_end,
                    prequantized_phases=("gemm",) if grouped else ("gemm", "epilogue"), cast_stats=stats,
                    notes=[_impl_note(grouped, a.device.type == "cpu"),
                           "activations arrive in bfloat16; epilogue (scales, output cast) fused into the scaled GEMM"
                           + ("" if grouped else "; the loop's epilogue joins the experts' outputs")],
                    extra=routing_fields(ctx.shape))


# Quantization ends with every operand laid out as its kernel reads it (scales blocked per group or per expert), so
# that the gemm phase times the kernels alone.
def _scaled_grouped_kernel(ctx: BuildContext, precision: ScaledRecipe, refused: str) -> Pipeline:
    """A scaled recipe through one grouped kernel for every expert."""
    offs = ctx.inputs["offs"]
    experts = ctx.inputs["w"].shape[0]
    a, w, quant_a, quant_w = _scaled_operands(ctx, precision)
    state: dict[str, Any] = {}
    with refusals(refused, ATEN_REFUSALS):
        kernel = ScaledGroupedGemm(precision.granularity, experts, group_bounds(offs), output_dtype(precision),
                                   precision.fast_accum)

    def quantize() -> None:
        state["qa"], state["qw"] = quant_a(a), quant_w(w)
        state["ka"], state["kw"] = kernel.prepare_lhs(state["qa"]), kernel.prepare_rhs(state["qw"])

    def gemm() -> torch.Tensor:
        return kernel(state["ka"], state["kw"], offs)

    def end_to_end() -> torch.Tensor:
        quantize()
        return gemm()

    return _scaled_pipeline(ctx, end_to_end, {"quantize": quantize, "gemm": gemm}, state, a, w, True, refused)


def _scaled_expert_loop(ctx: BuildContext, precision: ScaledRecipe, refused: str) -> Pipeline:
    """A scaled recipe as one scaled GEMM per non-empty expert, their outputs joined in the epilogue."""
    n = ctx.inputs["w"].shape[1]
    bounds = group_bounds(ctx.inputs["offs"])
    a, w, quant_a, quant_w = _scaled_operands(ctx, precision)
    out_dtype = output_dtype(precision)
    state: dict[str, Any] = {}
    with refusals(refused, ATEN_REFUSALS):
        per_expert = ScaledGemm.for_recipe(precision)

    def quantize() -> None:
        qa, qw = state["qa"], state["qw"] = quant_a(a), quant_w(w)
        state["groups"] = [(per_expert.prepare(qa.rows(start, end), "lhs"),
                            per_expert.prepare(qw.rows(e * n, (e + 1) * n), "rhs")) for e, start, end in bounds]

    def gemm() -> list[torch.Tensor]:
        state["parts"] = [per_expert(ka, kw, out_dtype, precision.fast_accum) for ka, kw in state["groups"]]
        return state["parts"]

    def concatenate() -> torch.Tensor:
        # The per-expert GEMMs write separate outputs; joining them is epilogue work, not GEMM time.
        return torch.cat(state["parts"])

    def end_to_end() -> torch.Tensor:
        quantize()
        gemm()
        return concatenate()

    phases: dict[str, Callable[[], Any]] = {"quantize": quantize, "gemm": gemm, "epilogue": concatenate}
    return _scaled_pipeline(ctx, end_to_end, phases, state, a, w, False, refused)


def _impl_note(grouped: bool, cpu: bool) -> str:
    if not grouped:
        return "impl=loop: one GEMM per non-empty expert"
    if cpu:
        return "impl=grouped: torch._grouped_mm, on the CPU ATen's fallback (a loop of mm over the groups in C++)"
    return "impl=grouped: one grouped kernel for every expert"
