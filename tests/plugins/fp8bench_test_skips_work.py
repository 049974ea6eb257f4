"""A ``torch`` GEMM that does all its work on the first call and half of it on every later one, for proving that
a kernel whose timed calls compute less than a fresh call is recorded ``invalid``.

Loaded through ``FP8BENCH_PLUGINS=fp8bench_test_skips_work`` (with this folder on ``PYTHONPATH``). For the precisions
listed in ``FP8BENCH_TEST_SKIPS_WORK_PRECISIONS`` (comma-separated, default ``bf16``) the first call of each built
GEMM is torch's real one; every later call multiplies only the first half of the K dimension, the way a kernel that
skips work when called back to back would: faster, and wrong. Its ``output`` is its timed call, as in torch's own
GEMM pipeline. Other precisions are left untouched.
"""

from __future__ import annotations

import dataclasses
import os

import torch

import fp8bench.kernels.torch_backend  # noqa: F401 - registers the backend this module wraps
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

SKIPPING_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_SKIPS_WORK_PRECISIONS", "bf16").split(",")
                       if p.strip()}

_backend = BACKENDS.get("torch")
_build, _supports = _backend.builders["gemm"]


def _skipping_build(ctx: BuildContext) -> Pipeline:
    pipeline = _build(ctx)
    if ctx.precision.name not in SKIPPING_PRECISIONS:
        return pipeline
    full = pipeline.end_to_end
    dtype = full().dtype
    a, b = ctx.inputs["a"].to(dtype), ctx.inputs["b"].to(dtype)
    half = a.shape[1] // 2
    calls = 0

    def gemm() -> torch.Tensor:
        nonlocal calls
        calls += 1
        return full() if calls == 1 else a[:, :half] @ b[:, :half].t()

    return dataclasses.replace(pipeline, end_to_end=gemm, output=gemm, phases={"gemm": gemm},
                               notes=[*pipeline.notes, "test-only: skips half the work after the first call"])


if getattr(_build, "__name__", "") != "_skipping_build":
    _backend.builders["gemm"] = (_skipping_build, _supports)
