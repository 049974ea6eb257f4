"""The ``blocked_stream`` timing mode: kernel time without launch gaps, and without capturing a graph.

The problem. Events around an *eager* call (``cuda_events``) time the GPU from the start event to the end event,
and the GPU runs each kernel as soon as the host has launched it. When the host needs longer to launch a kernel
(Python, dispatch, ``cudaLaunchKernel``: microseconds) than the GPU needs to run the previous one, the GPU idles in
between, and those launch gaps are in the figure. A quantize-GEMM-epilogue call at a small shape is made of such
kernels. ``cuda_graph`` removes the gaps by capturing the call, but refuses anything that synchronizes with the
host, the training step among them.

The method (nvbench's cold measurement, ``nvbench/detail/measure_cold.cuh`` with ``blocking_kernel``; tritonbench's
``gpu_events`` mode, ``components/do_bench/gpu_events.py``). For each sample:

1. **hold the stream**: launch a one-warp *spin kernel* that polls a flag in device memory until it reads the
   sample's number (a generation count, so no reset of the flag is ever needed and no reset can race a release);
2. queue the L2 flush, the start event, **the call** and the end event behind it: the host launches every kernel
   while the GPU still spins, so they sit in the stream's queue;
3. **release**: a one-thread kernel on a second stream writes the sample's number into the flag; the spin kernel
   ends and the queued kernels run back to back;
4. wait for the end event; read whether the spin kernel had to give up (below). The sample is the events' time.

What the figure includes: every kernel of the call and the GPU's own time between them (no host launch gaps), like
``cuda_graph``, but from eager launches, so nothing is captured and nothing is refused for being uncapturable.
Excluded: the spin, the release, the flush (all before the start event) and all host work.

Where it cannot apply, the case is timed with ``cuda_events`` instead, with the reason in its notes and
``timing_mode`` saying ``cuda_events`` (a record's figures all come from one mode):

* **not a CUDA device**: there is no stream to hold; the host clock times the call (``cpu``);
* **Triton is not installed**: the spin kernel is written in Triton (the ``triton`` extra);
* **two streams that cannot run side by side**: the release runs on a second stream, so it must be able to run
  while the spin occupies the first. ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (one hardware queue: every stream's work in
  submission order) and ``CUDA_LAUNCH_BLOCKING=1`` (each launch waits for its kernel) rule that out, and are refused
  by name before any spin (:func:`serializing_reason`); any other cause (an MPS client) is found once, when the
  timer is made, by holding an empty call (:func:`overlap_reason`): a call that launches nothing cannot wait for
  anything, so a spin that still gives up was never reached by its release;
* **a call of more than** :data:`MAX_QUEUED_LAUNCHES` **GPU operations** (counted once, unheld, by the PyTorch
  profiler's CUDA activity): nvbench's ``blocking_kernel.cuh`` advises about 32 launches at most behind a blocked
  stream; past the launch queue's depth the host's launch itself waits, for a spin only the host can end;
* **a call that synchronizes with the host** (``.item()``, ``float(loss)``, ``.cpu()``, ``torch.cuda.synchronize()``,
  or a ``cudaMalloc``, which synchronizes implicitly): the host waits for work queued behind the spin kernel, which
  waits for a release the host never gets to launch. A deadlock, so the spin kernel gives up after
  :data:`SPIN_GIVE_UP_S` seconds (counted in polls timed on the device, :func:`poll_seconds`) and records that it
  did; the host's wait then ends and the sample is thrown away. Every call of a case runs once unheld (its first
  allocations happen there, outside any hold) and once held before sampling, so the fall-back is decided before
  any figure is taken; a call that synchronizes only now and then can still give up in a later sample, and then
  every sample of the case is retaken with ``cuda_events`` (:func:`gave_up_note`), never skipped.

Energy. An energy window meters held calls as they were timed (:meth:`BlockedStreamTimer.as_timed`;
fp8bench.energy.meters, "What a window runs"): each call inside a held sample of this timer (hold, flush, events,
call, release, the wait for the end event), then as many held samples with no call in them, the host kept busy
(:func:`busy_wait`) as long as the call's launches took on average, so that the spin polls as long as it did
around the call. The difference is the call's kernels back to back, what the events time: the spin (a kernel: one
warp polling on one SM, drawing power for as long as the host launches), the flush and each sample's wait are in
both windows and cancel. It assumes that the spin's power does not depend on what queues behind it (queued work
does not run) and uses the mean launch time, which is what a linear cost in the spin's duration needs. A call
whose hold gives up inside the window is metered bare instead, and its record says so (``matches_timing: false``).

Why a Triton kernel, and not ``torch.cuda._sleep``: ``_sleep(cycles)`` spins for a fixed number of clock cycles and
cannot wait for a flag. If the host needs longer to queue the call than the sleep lasts, the GPU starts early and the
launch gaps are back in the figure without any sign. And why a device-memory flag released by a kernel
(tritonbench's way) rather than nvbench's host-mapped pinned flag written by the host: the flag stays an ordinary
CUDA tensor handed to Triton, the release is itself ordered GPU work, and no host-mapped pointer has to be passed
through Triton's launcher. The price: the release needs a second stream that runs beside the held one, which is why
environments without that are refused up front rather than waited out.

Verification: the spin and release kernels run under Triton's CPU interpreter in the tests (the flag, the
generation count, the give-up rule and its calibration); the whole timer runs on the fake CUDA runtime of
``tests/fake_cuda_runtime.py``, which holds a stream behind a spin kernel and hangs, as CUDA does, when nothing
releases it, serializes streams with one hardware queue, and synchronizes on a ``cudaMalloc``. None of it has run
on a GPU here: the seconds one poll takes, the profiler's count of a call's operations, and that the release
reaches the spin from a second stream are claims the first GPU run has to check.
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Unsupported
from fp8bench.energy.meters import AsTimed
from fp8bench.measure.timing import CudaTimer, Timer, TimingMode

# GPU operations one held call may queue behind the spin kernel. nvbench's blocking_kernel.cuh (the stream hold of
# its cold measurement) warns that how much work can queue behind a blocked stream depends on the device and driver,
# and advises about 32 kernel launches at most; past the queue's depth the host's launch itself waits, for a spin
# that only the host can end.
MAX_QUEUED_LAUNCHES = 32
# Seconds a spin kernel polls before it gives up: far longer than any host needs to queue one call of at most
# MAX_QUEUED_LAUNCHES kernels, short enough that a call which synchronizes costs the run one second, not minutes.
# tritonbench gives up after ~1 s (1000 polls with a 1 ms sleep each).
SPIN_GIVE_UP_S = 1.0
# Polls timed once, when the hold is made, to turn SPIN_GIVE_UP_S into a poll count (the kernel has no clock the
# Triton interpreter runs; a poll is one uncached global-memory load, of the order of a microsecond on a
# data-centre GPU, so this calibration spin lasts tens of milliseconds).
# Made on a GPU that is often idle, at low clocks: loaded, a poll may be faster and the give-up shorter; the
# selfcheck claim `spin_give_up_loaded` checks that it still lasts over 100 ms (fp8bench.measure.claims).
CALIBRATION_CHECKS = 1 << 15
# A generation no release ever reaches (the flag is an int32): the calibration spin runs all its polls.
NEVER_RELEASED = 2**31 - 1


def give_up_checks(give_up_s: float, poll_s: float) -> int:
    """The poll count that lasts ``give_up_s`` seconds when one poll takes ``poll_s`` seconds (1 to 2**31 - 1)."""
    if not (math.isfinite(poll_s) and poll_s > 0):
        raise ValueError(f"seconds per poll must be finite and positive, got {poll_s}")
    if not (math.isfinite(give_up_s) and give_up_s > 0):
        raise ValueError(f"give-up time must be finite seconds > 0, got {give_up_s}")
    return int(min(NEVER_RELEASED, max(1, math.ceil(give_up_s / poll_s))))


def poll_seconds(timed_spin: Callable[[int], float], checks: int = CALIBRATION_CHECKS) -> float:
    """Seconds one poll of the spin kernel takes: ``timed_spin(n)`` runs a spin of ``n`` polls that no release
    ends and returns its seconds."""
    return timed_spin(checks) / checks


class HoldTimedOut(Unsupported):
    """The spin kernel gave up before its release: the call waited for the GPU while the stream was held."""


class StreamHold(Protocol):
    """Holds one stream until released (module docstring, steps 1 and 3)."""

    def hold(self, stream: Any, generation: int) -> None:
        """Launch the spin kernel on ``stream``, waiting for the flag to reach ``generation``."""
        ...

    def release(self, generation: int) -> None:
        """Write ``generation`` into the flag, from another stream."""
        ...

    def gave_up(self) -> bool:
        """Whether the last spin kernel stopped polling before it saw its release (read after a synchronize)."""
        ...


def triton_missing_reason() -> str | None:
    """Why the spin kernel cannot be built here, or ``None``."""
    if importlib.util.find_spec("triton") is None:
        return "the spin kernel that holds the stream is a Triton kernel, and Triton is not installed " \
               "(pip install 'fp8bench[triton]')"
    return None


_KERNELS: dict[str, Any] = {}


def spin_kernels() -> tuple[Any, Any]:
    """The Triton ``(spin, release)`` kernels, defined on first use (Triton is an optional extra, and reads
    ``TRITON_INTERPRET`` when a kernel is defined)."""
    if not _KERNELS:
        import triton
        import triton.language as tl

        # Integer arguments are not specialized (Triton compiles a variant for a value of 1 or a multiple of 16):
        # a new variant compiling while the stream is held would eat the spin's patience.
        @triton.jit(do_not_specialize=["generation", "max_checks"])
        def spin(flag_ptr, gave_up_ptr, generation, max_checks):
            # One program, one warp: it occupies one SM while the queued kernels wait behind it on its stream.
            seen = tl.load(flag_ptr, volatile=True)
            checks = 0
            while (seen < generation) & (checks < max_checks):
                seen = tl.load(flag_ptr, volatile=True)  # volatile: read memory every time, never a cached value
                checks += 1
            tl.store(gave_up_ptr, (seen < generation).to(tl.int32))

        @triton.jit(do_not_specialize=["generation"])
        def release(flag_ptr, generation):
            tl.atomic_xchg(flag_ptr, generation)

        _KERNELS["spin"], _KERNELS["release"] = spin, release
    return _KERNELS["spin"], _KERNELS["release"]


class TritonStreamHold:
    """:class:`StreamHold` with the Triton kernels of :func:`spin_kernels` and a flag in the device's memory; its
    spin gives up after ``give_up_s`` seconds, counted in polls timed on the device (:func:`poll_seconds`)."""

    def __init__(self, device: Device, give_up_s: float = SPIN_GIVE_UP_S) -> None:
        self.spin, self.release_kernel = spin_kernels()
        self.device = device
        with device.guard():
            self.flag = torch.zeros(1, dtype=torch.int32, device=device.torch)
            self.gave_up_flag = torch.zeros(1, dtype=torch.int32, device=device.torch)
            self.side = torch.cuda.Stream(device.torch)  # the release must not queue behind the held stream
            # Compile both kernels now, not inside the first held sample: generation 0 is already "released".
            self.release_kernel[(1,)](self.flag, 0, num_warps=1)
            self.spin[(1,)](self.flag, self.gave_up_flag, 0, 1, num_warps=1)
            torch.cuda.synchronize(device.torch)
            self.poll_s = poll_seconds(self._timed_spin)
        self.max_checks = give_up_checks(give_up_s, self.poll_s)

    def _timed_spin(self, checks: int) -> float:
        """Seconds of GPU time a spin of ``checks`` polls takes when nothing releases it (CUDA events)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.spin[(1,)](self.flag, self.gave_up_flag, NEVER_RELEASED, checks, num_warps=1)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds

    def hold(self, stream: Any, generation: int) -> None:
        with torch.cuda.stream(stream):
            self.spin[(1,)](self.flag, self.gave_up_flag, generation, self.max_checks, num_warps=1)

    def release(self, generation: int) -> None:
        with torch.cuda.stream(self.side):
            self.release_kernel[(1,)](self.flag, generation, num_warps=1)

    def gave_up(self) -> bool:
        return bool(self.gave_up_flag.item())


