"""The ``compiled`` backend (custom): the quantize + scaled-GEMM path compiled by ``torch.compile`` (Inductor).

Eager FP8 quantization is a chain of small memory-bound ops (``abs``, ``amax``, divide, ``clamp``, cast), each one
reading and writing the whole tensor. Inductor fuses the chain into one or two loops (a reduction for the amax,
then a pointwise pass for the scaled cast), so the tensor crosses memory about twice instead of half a dozen
times. The GEMM itself stays an external call (``torch._scaled_mm`` / ``F.scaled_mm``): Inductor does not generate
FP8 GEMMs on the CPU, and on CUDA it calls cuBLASLt unless max-autotune picks a Triton template.

What is compiled is fp8bench's own shared quantizer code (:mod:`fp8bench.numerics.quantize`), so the numbers match the
``torch`` backend's eager ones: the comparison isolates what fusion buys.

Compilation happens while the pipeline is built, never inside a timed sample; its wall time (Dynamo tracing plus
Inductor codegen and the C++ or Triton build, or a cache hit) is stored as ``compile_s`` in the record's ``extra``.
Each build starts from a reset Dynamo cache, so one run's many shapes never hit the recompile limit (past it
Dynamo would silently fall back to eager).

For the ``attention`` and ``transformer_step`` workloads the backend swaps in fp8bench's own ``Fp8Linear`` (exactly
as the ``torch`` backend does) and compiles each layer in place, forward and backward; the compile time there is
Dynamo's own total (``torch._dynamo.utils.calculate_time_spent``) over the build.

Delayed scaling is refused: its amax history is Python-side state that changes every call, which Dynamo would
either recompile for or graph-break on (Transformer Engine refuses DelayedScaling under ``torch.compile`` too).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import FloatPrecision, Fp4Recipe, Precision, ScaledRecipe
from fp8bench.hardware.capabilities import recipe_gemm_reason
from fp8bench.kernels.torch_backend import _tf32
from fp8bench.kernels.torch_layers import torch_convert
from fp8bench.kernels.triton_backend import TRITON_LIBRARY
from fp8bench.numerics.fp8_linear import Fp8Linear
from fp8bench.numerics.quantize import Quantized, cast_stats, quantizer_for
from fp8bench.numerics.scaled_gemm import ScaledGemm
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.gemm import output_dtype
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline


@lru_cache(maxsize=1)
def cxx_compiler() -> str | None:
    """The C++ compiler Inductor's CPU backend would call (``CXX``, else ``g++``/``c++``/``clang++``), or ``None``."""
    for candidate in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def compiler_reason(device: Device) -> str | None:
    """Why Inductor cannot generate code for ``device`` here: Triton kernels on CUDA, C++ on the CPU."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if device.is_cuda:
        return TRITON_LIBRARY.status().reason
    if cxx_compiler() is None:
        return "Inductor's CPU backend needs a C++ compiler (set CXX or install g++)"
    return None


def _compiler_note(device: Device) -> str | None:
    return None if device.is_cuda else f"Inductor C++ backend ({cxx_compiler()}); compile time recorded as compile_s"


COMPILED = BACKENDS.add("compiled", Backend(
    name="compiled", kind="custom",
    description="torch.compile (Inductor) of fp8bench's quantizers + scaled GEMM; compile time recorded",
    check=compiler_reason, note=_compiler_note,
))


def precision_support(precision: Precision, device: Device) -> str | None:
    """Why the compiled path cannot run ``precision`` on ``device`` (``None``: it can)."""
    if isinstance(precision, FloatPrecision):
        if precision.tf32 and not device.is_cuda:
            return "TF32 is a CUDA tensor-core mode; on the CPU it would run plain FP32"
        return None
    if precision.delayed:
        return ("delayed scaling keeps a Python-side amax history that changes every call; "
                "compiled runs current-scaling recipes")
    if isinstance(precision, Fp4Recipe):
        return ("compiled fuses the FP8 quantizers into (data, scale) pairs; the 4-bit recipes (E2M1 data, NVFP4's "
                "second scale level) run on the torch and emulated backends")
    return recipe_gemm_reason(device, precision)


def compile_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with static shapes (one graph per case) and the default Inductor mode."""
    return torch.compile(fn, dynamic=False, fullgraph=False)


