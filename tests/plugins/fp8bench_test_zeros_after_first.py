"""A GEMM whose end-to-end call returns zeros after its first call, wrapped the way a user's plugin wraps a backend.

Loaded through ``FP8BENCH_PLUGINS=fp8bench_test_zeros_after_first`` (with this folder on ``PYTHONPATH``). It wraps
the GEMM builder of each backend named in ``FP8BENCH_TEST_ZEROS_BACKENDS`` (comma-separated, default ``torch``) and,
for the precisions in ``FP8BENCH_TEST_ZEROS_PRECISIONS`` (default ``bf16``), replaces only the pipeline's
``end_to_end``: its first call is the backend's real one, every later call returns zeros of the same shape and dtype
without computing anything. The pipeline's ``output`` and phases are left as the backend built them, as a wrapper
that changes only what is timed leaves them. Other precisions and backends are untouched.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

import fp8bench.kernels.torch_backend  # noqa: F401 - registers the backends this module may wrap
import fp8bench.kernels.triton_backend  # noqa: F401
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

ZEROS_BACKENDS = [b.strip() for b in os.environ.get("FP8BENCH_TEST_ZEROS_BACKENDS", "torch").split(",") if b.strip()]
ZEROS_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_ZEROS_PRECISIONS", "bf16").split(",")
                    if p.strip()}


def _zeros_after_first(pipeline: Pipeline) -> Pipeline:
    real = pipeline.end_to_end
    first: list[torch.Tensor] = []

    def end_to_end() -> Any:
        if not first:
            first.append(real())
            return first[0]
        return torch.zeros_like(first[0])

    return dataclasses.replace(pipeline, end_to_end=end_to_end,
                               notes=[*pipeline.notes, "test-only: zeros after the first call"])


def _wrap(backend_name: str) -> None:
    backend = BACKENDS.get(backend_name)
    build, supports = backend.builders["gemm"]
    if getattr(build, "__name__", "") == "_zeros_build":
        return

    def _zeros_build(ctx: BuildContext) -> Pipeline:
        pipeline = build(ctx)
        return _zeros_after_first(pipeline) if ctx.precision.name in ZEROS_PRECISIONS else pipeline

    backend.builders["gemm"] = (_zeros_build, supports)


for _name in ZEROS_BACKENDS:
    _wrap(_name)