class BlockedStreamTimer(CudaTimer):
    """``Timer.time`` in the ``blocked_stream`` mode (module docstring): events around one call queued behind a
    held stream, with :class:`fp8bench.measure.timing.CudaTimer`'s device binding and L2 flush; seconds of GPU time.
    Raises :class:`HoldTimedOut` when the call waited for the GPU."""

    def __init__(self, device: Device, hold: StreamHold, flush_l2: bool = True) -> None:
        super().__init__(device, flush_l2)
        self.hold = hold
        self.generation = 0
        # How the host waits, seconds, in a held sample with no call (as_timed): a busy loop on the host's clock.
        self.host_wait: Callable[[float], None] = busy_wait

    def as_timed(self, fn: Callable[[], Any]) -> AsTimed:
        """``fn`` as a held sample runs it, for an energy window (module docstring, "Energy"): one held sample of
        this timer around the call, and, to subtract, one around a host wait as long as the call's launches took on
        average (host seconds, :attr:`host_clock`) in the call's window, so that the spin polls as long and the
        flush, where there is one, runs in both. Raises :class:`HoldTimedOut` as :meth:`time` does."""
        launches = _HostSeconds()

        def launched() -> None:
            start = self.host_clock()
            fn()
            launches.add(self.host_clock() - start)

        what = ("the stream hold and release around no call, the host busy as long as the call's launches took"
                + (", and the L2 flush" if self.flushes else ""))
        return AsTimed(lambda: self.time(launched), lambda: self.time(lambda: self.host_wait(launches.mean_s)), what)

    def time(self, fn: Callable[[], Any]) -> float:
        with self.device.guard():
            stream = torch.cuda.current_stream(self.index)
            self.generation += 1
            self.hold.hold(stream, self.generation)  # 1. nothing below runs until the release
            self.flush()  # cold L2 where asked, before the start event, as in cuda_events
            start, end = self.start, self.end  # created before timing (fp8bench.measure.timing.timing_events)
            start.record(stream)
            host_start = self.host_clock()
            fn()  # 2. every kernel of the call queues behind the spin kernel
            end.record(stream)
            self.hold.release(self.generation)  # 3. the queue drains back to back
            end.synchronize()
            self.last_host_s = self.host_clock() - host_start
            if self.hold.gave_up():  # 4. the host waited inside fn: the events time a broken hold
                raise HoldTimedOut("the call waits for the GPU while its stream is held (it synchronizes with the "
                                   "host: .item(), float(tensor), .cpu(), a synchronize; or it launches more kernels "
                                   "than the launch queue holds)")
            return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds


