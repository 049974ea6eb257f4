"""Timing: device timers and adaptive sampling with a time budget.

Method (after nvbench and ``torch.utils.benchmark``):

* **Timers.** On the CPU, ``time.perf_counter_ns`` around one call. On CUDA, a pair of CUDA events around the call,
  read after a synchronize, so that only device time between the events is counted, not the launch queue.
* **Cold cache on CUDA.** Before each sample the L2 cache is flushed by writing a buffer twice its size (read from
  the device's properties, not a fixed 256 MB), so every sample pays its own loads from HBM.
* **Adaptive sampling.** At least ``min_samples`` samples and ``min_time_s`` of measured time, then stop when the
  relative standard error of the median falls under ``target_rse`` (nvbench uses 0.5 %), when ``max_samples`` is
  reached, or when the case's deadline passes. Raw samples are kept; the result says whether the target was met.
* **Budget.** A case has a deadline. Sampling never starts a sample after it; if the minimum sample count could not
  be reached in time the result says ``over_budget``, and the runner records the case as skipped.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from fp8bench.devices import Device

# Standard error of the median of n normal samples is sqrt(pi/2) ~= 1.2533 times that of the mean.
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
# For normal data the IQR spans 1.349 standard deviations; IQR/1.349 is a robust sigma that ignores outliers.
_IQR_PER_SIGMA = 1.349


class Timer(Protocol):
    def time(self, fn: Callable[[], Any]) -> float:
        """Seconds one call of ``fn`` took on the device."""
        ...


class CpuTimer:
    def time(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - start) * 1e-9


def l2_flush_bytes(l2_cache_bytes: int) -> int:
    """Size of the buffer whose write evicts the L2: twice the cache (replacement is not perfectly LRU)."""
    if l2_cache_bytes <= 0:
        raise ValueError(f"L2 size must be positive, got {l2_cache_bytes}")
    return 2 * l2_cache_bytes


class CudaTimer:
    """CUDA events around the call; optional L2 flush before each sample (outside the events)."""

    def __init__(self, device: Device, flush_l2: bool = True) -> None:
        self.device = device
        self._flush: torch.Tensor | None = None
        if flush_l2:
            l2 = int(torch.cuda.get_device_properties(device.index or 0).L2_cache_size)
            self._flush = torch.empty(l2_flush_bytes(l2), dtype=torch.uint8, device=device.torch)

    def time(self, fn: Callable[[], Any]) -> float:
        if self._flush is not None:
            self._flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds


def timer_for(device: Device, flush_l2: bool = True) -> Timer:
    return CudaTimer(device, flush_l2) if device.is_cuda else CpuTimer()


@dataclass(frozen=True)
class SamplingPolicy:
    min_samples: int = 10
    min_time_s: float = 0.1  # measured time before the spread target may stop sampling
    target_rse: float = 0.005  # relative standard error of the median
    max_samples: int = 500
    max_time_s: float = 5.0  # measured time per timed function, whatever the spread

    def __post_init__(self) -> None:
        if self.min_samples < 3:
            raise ValueError(f"min_samples must be >= 3 for a spread estimate, got {self.min_samples}")
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples ({self.max_samples}) < min_samples ({self.min_samples})")
        if not 0 < self.target_rse < 1:
            raise ValueError(f"target_rse must be in (0, 1), got {self.target_rse}")


@dataclass
class Samples:
    """Raw samples (seconds) and their summary."""

    samples_s: list[float] = field(default_factory=list)
    stopped_by: str = ""  # target | max_samples | max_time | budget
    min_samples: int = 10

    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float | None:
        return float(np.median(self.samples_s)) if self.samples_s else None

    @property
    def iqr_s(self) -> float | None:
        if not self.samples_s:
            return None
        q1, q3 = np.percentile(self.samples_s, [25, 75])
        return float(q3 - q1)

    @property
    def rsd(self) -> float | None:
        """Relative standard deviation of the samples (std / mean)."""
        if self.n < 2:
            return None
        arr = np.asarray(self.samples_s)
        return float(arr.std(ddof=1) / arr.mean())

    @property
    def median_rse(self) -> float | None:
        """Relative standard error of the median, from a robust (IQR-based) sigma."""
        if self.n < 3 or not self.median_s:
            return None
        sigma = (self.iqr_s or 0.0) / _IQR_PER_SIGMA
        return _MEDIAN_SE_FACTOR * sigma / math.sqrt(self.n) / self.median_s

    @property
    def target_reached(self) -> bool:
        return self.stopped_by == "target"

    @property
    def over_budget(self) -> bool:
        return self.stopped_by == "budget" and self.n < self.min_samples

    def summary(self) -> dict[str, Any]:
        return {"median_s": self.median_s, "iqr_s": self.iqr_s, "rsd": self.rsd, "n": self.n,
                "median_rse": self.median_rse, "stopped_by": self.stopped_by}


def sample(fn: Callable[[], Any], timer: Timer, policy: SamplingPolicy, deadline: float) -> Samples:
    """Time ``fn`` repeatedly under ``policy`` until a stop rule fires. ``deadline`` is a ``time.monotonic()``.

    Python's cyclic garbage collector is paused while sampling (as ``timeit`` does): a full collection walks every
    object of the process, so its pauses (milliseconds in a large process) would land in whichever samples happen
    to allocate the triggering object, e.g. the autograd nodes of a training step, and not in others.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _sample(fn, timer, policy, deadline)
    finally:
        if was_enabled:
            gc.enable()


def _sample(fn: Callable[[], Any], timer: Timer, policy: SamplingPolicy, deadline: float) -> Samples:
    result = Samples(min_samples=policy.min_samples)
    total = 0.0
    while True:
        if time.monotonic() >= deadline:
            result.stopped_by = "budget"
            return result
        t = timer.time(fn)
        result.samples_s.append(t)
        total += t
        if result.n < policy.min_samples:
            continue
        if result.n >= policy.max_samples:
            result.stopped_by = "max_samples"
            return result
        if total >= policy.min_time_s:
            rse = result.median_rse
            if rse is not None and rse <= policy.target_rse:
                result.stopped_by = "target"
                return result
        if total >= policy.max_time_s:
            result.stopped_by = "max_time"
            return result
