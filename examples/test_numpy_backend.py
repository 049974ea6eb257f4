"""The numpy backend: what it runs, what it refuses, and its GEMM against the FP64 reference."""

from __future__ import annotations

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.precisions import resolve_precision
from fp8bench.kernels.numpy_backend import NUMPY
from fp8bench.workloads.gemm import GEMM

CPU = Device("cpu")


def test_runs_fp32_on_the_cpu_and_says_why_not_elsewhere() -> None:
    assert NUMPY.availability(CPU) is None
    assert NUMPY.availability(Device("cuda", 0)) == "backend numpy runs on CPU devices only"
    assert NUMPY.unsupported_reason("gemm", resolve_precision("fp32"), CPU) is None
    assert "fp32 only" in NUMPY.unsupported_reason("gemm", resolve_precision("bf16"), CPU)
    assert NUMPY.unsupported_reason("attention", resolve_precision("fp32"), CPU) == (
        "backend numpy has no attention implementation")


def test_gemm_matches_the_fp64_reference() -> None:
    shape = GEMM.parse_shape("48x32x64")
    inputs = GEMM.make_inputs(shape, CPU, seed=0)
    out = NUMPY.build(BuildContext("gemm", shape, resolve_precision("fp32"), CPU, inputs)).output()
    assert out.shape == (48, 32) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), GEMM.reference(inputs), rtol=1e-5, atol=1e-5)
