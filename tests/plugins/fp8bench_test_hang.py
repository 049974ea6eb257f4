"""A ``torch`` GEMM whose build never returns, for proving that a hung A/B side fails its round by name.

Loaded into one side of an A/B run through ``FP8BENCH_PLUGINS=fp8bench_test_hang`` (with this folder on
``PYTHONPATH``). Building the GEMM for a precision listed in ``FP8BENCH_TEST_HANG_PRECISIONS`` (comma-separated,
default ``bf16``) waits forever, the way a deadlocked kernel launch or a driver call that never answers would;
other precisions are left untouched.

With ``FP8BENCH_TEST_HANG_ANSWERS_SIGNALS=1`` the build still never returns, but waits in short sleeps, as a long
case's Python-level work does, so a signal stops it: the way tests stop a run mid-case. (Waiting on one event, the
process may never see a signal that the kernel delivers to another of its threads, torch's or the telemetry's: the
main thread's wait is not interrupted, and Python runs the handler only once that thread is back in the
interpreter.)
"""

from __future__ import annotations

import os
import threading
import time

import fp8bench.kernels.torch_backend  # noqa: F401 - registers the backend this module wraps
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

HANG_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_HANG_PRECISIONS", "bf16").split(",") if p}
ANSWERS_SIGNALS = os.environ.get("FP8BENCH_TEST_HANG_ANSWERS_SIGNALS") == "1"

_backend = BACKENDS.get("torch")
_build, _supports = _backend.builders["gemm"]


def _hanging_build(ctx: BuildContext) -> Pipeline:
    if ctx.precision.name in HANG_PRECISIONS:
        if ANSWERS_SIGNALS:
            while True:
                time.sleep(0.05)
        threading.Event().wait()  # never set
    return _build(ctx)


if getattr(_build, "__name__", "") != "_hanging_build":
    _backend.builders["gemm"] = (_hanging_build, _supports)
