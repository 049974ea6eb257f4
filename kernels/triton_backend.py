"""The ``triton`` backend (custom): fp8bench's own Triton quantizers and FP8 GEMM (:mod:`.triton_kernels`).

It runs the FP8 recipes whose GEMM the kernels implement, tensorwise (current and delayed scaling), rowwise and
blockwise (1x128 activations, 128x128 weights), as three timed phases: ``quantize`` (the fused amax-scale-cast kernels
on both BF16 operands), ``gemm`` (the scaled FP8 GEMM on operands already quantized) and the end-to-end call. Float
precisions are PyTorch's own kernels and run through the ``torch`` backend; MX (E8M0, 32-element) GEMMs are not
implemented here.

On CUDA the first call autotunes the GEMM over Hopper tile configurations. It happens while the pipeline is built,
outside every timed sample, and its duration is recorded as ``autotune_s`` with the chosen tiles. On the CPU the
kernels run under Triton's interpreter: the record is marked ``interpreted`` and its times are never compared.

Options (``BuildContext.options``): ``persistent`` (bool) launches the GEMM with at most one program per SM.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.libraries import Library
from fp8bench.core.pipeline import BuildContext, Pipeline, refusals
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import Granularity, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import fp8_gemm_reason
from fp8bench.kernels import triton_kernels as tk
from fp8bench.numerics.quantize import AmaxHistory, Quantized, cast_stats
from fp8bench.workloads.gemm import output_dtype

# Triton 3.0 is the oldest with tl.float8e4nv dots and knobs-free jit arguments. Its wheels are named after the
# build (pytorch-triton for nightlies, pytorch-triton-rocm on ROCm).
TRITON_LIBRARY = Library("triton", (3, 0), extra="triton",
                         distributions=("triton", "pytorch-triton", "pytorch-triton-rocm"))

TRITON = BACKENDS.add("triton", Backend(
    name="triton", kind="custom",
    description="fp8bench's Triton kernels: fused amax/scale/cast quantizers and a scaled FP8 GEMM "
                "(CUDA: compiled and autotuned; CPU: Triton interpreter, correctness only)",
    # The library, then the mode this process imported Triton in (interpreter or compiled: tk.device_reason).
    requires=(TRITON_LIBRARY,),
    check=lambda device: tk.device_reason(device.torch),
    note=lambda device: (None if device.is_cuda
                         else "Triton interpreter on the CPU: correctness only, timings never compared"),
    interpreted=lambda device: tk.INTERPRETED,
))

GEMM_GRANULARITIES = (Granularity.TENSORWISE, Granularity.ROWWISE, Granularity.BLOCKWISE)


def gemm_support(precision: Precision, device: Device) -> str | None:
    """Why the Triton GEMM cannot run ``precision`` on ``device`` (``None``: it can)."""
    if not isinstance(precision, ScaledRecipe):
        return "the triton backend implements FP8 recipes; float precisions run through torch"
    if precision.granularity not in GEMM_GRANULARITIES:
        return f"the Triton FP8 GEMM takes tensorwise, rowwise or blockwise scales, not {precision.granularity.value}"
    blk = tk.GEMM_SCALE_BLOCK
    if precision.granularity is Granularity.BLOCKWISE and (precision.activation_block != (1, blk)
                                                           or precision.weight_block != (blk, blk)):
        return (f"the Triton blockwise GEMM takes 1x{blk} activation and {blk}x{blk} weight tiles, got "
                f"{precision.activation_block} and {precision.weight_block}")
    if device.is_cuda:
        # Every mode is a plain FP8 tl.dot (block scales are applied in registers), so the rule is FP8's own:
        # Ada/Hopper tensor cores, not the 9.0 that cuBLAS's block-scaled GEMMs need.
        return fp8_gemm_reason(device, Granularity.TENSORWISE)
    return None


def operand_quantizer(recipe: ScaledRecipe, role: str = "lhs") -> Any:
    """A callable ``x -> Quantized`` running the Triton kernel for ``recipe`` (delayed: with its own history).

    ``role`` is ``"lhs"`` (activations) or ``"rhs"`` (weights): blockwise recipes tile them differently.
    """
    fmt = recipe.forward_format
    if recipe.granularity is Granularity.ROWWISE:
        return lambda x: tk.quantize_rowwise(x, fmt)
    if recipe.granularity is Granularity.BLOCKWISE:
        block = recipe.activation_block if role == "lhs" else recipe.weight_block
        return lambda x: tk.quantize_blockwise(x, fmt, block)
    if recipe.delayed:
        history = AmaxHistory(recipe.amax_history_len, recipe.margin, recipe.amax_compute_algo)

        def delayed(x: torch.Tensor) -> Quantized:
            # Before the first push there is no history: current scaling with the margin, as the shared quantizer.
            q, amax = tk.quantize_tensorwise(x, fmt, history.scale(fmt), margin=recipe.margin)
            history.push(amax)
            return q

        return delayed
    return lambda x: tk.quantize_tensorwise(x, fmt)[0]


def accumulation_note(recipe: ScaledRecipe, capability: tuple[int, int] | None) -> str:
    """What the GEMM's ``tl.dot`` calls do with ``recipe``'s accumulation on the device they ran on: compute
    ``capability`` (major, minor), or ``None`` under the interpreter (:mod:`.triton_kernels`, "Accumulation").

    ``max_num_imprecise_acc``'s numerical effect is in sm_90's WGMMA path, and fp8bench passes it only there (its
    default is ``2**30`` on compute capability 9.0 and 0 elsewhere; Triton's target-independent combine pass also
    reads it, folding ``d + dot(a, b)`` only when it is 0). Triton's test is the capability equal to 90, so the
    promotion rule is named on (9, 0) alone: ROCm's MI300 reports (9, 4) and has no WGMMA."""
    mode = "fast accumulation" if recipe.fast_accum else "full accumulation"
    if recipe.granularity is Granularity.BLOCKWISE:
        return ("full accumulation: promoted to FP32 every K tile (each 128-deep block-scaled partial product is "
                "added in FP32)")
    if capability is None:
        return (f"{mode}: under the interpreter tl.dot is a NumPy matmul in FP32, so the accumulation mode does not "
                "change the numbers")
    if capability != (9, 0):
        return (f"{mode} asked for: on compute capability {capability[0]}.{capability[1]} Triton's FP8 dots "
                "accumulate as its MMA instructions do; max_num_imprecise_acc is unused there (its effect is in "
                "sm_90's WGMMA path, the only place fp8bench passes it), "
                "so fast and full run the same kernel")
    if recipe.fast_accum:
        return ("fast accumulation: tl.dot without max_num_imprecise_acc (Triton's sm_90 default 2**30, never "
                "promoted to FP32)")
    return "full accumulation: promoted to FP32 every K tile (tl.dot max_num_imprecise_acc=BLOCK_K on sm_90)"


