"""An ``emulated`` GEMM whose output holds NaN, for proving that a real run records such a case as ``invalid``.

Loaded through ``FP8BENCH_PLUGINS=fp8bench_test_nonfinite`` (with this folder on ``PYTHONPATH``). For the precisions
listed in ``FP8BENCH_TEST_NONFINITE_PRECISIONS`` (comma-separated, default ``fp16``) the GEMM is the real emulated
one, timed as usual, but the fresh output handed to the numerics check has its first element set to NaN, as an
overflowing kernel's would: the runner then stores the record as ``invalid`` with a "non-finite output" reason,
its samples kept (the output check adds that the timed output differs from that fresh one in one element). Other
precisions are left untouched.
"""

from __future__ import annotations

import dataclasses
import os

import torch

import fp8bench.kernels.emulated  # noqa: F401 - registers the backend this module wraps
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

NONFINITE_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_NONFINITE_PRECISIONS", "fp16").split(",")
                        if p.strip()}

_backend = BACKENDS.get("emulated")
_build, _supports = _backend.builders["gemm"]


def _nonfinite_build(ctx: BuildContext) -> Pipeline:
    pipeline = _build(ctx)
    if ctx.precision.name not in NONFINITE_PRECISIONS:
        return pipeline
    inner = pipeline.output

    def output() -> torch.Tensor:
        out = inner().clone()
        out.view(-1)[0] = float("nan")
        return out

    return dataclasses.replace(pipeline, output=output, notes=[*pipeline.notes, "test-only: NaN in the output"])


if getattr(_build, "__name__", "") != "_nonfinite_build":
    _backend.builders["gemm"] = (_nonfinite_build, _supports)
