"""Every backend x precision x workload that runs on this machine, checked against the emulated reference.

The emulated backend quantizes with fp8bench's shared quantizers and multiplies the dequantized operands in FP32:
it is what an exact FP8 kernel with FP32 accumulation computes. Tolerances come from the formats:

* A backend that quantizes exactly like the reference (``torch``, ``triton``, ``compiled``) differs from it only by
  FP32 summation order and the final rounding to the output dtype. The relative error between the two outputs is
  then bounded by a few units of the output's rounding, ``2**-(mantissa bits + 1)`` (BF16: 2**-8); we allow 2x.
* A backend with its own scale rules (torchao rounds rowwise scales down to powers of two), and every backend on
  the model workloads (where BF16 activations between layers round differently once any GEMM's summation order
  differs), is held to the format: its SQNR against the FP64 reference must be within one mantissa bit (6.02 dB)
  of the emulated reference's.

Cases a backend refuses on this device are not silently skipped: :data:`MUST_RUN_ON_CPU` lists what has to run,
and every refusal must carry a reason.
"""

from __future__ import annotations

import math

import pytest
import torch
from grid import FULL_MATRIX

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Unsupported
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS, FloatPrecision, RunOptions, resolve_precision
from fp8bench.numerics.accuracy import compare

load_all()
CPU = Device("cpu")
BACKENDS_UNDER_TEST = ("torch", "triton", "compiled", "torchao", "te")
# Small shapes that meet every recipe's alignment (128x128 weight tiles fit once in the GEMM).
SHAPES = {"gemm": "48x128x128", "attention": "b=1,h=4,s=32,d=32,kv_heads=2",
          "transformer_step": "tiny,layers=1,batch=1,seq=32"}
FP8_FORMAT = {"te": "hybrid"}  # TE refuses pure E5M2 and runs E4M3 or HYBRID; hybrid is its default
# Backends whose quantization is fp8bench's shared one, so their output must match the reference closely.
SAME_QUANTIZERS = {"torch", "triton", "compiled"}
MUST_RUN_ON_CPU = {
    ("torch", p) for p in ("fp32", "bf16", "fp16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise")
} | {("triton", p) for p in ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise")} | {
    ("compiled", p) for p in ("fp32", "bf16", "fp16", "fp8_tensorwise", "fp8_rowwise")
} | {("torchao", p) for p in ("fp8_tensorwise", "fp8_rowwise")}
MUST_RUN_MODELS_ON_CPU = {  # attention and transformer_step
    ("torch", p) for p in ("fp32", "bf16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise")
} | {("torchao", p) for p in ("fp8_tensorwise", "fp8_rowwise")} | {("compiled", "fp8_rowwise")}
# (COSTLY cases are skipped before this list is consulted unless FP8BENCH_FULL_MATRIX=1.)


# Cases that repeat a path another case covers, at 25-75 s each on two cores: the compiled model workloads beyond
# fp8_rowwise (one compile of forward and backward per case; the compiled Fp8Linear path is the same), and the
# training step with per-tensor E4M3 scales, whose same-dtype _scaled_mm takes the CPU's slow path (the attention
# case runs the same layers). FP8BENCH_FULL_MATRIX=1 runs them too.
COSTLY = {("attention", "compiled", "fp8_tensorwise"), ("transformer_step", "compiled", "fp8_tensorwise")} | {
    ("transformer_step", b, p) for b in ("torch", "torchao") for p in ("fp8_tensorwise", "fp8_delayed")}


def must_run(workload: str, backend: str, precision: str) -> bool:
    return (backend, precision) in (MUST_RUN_ON_CPU if workload == "gemm" else MUST_RUN_MODELS_ON_CPU)


def _cases() -> list:
    out = []
    for workload in SHAPES:
        for backend in BACKENDS_UNDER_TEST:
            for precision in PRECISIONS:
                # Compiling costs 10-60 s per case on two cores (the model workloads compile forward and
                # backward), and the CPU's per-tensor E4M3 _scaled_mm path takes seconds per model GEMM.
                slow = backend == "compiled" or (workload != "gemm" and precision in ("fp8_tensorwise",
                                                                                      "fp8_delayed"))
                marks = [pytest.mark.slow] if slow else []
                out.append(pytest.param(workload, backend, precision, marks=marks,
                                        id=f"{workload}-{backend}-{precision}"))
    return out


def _build(workload: str, backend: str, precision_name: str, fmt: str):
    w = WORKLOADS.get(workload)
    shape = w.parse_shape(SHAPES[workload])
    precision = resolve_precision(precision_name, RunOptions(fp8_format=fmt))
    inputs = w.make_inputs(shape, CPU, seed=0)
    ctx = BuildContext(workload, shape, precision, CPU, inputs)
    return BACKENDS.get(backend).build(ctx), w.reference(inputs), precision


@pytest.mark.parametrize(("workload", "backend", "precision"), _cases())
def test_backend_agrees_with_the_emulated_reference(workload: str, backend: str, precision: str) -> None:
    if (workload, backend, precision) in COSTLY and not FULL_MATRIX:
        pytest.skip("covered by a cheaper case of the same path; FP8BENCH_FULL_MATRIX=1 runs it")
    fmt = FP8_FORMAT.get(backend, "e4m3")
    resolved = resolve_precision(precision, RunOptions(fp8_format=fmt))
    why = BACKENDS.get(backend).unsupported_reason(workload, resolved, CPU)
    if why is None:
        try:
            pipeline, ref, resolved = _build(workload, backend, precision, fmt)
        except Unsupported as exc:
            why = str(exc)
    if why is not None:
        assert not must_run(workload, backend, precision), f"{backend} must run {precision} on the CPU: {why}"
        assert len(why) > 10  # a refusal names its reason
        pytest.skip(f"refused, as expected on the CPU: {why}")

    out = pipeline.output()
    reference_pipeline, _, _ = _build(workload, "emulated", precision, fmt)
    emulated = reference_pipeline.output()
    assert out.shape == emulated.shape and out.dtype == emulated.dtype
    assert torch.isfinite(out.float()).all()

    mantissa = 23 if out.dtype == torch.float32 else {torch.bfloat16: 7, torch.float16: 10}[out.dtype]
    out_num, emu_num = compare(out, ref), compare(emulated, ref)
    if workload == "gemm" and (backend in SAME_QUANTIZERS or isinstance(resolved, FloatPrecision)):
        agreement = compare(out, emulated.double())
        unit = 2.0 ** -(mantissa + 1)
        # FP32 outputs: the error is the summation order over K terms, not the output rounding.
        bound = 2 * unit if out.dtype != torch.float32 else 4 * math.sqrt(out.shape[-1]) * 2.0**-24
        assert agreement.rel_err <= bound, (agreement, out_num, emu_num)
    assert out_num.sqnr_db >= emu_num.sqnr_db - 6.02, (out_num, emu_num)