@TRITON.builder("gemm", supports=gemm_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    assert isinstance(precision, ScaledRecipe)
    act_dtype = precision.activation_dtype
    a, b = ctx.inputs["a"].to(act_dtype), ctx.inputs["b"].to(act_dtype)
    quant_a, quant_b = operand_quantizer(precision, "lhs"), operand_quantizer(precision, "rhs")
    persistent = bool(ctx.options.get("persistent", False))
    out_dtype = output_dtype(precision)
    state: dict[str, Any] = {}

    def quantize() -> None:
        state["qa"], state["qb"] = quant_a(a), quant_b(b)

    def gemm() -> torch.Tensor:
        return tk.scaled_mm(state["qa"], state["qb"], out_dtype, persistent=persistent,
                            fast_accum=precision.fast_accum)

    def end_to_end() -> torch.Tensor:
        quantize()
        return gemm()

    # First call: Triton compiles every kernel and autotunes the GEMM (CUDA). It stays out of the timed samples.
    t0 = time.perf_counter()
    with refusals(f"triton kernels refused {precision.name} on {ctx.device}", (RuntimeError, ValueError)):
        first_output = end_to_end()
        ctx.device.synchronize()
    first_call_s = time.perf_counter() - t0

    extra: dict[str, Any] = {"persistent": persistent}
    capability = None if tk.INTERPRETED else ctx.device.capability()
    notes = ["triton: fused amax/scale/cast quantizers + scaled FP8 GEMM, BF16 out",
             accumulation_note(precision, capability)]
    if tk.INTERPRETED:
        notes.append("interpreted: Triton's CPU interpreter runs the kernels for correctness only")
    else:
        extra["autotune_s"] = first_call_s  # compile + autotune of every kernel, from the first call
        extra["gemm_config"] = tk.best_config()

    def stats() -> dict[str, Any]:
        return {"a": cast_stats(a, state["qa"]), "b": cast_stats(b, state["qb"])}

    # Interpreted, one call costs seconds: the first call's output is the fresh output (numerics, and what the
    # runner checks later calls against), so no extra call is spent on it. end_to_end returns the workload's output
    # (the default declaration), so its timed or repeated calls are compared with this one.
    output = (lambda: first_output) if tk.INTERPRETED else end_to_end
    return Pipeline(end_to_end=end_to_end, phases={"quantize": quantize, "gemm": gemm}, output=output,
                    prequantized_phases=("gemm",), cast_stats=stats, notes=notes, interpreted=tk.INTERPRETED,
                    extra=extra)
