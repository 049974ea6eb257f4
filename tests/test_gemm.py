"""The gemm workload and its torch/emulated builders: shapes, closed forms, numerics that make physical sense."""

import pytest
import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS, RunOptions, resolve_precision
from fp8bench.core.shapes import ShapeError
from fp8bench.numerics.accuracy import compare
from tests.rounding_theory import rounding_sqnr_db

load_all()
GEMM = WORKLOADS.get("gemm")
CPU = Device("cpu")


@pytest.mark.parametrize("text,expected", [
    ("4096x4096x4096", {"m": 4096, "n": 4096, "k": 4096}),
    ("16X32x48", {"m": 16, "n": 32, "k": 48}),
    ("m=8,n=16,k=32", {"m": 8, "n": 16, "k": 32}),
])
def test_shape_parsing(text, expected):
    assert GEMM.parse_shape(text) == expected


@pytest.mark.parametrize("text,message", [
    ("0x16x16", "M = 0 must be a positive integer"),
    ("16x-16x16", "N = -16 must be a positive integer"),
    ("16x16", "expected MxNxK"),
    ("16x16xk", "K = 'k' is not an integer"),
    ("m=1,n=2", "missing k"),
    ("m=1,n=2,k=3,z=4", "unknown key 'z'"),
])
def test_impossible_shapes_are_refused_by_name(text, message):
    with pytest.raises(ShapeError, match=message):
        GEMM.parse_shape(text)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (128, 256, 512), (4096, 14336, 4096), (16384, 57344, 8192)])
def test_flops_are_exactly_2mnk(m, n, k):
    assert GEMM.flops({"m": m, "n": n, "k": k}) == 2 * m * n * k


def test_min_bytes_by_precision():
    shape = {"m": 64, "n": 32, "k": 16}
    operands = 64 * 16 + 32 * 16
    assert GEMM.min_bytes(shape, PRECISIONS.get("fp32")) == 4 * operands + 4 * 64 * 32
    assert GEMM.min_bytes(shape, PRECISIONS.get("bf16")) == 2 * operands + 2 * 64 * 32
    assert GEMM.min_bytes(shape, PRECISIONS.get("fp8_rowwise")) == operands + 2 * 64 * 32
    # E2M1: half a byte per element, plus a one-byte scale per 16 (nvfp4) or 32 (mxfp4) elements.
    assert GEMM.min_bytes(shape, PRECISIONS.get("nvfp4")) == operands // 2 + operands // 16 + 2 * 64 * 32
    assert GEMM.min_bytes(shape, PRECISIONS.get("mxfp4")) == operands // 2 + operands // 32 + 2 * 64 * 32


def test_fp8_alignment_rule_names_the_shape():
    reason = GEMM.shape_reason({"m": 100, "n": 100, "k": 100}, PRECISIONS.get("fp8_tensorwise"))
    assert reason == "fp8_tensorwise GEMM needs M, N, K multiples of 16, 16, 16; got 100x100x100"
    assert GEMM.shape_reason({"m": 100, "n": 100, "k": 100}, PRECISIONS.get("bf16")) is None
    assert "multiples of 16, 128, 128" in GEMM.shape_reason({"m": 16, "n": 64, "k": 128},
                                                             PRECISIONS.get("fp8_blockwise"))


def test_probe_shape_is_smaller_and_aligned():
    shape = {"m": 4096, "n": 4096, "k": 4096}
    probe = GEMM.probe_shape(shape, 2e8)
    assert GEMM.flops(probe) <= 2e8
    assert all(v % 128 == 0 for v in probe.values())
    assert GEMM.probe_shape({"m": 64, "n": 64, "k": 64}, 2e8) is None


def test_inputs_are_deterministic_per_seed():
    shape = {"m": 16, "n": 16, "k": 32}
    a = GEMM.make_inputs(shape, CPU, seed=3)
    b = GEMM.make_inputs(shape, CPU, seed=3)
    c = GEMM.make_inputs(shape, CPU, seed=4)
    assert torch.equal(a["a"], b["a"]) and not torch.equal(a["a"], c["a"])


