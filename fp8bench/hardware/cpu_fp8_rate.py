"""How fast torch's FP8 GEMM runs on this CPU, measured in well under a second, and whether it is a slow path.

PyTorch's CPU build runs ``torch._scaled_mm`` with tensorwise and rowwise scales, but how fast depends on the CPU's
instruction set: on one Xeon (AMX-BF16 without AMX-FP16) a 256^3 FP8 GEMM took 0.7 s a call against 1.7 ms for
BF16's ``mm``; on an AMD EPYC without AMX it ran 5x slower than BF16 at 128x128x256 and about 25x slower at
128x256x2048. Such a path is a correct reference, not a tuned kernel: FP8 cases timed on it say little about FP8,
and larger shapes end as ``skipped: over budget``. ``fp8bench doctor`` says so up front, from one small GEMM of
each kind timed here (:func:`measure_cpu_fp8_rate`).

The probe is bounded: once the timed calls of a kind have taken :data:`TIMED_S` no more are made, so even the
slowest path known (about 0.2 s a call at the probe's shape: one warm-up and one timed call) keeps the whole probe
under a second. It runs on one thread: the rate per core is what differs between FP8 and BF16, and one thread is
not held up waiting for a core that another process has, as an OpenMP team is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fp8bench.core.formats import E4M3
from fp8bench.numerics.quantize import quantize_tensorwise
from fp8bench.numerics.scaled_gemm import fp8_scaled_mm

# Small enough that the slowest path known takes ~0.2 s a call (8.4 MFLOP at ~0.05 GFLOP/s), large enough that a
# tuned kernel's time is not all call overhead.
PROBE_SHAPE = (128, 128, 256)  # M, N, K
REPEATS = 5  # timed calls per kind after one warm-up; the fastest counts (a preempted call is slower, never faster)
TIMED_S = 0.05  # timed seconds per kind after which no more calls are made
# A CPU FP8 GEMM that converts its operands to BF16 inside its tiles runs near the BF16 rate; one more than this
# many times slower than BF16's matmul at the same shape is not using the CPU's matrix or vector units for it.
SLOW_FACTOR = 4.0


@dataclass(frozen=True)
class CpuFp8Rate:
    """FP8 (tensorwise E4M3, BF16 output) and BF16 GEMM rates at :data:`PROBE_SHAPE`, GFLOP/s."""

    shape: tuple[int, int, int]
    fp8_gflops: float
    bf16_gflops: float
    probe_s: float  # wall time of the whole probe, seconds

    @property
    def slowdown(self) -> float:
        """How many times slower FP8 ran than BF16 (below 1: faster)."""
        return self.bf16_gflops / self.fp8_gflops

    @property
    def slow_path(self) -> bool:
        return self.slowdown > SLOW_FACTOR

    def describe(self) -> str:
        m, n, k = self.shape
        return (f"FP8 (tensorwise E4M3) {self.fp8_gflops:.3g} GFLOP/s, BF16 {self.bf16_gflops:.3g} GFLOP/s at "
                f"{m}x{n}x{k}, one thread: FP8 {self.slowdown:.2g}x slower")

    def warning(self) -> str | None:
        """One line for the user when FP8 runs on a slow path, else ``None``."""
        if not self.slow_path:
            return None
        return (f"torch's CPU FP8 GEMM is a slow reference path on this CPU ({self.describe()}). FP8 cases timed "
                "here measure that path, not FP8 hardware, and large shapes end as `skipped: over budget`; use "
                "small shapes, or `--backend emulated` for the numerics")

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "fp8_gflops": self.fp8_gflops, "bf16_gflops": self.bf16_gflops,
                "slowdown": self.slowdown, "slow_path": self.slow_path, "probe_s": round(self.probe_s, 3)}


def _fastest(fn: Callable[[], Any]) -> float:
    """Seconds of the fastest of up to :data:`REPEATS` calls after a warm-up call (one-time set-up), fewer once
    the timed calls have taken :data:`TIMED_S` (a slow path is not repeated to the same verdict)."""
    fn()
    best, spent = float("inf"), 0.0
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        best, spent = min(best, seconds), spent + seconds
        if spent > TIMED_S:
            break
    return best


def measure_cpu_fp8_rate(shape: tuple[int, int, int] = PROBE_SHAPE) -> CpuFp8Rate | None:
    """Time one small FP8 and BF16 GEMM on the CPU; ``None`` when torch has no CPU FP8 GEMM at all."""
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(shape, started)
    finally:
        torch.set_num_threads(threads)


def _measure(shape: tuple[int, int, int], started: float) -> CpuFp8Rate | None:
    m, n, k = shape
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    qa, qb = quantize_tensorwise(a, E4M3), quantize_tensorwise(b, E4M3)
    try:
        fp8_s = _fastest(lambda: fp8_scaled_mm(qa, qb, torch.bfloat16))
    except (RuntimeError, NotImplementedError):
        return None
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16).t()
    bf16_s = _fastest(lambda: a16 @ b16)
    flops = 2 * m * n * k
    return CpuFp8Rate(shape, flops / fp8_s / 1e9, flops / bf16_s / 1e9, time.perf_counter() - started)