def reset_compiler() -> None:
    """Forget earlier compiled graphs, so a run's shapes never accumulate past Dynamo's recompile limit."""
    torch._dynamo.reset()


def timed_first_calls(device: Device, *calls: Callable[[], Any]) -> float:
    """Seconds spent in the first call of each function (tracing + codegen + build + one run), summed."""
    total = 0.0
    for call in calls:
        t0 = time.perf_counter()
        call()
        device.synchronize()
        total += time.perf_counter() - t0
    return total


def quantize_pair(precision: ScaledRecipe, kernel: ScaledGemm) -> Callable[[torch.Tensor, torch.Tensor],
                                                                        tuple[torch.Tensor, ...]]:
    """The eager function Inductor compiles: both operands through the shared quantizers and laid out for
    ``kernel`` (:meth:`ScaledGemm.prepare`), as plain tensors: each operand's FP8 data, its scales as quantized
    (for the numerics report) and its scales as the kernel reads them."""
    quant_a, quant_b = quantizer_for(precision, "lhs"), quantizer_for(precision, "rhs")

    def quantize(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qa, qb = quant_a(a), quant_b(b)
        ka, kb = kernel.prepare(qa, "lhs"), kernel.prepare(qb, "rhs")
        return qa.data, qa.scale, ka.scales[0], qb.data, qb.scale, kb.scales[0]

    return quantize


@COMPILED.builder("gemm", supports=precision_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    reset_compiler()
    if isinstance(precision, FloatPrecision):
        return _build_float_gemm(ctx, precision)
    assert isinstance(precision, ScaledRecipe)
    a, b = ctx.inputs["a"].to(precision.activation_dtype), ctx.inputs["b"].to(precision.activation_dtype)
    fmt, g = precision.forward_format, precision.granularity
    refused = f"torch.compile could not build {precision.name} on {ctx.device}"
    with refusals(refused, with_type=True):
        kernel = ScaledGemm(g, False)
    out_dtype = output_dtype(precision)
    eager_quantize = quantize_pair(precision, kernel)

    def to_quantized(data: torch.Tensor, scale: torch.Tensor, role: str) -> Quantized:
        block = (precision.activation_block if role == "lhs" else precision.weight_block) \
            if g.value == "blockwise" else ((1, precision.mx_block) if g.value == "mx" else (1, 1))
        return Quantized(data, scale, fmt, g, block)

    # The F.scaled_mm scaling lists of each operand (Python objects, not compiled): from one eager layout.
    da0, sa0, _, db0, sb0, _ = eager_quantize(a, b)
    templates = {"lhs": kernel.prepare(to_quantized(da0, sa0, "lhs"), "lhs"),
                 "rhs": kernel.prepare(to_quantized(db0, sb0, "rhs"), "rhs")}

    def eager_e2e(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        da, _sa, ka, db, _sb, kb = eager_quantize(a, b)
        lhs, rhs = replace(templates["lhs"], data=da, scales=(ka,)), replace(templates["rhs"], data=db, scales=(kb,))
        return kernel(lhs, rhs, out_dtype, precision.fast_accum)

    quantize_c = compile_fn(eager_quantize)
    e2e_c = compile_fn(eager_e2e)
    state: dict[str, Any] = {}

    def quantize() -> None:
        da, sa, ka, db, sb, kb = state["q"] = quantize_c(a, b)
        state["ka"] = replace(templates["lhs"], data=da, scales=(ka,))
        state["kb"] = replace(templates["rhs"], data=db, scales=(kb,))

    def gemm() -> torch.Tensor:
        return kernel(state["ka"], state["kb"], out_dtype, precision.fast_accum)

    def end_to_end() -> torch.Tensor:
        return e2e_c(a, b)

    # Dynamo/Inductor errors come in many types; the case is refused with the message.
    with refusals(refused, with_type=True):
        compile_s = timed_first_calls(ctx.device, quantize, end_to_end)
        gemm()

    def stats() -> dict[str, Any]:
        da, sa, _ka, db, sb, _kb = state["q"]
        return {"a": cast_stats(a, to_quantized(da, sa, "lhs")), "b": cast_stats(b, to_quantized(db, sb, "rhs"))}

    return Pipeline(end_to_end=end_to_end, phases={"quantize": quantize, "gemm": gemm}, output=end_to_end,
                    prequantized_phases=("gemm",), cast_stats=stats,
                    notes=["compiled: Inductor fuses amax/scale/cast and the scales' kernel layout; the scaled GEMM "
                           "is an external call",
                           f"compile time {compile_s:.2f} s (quantize graph + end-to-end graph), not timed"],
                    extra={"compile_s": compile_s})


def _build_float_gemm(ctx: BuildContext, precision: FloatPrecision) -> Pipeline:
    a, b = ctx.inputs["a"].to(precision.dtype), ctx.inputs["b"].to(precision.dtype)

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.t()

    compiled = compile_fn(matmul)

    def gemm() -> torch.Tensor:
        with _tf32(precision.tf32):  # Dynamo guards on the switch: the same value at compile and run time
            return compiled(a, b)

    with refusals(f"torch.compile could not build {precision.name} on {ctx.device}", with_type=True):
        compile_s = timed_first_calls(ctx.device, gemm)
    return Pipeline(end_to_end=gemm, phases={"gemm": gemm}, output=gemm, prequantized_phases=("gemm",),
                    notes=[f"compile time {compile_s:.2f} s, not timed"], extra={"compile_s": compile_s})


# --- model workloads: fp8bench's FP8 linear, each layer compiled --------------------------------------------------

def model_support(precision: Precision, device: Device) -> str | None:
    """The model workloads compile the FP8 linear layers; float layers have no quantization to fuse."""
    if isinstance(precision, FloatPrecision):
        return ("compiled fuses FP8 quantization into the linear layers; float layers have nothing to fuse "
                "(their GEMMs are the torch backend's)")
    return precision_support(precision, device) or recipe_gemm_reason(device, precision, backward=True)


def compiled_convert(precision: Precision, device: Device) -> Callable[[nn.Module], nn.Module]:
    """fp8bench's ``Fp8Linear`` in place of every projection (as the torch backend), each compiled in place."""
    swap = torch_convert(precision, device)

    def convert(module: nn.Module) -> nn.Module:
        module = swap(module)
        layers = [m for m in module.modules() if isinstance(m, Fp8Linear)]
        if not layers:
            raise Unsupported("no FP8 linear layer to compile in this model")
        for layer in layers:
            layer.compile(dynamic=False)  # forward and (at the first backward) its backward graph
        return module

    return convert


def dynamo_compile_seconds() -> float:
    """Dynamo's own running total of compile wall time in this process (tracing, Inductor, C++/Triton builds)."""
    return float(torch._dynamo.utils.calculate_time_spent().get("total_wall_time", 0.0))


def _model_builder(build: Callable[[BuildContext, Callable[[nn.Module], nn.Module]], Pipeline]
                   ) -> Callable[[BuildContext], Pipeline]:
    def builder(ctx: BuildContext) -> Pipeline:
        reset_compiler()
        before = dynamo_compile_seconds()
        # The workload's build runs one full call: forward and backward graphs compile here, untimed.
        with refusals(f"torch.compile could not build {ctx.precision.name} on {ctx.device}", with_type=True):
            pipeline = build(ctx, compiled_convert(ctx.precision, ctx.device))
        compile_s = dynamo_compile_seconds() - before
        pipeline.extra["compile_s"] = compile_s
        pipeline.notes.append(f"compiled: every Fp8Linear compiled (forward + backward), {compile_s:.1f} s of "
                              "compilation during the build, not timed")
        return pipeline

    return builder


COMPILED.builder("attention", supports=model_support)(_model_builder(build_attention_pipeline))
COMPILED.builder("transformer_step", supports=model_support)(_model_builder(build_training_pipeline))
LAYER_CONVERTERS["compiled"] = compiled_convert