SHAPE = {"m": 256, "n": 256, "k": 512}


@pytest.fixture(scope="module")
def inputs_and_reference():
    inputs = GEMM.make_inputs(SHAPE, CPU, seed=0)
    return inputs, GEMM.reference(inputs)


def sqnr(backend, name, fmt, inputs_and_reference):
    inputs, ref = inputs_and_reference
    precision = resolve_precision(name, RunOptions(fp8_format=fmt))
    pipeline = BACKENDS.get(backend).build(BuildContext("gemm", SHAPE, precision, CPU, inputs))
    return compare(pipeline.output(), ref).sqnr_db


@pytest.mark.parametrize("backend", ["emulated", "torch"])
def test_sqnr_ordering_and_mantissa_bands(backend, inputs_and_reference):
    got = {
        "fp32": sqnr(backend, "fp32", "e4m3", inputs_and_reference),
        "bf16": sqnr(backend, "bf16", "e4m3", inputs_and_reference),
        "e4m3": sqnr(backend, "fp8_rowwise", "e4m3", inputs_and_reference),
        "e5m2": sqnr(backend, "fp8_rowwise", "e5m2", inputs_and_reference),
    }
    assert got["fp32"] > got["bf16"] + 40 > got["e4m3"] + 40 > got["e5m2"] + 40 - 6
    assert got["fp32"] > 100  # limited by FP32 accumulation order, not by a mantissa width
    # Each low precision within 3 dB of the single-rounding prediction for its mantissa width.
    for key, bits in (("bf16", 7), ("e4m3", 3), ("e5m2", 2)):
        assert abs(got[key] - rounding_sqnr_db(bits)) < 3.0, (key, got[key])


def test_every_fp8_recipe_emulated_lands_in_the_e4m3_band(inputs_and_reference):
    for name in ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8"):
        value = sqnr("emulated", name, "e4m3", inputs_and_reference)
        assert abs(value - rounding_sqnr_db(3)) < 3.0, (name, value)
    assert abs(sqnr("emulated", "tf32", "e4m3", inputs_and_reference) - rounding_sqnr_db(10)) < 3.0


@pytest.mark.parametrize("name", ["fp8_tensorwise", "fp8_rowwise"])
def test_torch_scaled_mm_matches_emulated_reference(name):
    shape = {"m": 64, "n": 48, "k": 96}
    inputs = GEMM.make_inputs(shape, CPU, seed=1)
    precision = resolve_precision(name)
    native = BACKENDS.get("torch").build(BuildContext("gemm", shape, precision, CPU, inputs)).output()
    emulated = BACKENDS.get("emulated").build(BuildContext("gemm", shape, precision, CPU, inputs)).output()
    # Same quantized operands; only accumulation order and the BF16 output rounding differ.
    assert compare(native, emulated.double()).sqnr_db > 45


def test_phases_reuse_state_and_recompose_the_output():
    inputs = GEMM.make_inputs(SHAPE, CPU, seed=0)
    pipeline = BACKENDS.get("emulated").build(BuildContext("gemm", SHAPE, PRECISIONS.get("fp8_rowwise"), CPU,
                                                          inputs))
    assert list(pipeline.phases) == ["quantize", "gemm", "epilogue"]
    pipeline.phases["quantize"]()
    pipeline.phases["gemm"]()
    assert torch.equal(pipeline.phases["epilogue"](), pipeline.end_to_end())
    stats = pipeline.cast_stats()
    assert set(stats) == {"a", "b"} and 0 <= stats["a"].overflow_frac < 0.1


def test_cpu_refusals_carry_reasons():
    torch_backend = BACKENDS.get("torch")
    assert "TF32 is a CUDA tensor-core mode" in torch_backend.unsupported_reason("gemm", PRECISIONS.get("tf32"), CPU)
    for name in ("fp8_blockwise", "mxfp8"):
        assert "tensorwise and rowwise kernels only" in torch_backend.unsupported_reason("gemm", PRECISIONS.get(name),
                                                                                         CPU)
    assert BACKENDS.get("emulated").unsupported_reason("gemm", PRECISIONS.get("mxfp8"), CPU) is None
