"""The compiled backend: torch.compile of the shared quantizers + scaled GEMM on the CPU (Inductor C++)."""

from __future__ import annotations

import pytest
import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.precisions import resolve_precision
from fp8bench.kernels import compiled, torch_backend
from fp8bench.workloads.gemm import GEMM

CPU = Device("cpu")
pytestmark = pytest.mark.skipif(compiled.COMPILED.availability(CPU) is not None,
                                reason=str(compiled.COMPILED.availability(CPU)))


def _ctx(precision: str, shape: str = "64x96x128") -> BuildContext:
    sh = GEMM.parse_shape(shape)
    return BuildContext("gemm", sh, resolve_precision(precision), CPU, GEMM.make_inputs(sh, CPU, seed=0))


def test_delayed_scaling_and_cpu_tf32_are_refused_with_reasons() -> None:
    assert "amax history" in compiled.precision_support(resolve_precision("fp8_delayed"), CPU)
    assert "TF32" in compiled.precision_support(resolve_precision("tf32"), CPU)
    assert "tensorwise and rowwise" in compiled.precision_support(resolve_precision("mxfp8"), CPU)
    assert compiled.precision_support(resolve_precision("fp8_rowwise"), CPU) is None


@pytest.mark.slow
def test_compiled_rowwise_matches_eager_and_records_compile_time() -> None:
    ctx = _ctx("fp8_rowwise")
    pipeline = compiled.build_gemm(ctx)
    eager = torch_backend.build_gemm(_ctx("fp8_rowwise"))
    out, expected = pipeline.output(), eager.output()
    # The same quantizer code, fused: scales and FP8 bytes agree, so the GEMM results agree to BF16 rounding.
    assert out.shape == expected.shape == (64, 96)
    assert ((out.float() - expected.float()).abs() <= 2.0**-7 * expected.float().abs() + 1e-6).all()
    assert pipeline.extra["compile_s"] > 0
    assert set(pipeline.phases) == {"quantize", "gemm"} and pipeline.prequantized_phases == ("gemm",)
    stats = pipeline.cast_stats()
    assert stats["a"].overflow_frac == 0.0 and stats["b"].overflow_frac == 0.0


@pytest.mark.slow
def test_compiled_quantize_is_bit_identical_to_the_shared_quantizer() -> None:
    from fp8bench.numerics.quantize import quantize_rowwise
    from fp8bench.numerics.scaled_gemm import ScaledGemm

    prec = resolve_precision("fp8_rowwise")
    kernel = ScaledGemm(prec.granularity, False)
    fn = compiled.compile_fn(compiled.quantize_pair(prec, kernel))
    a = torch.randn(33, 80).bfloat16()
    b = torch.randn(48, 80).bfloat16()
    da, sa, ka, db, sb, kb = fn(a, b)
    ra, rb = quantize_rowwise(a, prec.forward_format), quantize_rowwise(b, prec.forward_format)
    assert torch.equal(sa, ra.scale) and torch.equal(ka, ra.scale)  # the kernel reads a's [M, 1] scales as they are
    assert torch.equal(kb, rb.scale.reshape(1, -1))  # and b's as [1, N]
    assert torch.equal(da.view(torch.uint8), ra.data.view(torch.uint8))


@pytest.mark.slow
def test_compiled_bf16_gemm_runs_and_is_exact_to_bf16() -> None:
    ctx = _ctx("bf16")
    pipeline = compiled.build_gemm(ctx)
    out = pipeline.output()
    expected = ctx.inputs["a"].bfloat16() @ ctx.inputs["b"].bfloat16().t()
    assert torch.allclose(out.float(), expected.float(), rtol=2.0**-7, atol=1e-3)
    assert pipeline.extra["compile_s"] > 0


@pytest.mark.slow
def test_compiled_attention_layers_match_the_eager_fp8_linear() -> None:
    from fp8bench.core.plugins import BACKENDS, load_all
    from fp8bench.numerics.accuracy import compare
    from fp8bench.workloads.attention import ATTENTION

    load_all()
    shape = ATTENTION.parse_shape("b=1,h=4,s=32,d=32,kv_heads=2")
    inputs = ATTENTION.make_inputs(shape, CPU, seed=0)
    precision = resolve_precision("fp8_rowwise")
    built = {b: BACKENDS.get(b).build(BuildContext("attention", shape, precision, CPU, inputs))
             for b in ("compiled", "torch")}
    assert built["compiled"].extra["compile_s"] > 0
    # Same Fp8Linear code, compiled or not: the outputs agree far beyond FP8's ~28 dB.
    agreement = compare(built["compiled"].output(), built["torch"].output().double())
    assert agreement.sqnr_db is None or agreement.sqnr_db > 40.0
