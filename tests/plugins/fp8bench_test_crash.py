"""A ``torch`` GEMM whose build kills the process measuring it, for proving that a dead worker fails its case only.

Loaded through ``FP8BENCH_PLUGINS=fp8bench_test_crash`` (with this folder on ``PYTHONPATH``). For the precisions
listed in ``FP8BENCH_TEST_CRASH_PRECISIONS`` (comma-separated, default ``fp8_rowwise``) building the GEMM ends the
process the way a broken kernel or the kernel's out-of-memory killer would, chosen by ``FP8BENCH_TEST_CRASH``:
``kill`` (the default: SIGKILL, as the OOM killer sends) or ``segfault`` (a real invalid read: SIGSEGV). Other
precisions are left untouched. In a single-process run it ends the whole run; under ``--devices`` only the case.
"""

from __future__ import annotations

import ctypes
import os
import signal

import fp8bench.kernels.torch_backend  # noqa: F401 - registers the backend this module wraps
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS

CRASH_PRECISIONS = {p.strip() for p in os.environ.get("FP8BENCH_TEST_CRASH_PRECISIONS", "fp8_rowwise").split(",")
                    if p.strip()}
HOW = os.environ.get("FP8BENCH_TEST_CRASH", "kill")
if HOW not in ("kill", "segfault"):
    raise ValueError(f"FP8BENCH_TEST_CRASH={HOW!r}; accepted: kill, segfault")

_backend = BACKENDS.get("torch")
_build, _supports = _backend.builders["gemm"]


def _crashing_build(ctx: BuildContext) -> Pipeline:
    if ctx.precision.name in CRASH_PRECISIONS:
        if HOW == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        os.kill(os.getpid(), signal.SIGKILL)
    return _build(ctx)


if getattr(_build, "__name__", "") != "_crashing_build":
    _backend.builders["gemm"] = (_crashing_build, _supports)
