"""A simulated GPU's clocks for tests: CUDA-event time and host wall time, driven by the work actually run.

:class:`FakeCudaTimer` has the interface of :class:`fp8bench.measure.timing.CudaTimer`: ``time(fn)`` runs the call once
and returns the device seconds between its start and end events, after the end event has completed. Here ``fn`` runs
for real on the CPU, and the seconds returned are those a GPU at the simulated dense rates would take: the call's
FLOPs, counted per ATen op by torch's ``FlopCounterMode``, with ``aten.mm`` (BF16, FP32, FP16 GEMMs) at the 16-bit
rate and ``aten._scaled_mm`` at the FP8 rate. The simulated host clock (:class:`SimulatedClock`) advances by the
same time, as ``time.time()`` read around a synchronized call would; ``event_scale`` != 1 makes the events
disagree with it (events recorded on another device's stream read about 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

# The fixed cost of an event pair around a call. Not zero, so that a phase without FLOPs (a quantize) still takes
# time, as on a device; small enough not to move a GEMM's rate.
EVENT_OVERHEAD_S = 2e-9


@dataclass
class SimulatedClock:
    """Host wall time of the simulated machine, in seconds."""

    now_s: float = 0.0  # near 0, so that nanosecond steps are not lost to float64 rounding

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class FakeCudaTimer:
    """``CudaTimer.time`` on a simulated GPU running GEMMs at ``bf16_tflops`` and ``fp8_tflops``."""

    def __init__(self, clock: SimulatedClock, bf16_tflops: float, fp8_tflops: float, event_scale: float = 1.0) -> None:
        self.clock, self.event_scale = clock, event_scale
        self.rates = {torch.ops.aten.mm: bf16_tflops * 1e12, torch.ops.aten._scaled_mm: fp8_tflops * 1e12}

    def time(self, fn: Callable[[], Any]) -> float:
        with FlopCounterMode(display=False) as counter:
            fn()
        flops = counter.get_flop_counts().get("Global", {})
        unknown = set(flops) - set(self.rates)
        if unknown:
            raise AssertionError(f"the simulated GPU has no rate for {sorted(map(str, unknown))}")
        seconds = EVENT_OVERHEAD_S + sum(n / self.rates[op] for op, n in flops.items())
        self.clock.advance(seconds)
        return seconds * self.event_scale
