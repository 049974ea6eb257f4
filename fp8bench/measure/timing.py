"""Timing: device timers, timing modes and adaptive sampling with a time budget.

Method (after nvbench and ``torch.utils.benchmark``):

* **Timers.** On the CPU, ``time.perf_counter_ns`` around one call. On CUDA, a pair of CUDA events around the call on
  the case's device's current stream, read after a synchronize, so that device time between the events is counted.
* **Cold cache on CUDA.** Before each sample the L2 cache is flushed by writing a buffer twice its size (read from
  the device's properties, not a fixed 256 MB), so every sample pays its own loads from HBM. The flush kernel is
  enqueued *before* the start event: it is never part of a sample. The energy window meters the same cold calls:
  flush then call, less the flush alone (:meth:`CudaTimer.as_timed`; fp8bench.energy.meters, "What a window runs").
* **Adaptive sampling.** At least ``min_samples`` samples and ``min_time_s`` of measured time, then stop when the
  relative standard error of the median falls under ``target_rse`` (nvbench uses 0.5 %), when ``max_samples`` is
  reached, or when the case's deadline passes. Raw samples are kept; the result says whether the target was met.
* **Budget.** A case has a deadline. Sampling never starts a sample after it; if the minimum sample count could not
  be reached in time the result says ``over_budget``, and the runner records the case as skipped.

Timing modes (:class:`TimingMode`; every record says which one produced its figures, in ``timing_mode``, and whether
the L2 was flushed, in ``l2_flushed``):

``cpu``
    Host wall-clock time of one call (``perf_counter_ns``). Includes everything the call does: Python, dispatch,
    allocation, the kernels. Caches stay as the previous sample left them (nothing is flushed on the CPU).
``cuda_events``
    GPU time between two events recorded around one *eager* call. Includes every kernel of the call and the GPU idle
    time between them while Python dispatches and launches the next kernel (launch gaps): a call of many short
    kernels is launch-bound and this mode says so, which is what an eager user experiences. Excludes host work
    before the first launch and after the last one, and the L2 flush. But the host keeps launching while the GPU
    still flushes, so the launches that fit in the flush's duration (tens of microseconds for a ~100 MB buffer at
    HBM speed) are hidden: a call's launch gaps show in full only beyond them. Without a flush (``--no-l2-flush``)
    the GPU sits idle from the start event until the first kernel arrives, one launch latency (microseconds) that
    is then part of the sample.
``cuda_graph``
    GPU time between two events around one replay of a CUDA graph captured from the call (``--cuda-graph``; see
    :mod:`fp8bench.measure.cuda_graphs`). The replay submits every kernel with one launch, so the figure is the kernels'
    own time back to back, without launch gaps or host overhead: the best case an application that uses CUDA graphs
    (or ``torch.compile(mode="reduce-overhead")``) can reach. Excludes the L2 flush (enqueued before the start
    event, outside the graph) and the one graph launch (hidden behind the flush; without a flush, one launch latency
    is in the sample, as above). Host work inside the call is not captured and does not replay, and every replay
    runs the kernels of the captured call with the same arguments: the figure describes the GPU work of one call;
    numerics always come from an eager call. A call that cannot be captured (it synchronizes with the host, for
    example) is refused with the reason, never timed eagerly in its place.

``blocked_stream``
    GPU time between two events around one eager call whose kernels were all queued behind a spin kernel holding
    the stream, then released at once (``--blocked-stream``; see :mod:`fp8bench.measure.blocking`). Like ``cuda_graph``,
    the kernels back to back without launch gaps or host overhead, but from eager launches: nothing is captured.
    Excludes the spin kernel, its release and the L2 flush. A call that synchronizes with the host cannot be held;
    its case is timed with ``cuda_events`` and says why.

Figures from different modes measure different things: the comparability key (:mod:`fp8bench.core.comparability`) keeps
graph figures apart from eager ones, so neither the gate nor the dashboard compares them.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np
import torch

from fp8bench.core.devices import Device
from fp8bench.energy.meters import AsTimed

# Standard error of the median of n normal samples is sqrt(pi/2) ~= 1.2533 times that of the mean.
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
# For normal data the IQR spans 1.349 standard deviations; IQR/1.349 is a robust sigma that ignores outliers.
_IQR_PER_SIGMA = 1.349


class TimingMode(str, Enum):
    """How a figure was timed (module docstring); the values are what records store."""

    CPU = "cpu"
    CUDA_EVENTS = "cuda_events"
    CUDA_GRAPH = "cuda_graph"
    BLOCKED_STREAM = "blocked_stream"


def timing_mode_for(device: Device, cuda_graph: bool, blocked_stream: bool = False) -> TimingMode:
    """The mode a run on ``device`` uses; raises ``ValueError`` when CUDA graphs are asked of a non-CUDA device, or
    with blocked streams. (``blocked_stream`` on the CPU falls back to ``cpu``: :mod:`fp8bench.measure.blocking`.)"""
    if cuda_graph and blocked_stream:
        raise ValueError("--cuda-graph and --blocked-stream are two ways to remove launch gaps; choose one")
    if not device.is_cuda:
        if cuda_graph:
            raise ValueError(f"CUDA-graph timing needs a CUDA device; this run is on {device} "
                             "(use --device cuda or cuda:N, or drop --cuda-graph)")
        return TimingMode.CPU
    if blocked_stream:
        return TimingMode.BLOCKED_STREAM
    return TimingMode.CUDA_GRAPH if cuda_graph else TimingMode.CUDA_EVENTS


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
    """CUDA events around the call on one device; optional L2 flush before each sample (outside the events).

    Everything is bound to the device, not to whichever GPU happens to be current: the L2 size comes from its
    properties, the flush buffer lives in its memory, the events record on its current stream, and each sample runs
    under its device guard, so work that names no device (``device="cuda"``) lands there too.
    """

    def __init__(self, device: Device, flush_l2: bool = True) -> None:
        self.device = device
        self.index = device.cuda_index
        self._flush: torch.Tensor | None = None
        # Host wall time of the last sample, seconds: from just before the call until its end event completed
        # (launches, host work, the wait for the GPU). ``host_clock`` is the host's clock in seconds.
        self.last_host_s: float | None = None
        self.host_clock: Callable[[], float] = time.perf_counter
        with device.guard():
            if flush_l2:
                l2 = int(torch.cuda.get_device_properties(self.index).L2_cache_size)
                self._flush = torch.empty(l2_flush_bytes(l2), dtype=torch.uint8, device=device.torch)
            self.start, self.end = timing_events(device)

    @property
    def flushes(self) -> bool:
        """Whether each sample begins with an L2 flush."""
        return self._flush is not None

    def flush(self) -> None:
        """Enqueue the L2 flush on the device's current stream, nothing where this timer does not flush: a write
        of :func:`l2_flush_bytes`, after which a call loads its data from device memory. The one flush of every
        sample, held ones included, and of the energy window that meters them (:meth:`as_timed`)."""
        if self._flush is not None:
            with self.device.guard():
                self._flush.zero_()  # on the buffer's device's current stream

    def as_timed(self, fn: Callable[[], Any]) -> AsTimed | None:
        """``fn`` as a sample of this timer runs it, for an energy window to meter the same (fp8bench.energy.meters,
        "What a window runs"): after an L2 flush, with the flush alone to subtract. ``None`` where samples run the
        bare call (no flush): the window then loops ``fn`` itself."""
        if self._flush is None:
            return None

        def flushed() -> None:
            self.flush()
            fn()

        return AsTimed(flushed, self.flush, "the L2 flush alone")

    def time(self, fn: Callable[[], Any]) -> float:
        with self.device.guard():
            stream = torch.cuda.current_stream(self.index)
            self.flush()  # enqueued on ``stream``, before ``start``: never part of a sample
            self.start.record(stream)
            host_start = self.host_clock()
            fn()
            self.end.record(stream)
            self.end.synchronize()
            self.last_host_s = self.host_clock() - host_start
            return self.start.elapsed_time(self.end) * 1e-3  # elapsed_time is in milliseconds


def timing_events(device: Device) -> tuple[Any, Any]:
    """A start and an end event of ``device``, created now, for a timer to record in every sample.

    ``torch.cuda.Event()`` creates no CUDA event: c10's ``CUDAEvent::record`` does, on its first record (c10/cuda/
    CUDAEvent.h). An end event made per sample would be created on the host after the call was launched, and a short
    call's GPU would sit idle through that creation inside the sample. Recording both once here, and waiting for
    them, creates them outside any sample; re-recording an event is then one ``cudaEventRecord``.
    """
    stream = torch.cuda.current_stream(device.cuda_index)
    events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    for event in events:
        event.record(stream)
    events[1].synchronize()
    return events


def agreed(timer: Timer, flag: bool) -> bool:
    """A decision taken on this process's clock, as every process timing together takes it.

    A timer shared by several processes (:class:`fp8bench.measure.lockstep.LockstepTimer`) has ``agree``: the flag is
    true when it is true on any of them, so all ranks stop or go on together. A timer of one process has none, and
    the flag stands.
    """
    agree = getattr(timer, "agree", None)
    return bool(agree(flag)) if agree is not None else flag


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
        for name in ("min_time_s", "max_time_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite seconds >= 0, got {value}")


@dataclass
class Samples:
    """Raw samples (seconds) and their summary."""

    samples_s: list[float] = field(default_factory=list)
    # Host wall time of each sample where the timer's clock is not the host's (CUDA: ``CudaTimer.last_host_s``).
    host_samples_s: list[float] = field(default_factory=list)
    stopped_by: str = ""  # target | max_samples | max_time | budget
    min_samples: int = 10

    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float | None:
        return float(np.median(self.samples_s)) if self.samples_s else None

    @property
    def host_median_s(self) -> float | None:
        return float(np.median(self.host_samples_s)) if self.host_samples_s else None

    @property
    def launch_overhead_s(self) -> float | None:
        """Host wall time beyond device time, seconds: the median host sample less the median device sample.
        ``None`` where the host is the device. What it holds depends on the mode: under ``blocked_stream`` and
        ``cuda_graph`` the device figure is the kernels alone, so this is the host's launching and host work; under
        ``cuda_events`` the launch gaps are already inside the device figure, so it holds only the host time
        outside the events (docs/timing-modes.md)."""
        host, device = self.host_median_s, self.median_s
        return host - device if host is not None and device is not None else None

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
        if agreed(timer, time.monotonic() >= deadline):
            result.stopped_by = "budget"
            return result
        t = timer.time(fn)
        result.samples_s.append(t)
        host = getattr(timer, "last_host_s", None)
        if host is not None:
            result.host_samples_s.append(host)
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