@dataclass
class _HostSeconds:
    """Host seconds summed over calls, and their mean (0 before any call)."""

    total_s: float = 0.0
    calls: int = 0

    def add(self, seconds: float) -> None:
        self.total_s += seconds
        self.calls += 1

    @property
    def mean_s(self) -> float:
        return self.total_s / self.calls if self.calls else 0.0


def busy_wait(seconds: float) -> None:
    """Keep the host busy for ``seconds`` (``perf_counter``): a sleep would yield the thread and oversleep."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# Environment variables under which the release (on a second stream) could only run after the spin it should end:
# CUDA C++ Programming Guide, "CUDA Environment Variables". CUDA_DEVICE_MAX_CONNECTIONS of 2 to 7 (or MPS) may map
# the two streams onto one queue too; that is found by overlap_reason's held empty call, not by name.
SERIALIZING_ENVIRONMENT = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "gives each device one hardware queue, which runs every stream's work in the "
                                   "order it was submitted",
    "CUDA_LAUNCH_BLOCKING": "makes every kernel launch wait until its kernel ends",
    # Not a hardware queue, but the same outcome: without PyTorch's caching allocator every allocation of a held call
    # is a cudaMalloc, which synchronizes implicitly (CUDA C++ Programming Guide, "Implicit Synchronization").
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "turns off PyTorch's caching allocator, so every allocation inside a held call "
                                      "is a cudaMalloc, which waits for the held stream",
}


def serializing_reason(environ: Mapping[str, str]) -> str | None:
    """Why ``environ`` keeps two streams from running side by side, or ``None``."""
    for name, effect in SERIALIZING_ENVIRONMENT.items():
        if environ.get(name, "").strip() == "1":
            return f"{name}=1 {effect}: a held stream could not be released before the spin gives up"
    return None


def unavailable_reason(device: Device) -> str | None:
    """Why ``blocked_stream`` cannot time on ``device``, or ``None``."""
    if not device.is_cuda:
        return f"blocked_stream timing holds a CUDA stream; {device} has none"
    return serializing_reason(os.environ) or triton_missing_reason()


def overlap_reason(timer: BlockedStreamTimer) -> str | None:
    """Why a release cannot end ``timer``'s hold here, found by holding an empty call once (``None``: it can).

    A call that launches nothing cannot synchronize, so a spin that still gives up was never reached by its
    release: the two streams do not run side by side (an MPS client, or a driver that gives the process one
    hardware queue) and every held call would wait out the give-up."""
    try:
        timer.time(lambda: None)
    except HoldTimedOut:
        return ("a release on a second stream did not reach the held stream's spin kernel (an empty call was held "
                "and the spin gave up): the device does not run two of this process's streams side by side")
    return None


def stream_hold_for(device: Device) -> StreamHold:
    """The stream hold of ``device`` (the one place a test puts the fake CUDA runtime's in its stead)."""
    return TritonStreamHold(device)


def held_timer(device: Device, blocked_stream: bool, flush_l2: bool,
               replaced_by: Timer | None = None) -> tuple[BlockedStreamTimer | None, str | None]:
    """The ``blocked_stream`` timer of a run on ``device`` when it asks for one and it can apply, else ``None``
    with the note every record of the run carries about the mode used instead (``None`` when none was asked).
    A timer that ``replaced_by`` replaces the device's own (a distributed run's lockstep timer) is kept."""
    if not blocked_stream:
        return None, None
    fallback = "cpu" if not device.is_cuda else "cuda_events"
    why = unavailable_reason(device) or ("a distributed run times in lockstep across its ranks, which holding one "
                                         "rank's stream would break" if replaced_by is not None else None)
    if why:
        return None, f"timed with {fallback}, not blocked_stream: {why}"
    timer = BlockedStreamTimer(device, stream_hold_for(device), flush_l2)
    why = overlap_reason(timer)
    return (None, f"timed with {fallback}, not blocked_stream: {why}") if why else (timer, None)


def gave_up_note(exc: HoldTimedOut) -> str:
    """The note of a case whose held sample gave up after its held trial passed (a call that reads back to the
    host only now and then): its samples are all retaken with ``cuda_events``, one mode per record."""
    return f"timed with cuda_events, not blocked_stream: a held sample gave up ({exc})"


def count_launches(call: Callable[[], Any], device: Device) -> int | None:
    """GPU operations (kernels, copies, sets) one unheld call of ``call`` submits to ``device``, counted by the
    PyTorch profiler's CUDA activity (CUPTI); ``None`` where the profiler cannot count them here, or counted none
    (a session can lose the kernel records at its start: pytorch/pytorch#192021; tritonbench saw CUDA-only sessions
    with no kernel events), so an unknown count never passes for a small one. The one place a test puts the fake
    CUDA runtime's count in its stead.

    Kineto keeps CUPTI attached after a session unless ``TEARDOWN_CUPTI=1`` (its default only from CUDA 12.6 on:
    kineto #1264), and an attached CUPTI slows every later launch (pytorch/pytorch#144455): so the variable is set
    before the first session, unless the user set it."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            call()
            device.synchronize()
    except (RuntimeError, AssertionError):  # a CPU build of torch (it asserts), no CUPTI, a profiler already running
        return None
    counted = sum(1 for event in prof.events() if event.device_type == DeviceType.CUDA)
    return counted or None


def too_many_launches(launches: int | None) -> str | None:
    """Why a call of ``launches`` GPU operations is not held (``None``: it may be)."""
    if launches is None or launches <= MAX_QUEUED_LAUNCHES:
        return None
    return (f"a call submits {launches} GPU operations, more than the {MAX_QUEUED_LAUNCHES} that may safely queue "
            "behind a held stream")


def timer_for_calls(blocked: BlockedStreamTimer, fallback: Timer,
                    calls: Iterable[Callable[[], Any]]) -> tuple[Timer, TimingMode, str | None]:
    """The timer of one case: ``blocked`` when every call in ``calls`` runs held once (each such try is a warm-up
    call, outside any sample), else ``fallback`` (``cuda_events``) and the note that says why.

    Each call first runs once unheld, its GPU operations counted (:func:`count_launches`): a phase the case's
    warm-up did not run makes its first allocations then, not while a stream is held (a ``cudaMalloc``
    synchronizes implicitly, and the spin would wait out its give-up), and a call of more operations than
    :data:`MAX_QUEUED_LAUNCHES` is not held at all."""
    for call in calls:
        with blocked.device.guard():
            why = too_many_launches(count_launches(call, blocked.device))
        if why is None:
            try:
                blocked.time(call)
            except HoldTimedOut as exc:
                why = str(exc)
        if why is not None:
            return fallback, TimingMode.CUDA_EVENTS, f"timed with cuda_events, not blocked_stream: {why}"
    return blocked, TimingMode.BLOCKED_STREAM, None
