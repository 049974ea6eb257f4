"""A deliberately slowed ``torch`` GEMM, for proving that the A/B gate catches a real slowdown.

Loaded into one side of an A/B run through ``FP8BENCH_PLUGINS=fp8bench_test_slowed`` (with this folder on
``PYTHONPATH``). It wraps the ``torch`` backend's GEMM builder so that, for the precisions listed in
``FP8BENCH_TEST_SLOW_PRECISIONS`` (comma-separated, default ``bf16``), every end-to-end call does the real GEMM
``FP8BENCH_TEST_SLOW_FACTOR`` times (default 3): extra real work, not a sleep, so the slowdown behaves like a kernel
that lost efficiency. A fractional factor (``1.1``) adds, after the whole repetitions, the same GEMM on the first
``fraction x M`` rows of A: about that fraction of the work again. Other precisions are left untouched, so the gate
must single out the slowed cases.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import fp8bench.kernels.torch_backend  # noqa: F401 - registers the backend this module wraps
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

SLOW_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_SLOW_PRECISIONS", "bf16").split(",") if p}
FACTOR = float(os.environ.get("FP8BENCH_TEST_SLOW_FACTOR", "3"))

_backend = BACKENDS.get("torch")
_build, _supports = _backend.builders["gemm"]


def _slowed_build(ctx: BuildContext) -> Pipeline:
    pipeline = _build(ctx)
    if ctx.precision.name not in SLOW_PRECISIONS or getattr(pipeline, "_slowed", False):
        return pipeline
    inner = pipeline.end_to_end
    whole = int(FACTOR)
    rows = round((FACTOR - whole) * ctx.inputs["a"].shape[0])
    part = _build(dataclasses.replace(ctx, inputs={**ctx.inputs, "a": ctx.inputs["a"][:rows]})).end_to_end \
        if rows else None

    def end_to_end() -> Any:
        for _ in range(whole - 1):
            inner()
        if part is not None:
            part()
        return inner()

    slowed = dataclasses.replace(pipeline, end_to_end=end_to_end,
                                 notes=[*pipeline.notes, f"test-only: {FACTOR:g}x the work"])
    return slowed


if _build is not _slowed_build and getattr(_build, "__name__", "") != "_slowed_build":
    _backend.builders["gemm"] = (_slowed_build, _supports)
