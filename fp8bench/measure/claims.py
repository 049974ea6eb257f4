"""Claims that only a GPU can confirm, and the probe that confirms each one in seconds.

fp8bench is built and tested on machines without a GPU. There its CUDA, NVML, Triton, Transformer Engine and
torchao paths run against torch's meta functions on fake CUDA tensors and against fakes that model each vendor's
documented behaviour (``tests/fake_*.py``). A fake that passes proves the code follows the fake; whether the
hardware, the driver and the vendor libraries behave as the fake says is still a *claim*. This module lists every
such claim the code rests on, which figures rest on it (what not to trust until it holds), and a probe that turns
it into a verdict on a real GPU:

* a **probe of its own** (:class:`Claim` with ``probe``): a few seconds of GPU work that measures the claim and
  prints ``held`` or ``failed`` with the figure it measured;
* an **existing selfcheck check** (``check``): the claim holds when that check passes on the device (for example,
  "cuBLASLt accepts every scale layout fp8bench passes" is the ``sqnr`` check: a scale in the wrong layout is
  refused, or reads many dB off);
* **no probe** (``no_probe``): a claim that cannot be checked in seconds on one GPU (it would lose the CUDA
  context, or needs several GPUs or nodes); the reason says why, and the claim stays unverified until then.

``fp8bench selfcheck --check claims`` runs the probes on a GPU; on a CPU it lists what it would run
(``needs a GPU``). docs/gpu-claims.md holds the same table for reading.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch

from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, WORKLOADS
from fp8bench.hardware.clocks import READBACK_SPACING_S

if TYPE_CHECKING:
    from fp8bench.core.cases import Case
    from fp8bench.core.devices import Device
    from fp8bench.core.records import Record
    from fp8bench.energy.nvml import NvmlDevice


class Outcome(str, Enum):
    HELD = "held"
    FAILED = "failed"
    NOT_APPLICABLE = "not applicable"  # the claim does not concern this device or install (the figure says why)


@dataclass(frozen=True)
class ProbeResult:
    outcome: Outcome
    figure: str  # what was measured, against what the claim expects, in words


@dataclass
class ProbeContext:
    """What a probe measures through: the device and the selfcheck's light measurer (one small case each)."""

    device: Device
    measure: Callable[[Case], Record]

    def nvml(self) -> NvmlDevice:
        """This GPU's NVML handle, opened by UUID as the energy meter opens it; close it after use."""
        from fp8bench.energy import meters, nvml

        return nvml.open_device(self.device.index or 0, meters.cuda_uuid(self.device))


@dataclass(frozen=True)
class Claim:
    name: str
    statement: str  # what the code assumes of the hardware, driver or library
    rests_on_it: str  # figures not to trust until the claim holds on this device
    relied_on_in: str  # where the code makes the assumption
    probe: Callable[[ProbeContext], ProbeResult] | None = None  # a probe of its own
    check: str | None = None  # or: the selfcheck check whose pass confirms it
    no_probe: str | None = None  # or: why nothing checks it in seconds on one GPU

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.probe, self.check, self.no_probe)) != 1:
            raise ValueError(f"claim {self.name}: exactly one of probe, check and no_probe")

    @property
    def how(self) -> str:
        if self.check:
            return f"the `{self.check}` check"
        if self.no_probe:
            return f"no probe: {self.no_probe}"
        return f"probe `{self.name}`: {(self.probe.__doc__ or '').strip().splitlines()[0]}"


# --- helpers the probes share ------------------------------------------------------------------------------------

def _pipeline(ctx: ProbeContext, workload: str, shape_text: str | None, precision: str,
              backend: str = "torch") -> Pipeline:
    from fp8bench.core.precisions import PRECISIONS

    w = WORKLOADS.get(workload)
    shape = w.parse_shape(shape_text or w.default_shape)
    inputs = w.make_inputs(shape, ctx.device, seed=0)
    return BACKENDS.get(backend).build(BuildContext(workload, shape, PRECISIONS.get(precision), ctx.device, inputs))


def _gemm_case(shape: tuple[int, int, int], precision: str, backend: str, fast_accum: bool | None = None) -> Case:
    from fp8bench.core.cases import Case
    from fp8bench.core.precisions import RunOptions, resolve_precision

    m, n, k = shape
    return Case("gemm", {"m": m, "n": n, "k": k}, resolve_precision(precision, RunOptions(fast_accum=fast_accum)),
                backend)


def _busy(ctx: ProbeContext, seconds: float) -> Any:
    """The GPU loaded for about ``seconds`` (:func:`fp8bench.hardware.clocks.busy`): a
    :class:`~fp8bench.hardware.clocks.Load`, whose call waits and whose ``running()`` says whether it still runs."""
    from fp8bench.hardware.clocks import busy

    return busy(ctx.device, seconds)


# --- the probes ----------------------------------------------------------------------------------------------------

# Workloads whose timed calls the no-sync probe runs: (workload, shape or None for its default, precision).
SYNC_FREE_CALLS = (("gemm", "1024x1024x1024", "bf16"), ("gemm", "1024x1024x1024", "fp8_tensorwise"),
                   ("gemm", "1024x1024x1024", "fp8_rowwise"), ("attention", None, "bf16"),
                   ("transformer_step", None, "bf16"))


def no_host_sync(ctx: ProbeContext) -> ProbeResult:
    """every timed call of the torch backend runs under torch's sync debug mode "error" without raising (it catches
    .item(), copies to the host and stream synchronizes; not device synchronizes or allocations)"""
    offenders = []
    for workload, shape, precision in SYNC_FREE_CALLS:
        pipeline = _pipeline(ctx, workload, shape, precision)
        calls = {"end_to_end": pipeline.end_to_end, **pipeline.phases}
        for fn in calls.values():  # warm up: allocator, handles, autotuning may synchronize once
            fn()
        ctx.device.synchronize()
        # torch raises on any call that synchronizes the host with the device (.item(), a copy to the host,
        # cudaStreamSynchronize) while the mode is "error" (torch.cuda.set_sync_debug_mode).
        for name, fn in calls.items():
            torch.cuda.set_sync_debug_mode("error")
            try:
                fn()
            except RuntimeError as exc:
                offenders.append(f"{workload}/{precision} {name}: {str(exc).splitlines()[0][:120]}")
            finally:
                torch.cuda.set_sync_debug_mode("default")
        ctx.device.synchronize()
    checked = len(SYNC_FREE_CALLS)
    if offenders:
        return ProbeResult(Outcome.FAILED, f"{len(offenders)} timed call(s) synchronize: " + "; ".join(offenders))
    return ProbeResult(Outcome.HELD, f"{checked} pipelines' end-to-end and phase calls ran with no host sync")


BITWISE_CALLS = (("gemm", "1024x1024x1024", "bf16"), ("gemm", "1024x1024x1024", "fp8_tensorwise"),
                 ("attention", None, "bf16"), ("grouped_gemm", None, "bf16"))


def bitwise_outputs(ctx: ProbeContext) -> ProbeResult:
    """each pipeline declared bitwise returns the same bits on two calls with the same inputs"""
    differing, compared = [], 0
    for workload, shape, precision in BITWISE_CALLS:
        pipeline = _pipeline(ctx, workload, shape, precision)
        if not pipeline.returns.bitwise:
            continue
        as_output = pipeline.returns.as_output or (lambda value: value)
        # Copies: a kernel may write every call's result into one buffer it returns each time.
        first = as_output(pipeline.end_to_end()).detach().clone()
        second = as_output(pipeline.end_to_end()).detach().clone()
        ctx.device.synchronize()
        compared += 1
        if not torch.equal(first, second):
            share = (first != second).float().mean().item()
            differing.append(f"{workload}/{precision}: {share:.2%} of elements differ")
    if differing:
        return ProbeResult(Outcome.FAILED, "declared bitwise but not: " + "; ".join(differing) + " (the output check "
                           "would mark these cases invalid)")
    return ProbeResult(Outcome.HELD, f"{compared} pipeline(s) declared bitwise returned identical bits twice")


def graph_capture(ctx: ProbeContext) -> ProbeResult:
    """an FP8 GEMM (quantize and scaled GEMM) and a BF16 attention block capture in a CUDA graph and replay"""
    from fp8bench.measure.cuda_graphs import CaptureRefused, GraphCapturer

    capturer = GraphCapturer(ctx.device)
    figures, refused = [], []
    try:
        # Not the training step: its fused AdamW is not built capturable and its scheduler writes a Python float, so
        # --cuda-graph refuses it by design (torch/optim/optimizer.py, _accelerator_graph_capture_health_check).
        for workload, shape, precision in (("gemm", "1024x1024x1024", "fp8_tensorwise"),
                                           ("attention", None, "bf16")):
            pipeline = _pipeline(ctx, workload, shape, precision)
            try:
                call = capturer.capture(f"{workload}/{precision}", pipeline.end_to_end)
                figures.append(f"{workload}/{precision} captured in {call.capture_s * 1e3:.0f} ms")
            except CaptureRefused as exc:
                refused.append(str(exc))
    finally:
        capturer.release()
    if refused:
        return ProbeResult(Outcome.FAILED, "; ".join(refused))
    return ProbeResult(Outcome.HELD, "; ".join(figures))


def stream_overlap(ctx: ProbeContext) -> ProbeResult:
    """work on a second stream finishes while a first stream is still busy (the blocked-stream mode needs it)"""
    index = ctx.device.cuda_index
    with ctx.device.guard():
        busy, other = torch.cuda.Stream(device=index), torch.cuda.Stream(device=index)
        done_busy, done_other = torch.cuda.Event(), torch.cuda.Event()
        x = torch.zeros(1, device=ctx.device.torch)
        ctx.device.synchronize()
        with torch.cuda.stream(busy):
            torch.cuda._sleep(2_000_000_000)  # about a second of spinning at ~2 GHz
            done_busy.record()
        with torch.cuda.stream(other):
            x.add_(1)
            done_other.record()
        deadline = time.perf_counter() + 0.5
        while not done_other.query() and time.perf_counter() < deadline:
            time.sleep(0.001)
        overlapped, still_busy = done_other.query(), not done_busy.query()
        ctx.device.synchronize()
    if overlapped and still_busy:
        return ProbeResult(Outcome.HELD, "the second stream's kernel finished while the first stream spun")
    if not still_busy:
        return ProbeResult(Outcome.NOT_APPLICABLE, "the spin ended within 0.5 s (a fast clock): inconclusive")
    return ProbeResult(Outcome.FAILED, "the second stream waited for the first (streams serialize here: "
                       "CUDA_DEVICE_MAX_CONNECTIONS=1, MPS or CUDA_LAUNCH_BLOCKING=1?)")


# Host time of launches after a profiler session may exceed the time before it by this much (noise), no more.
LINGER_TOLERANCE = 0.2


def _host_launch_s(x: torch.Tensor) -> float:
    """Median host seconds to launch 200 small kernels (the launch path CUPTI would slow), of five tries."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            x.add_(1)
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times)


def launch_count(ctx: ProbeContext) -> ProbeResult:
    """the profiler counts exactly the N kernels a call of N elementwise additions launches (N = 5 and 40), and
    leaves no slower launch path behind"""
    from fp8bench.measure.blocking import count_launches

    x = torch.zeros(1024, device=ctx.device.torch)
    counted = {}
    for n in (5, 40):
        def call(n: int = n) -> None:
            for _ in range(n):
                x.add_(1)
        call()  # warm: the first launch may load the kernel
        counted[n] = count_launches(call, ctx.device)
    ok = all(counted[n] == n for n in counted)
    text = ", ".join(f"{n} launched, {counted[n]} counted" for n in counted)
    if not ok:
        return ProbeResult(Outcome.FAILED, text + " (the cap on launches queued behind a hold is judged by it)")
    # An attached CUPTI left behind by a profiler session slows every later launch (pytorch/pytorch#144455).
    before = _host_launch_s(x)
    count_launches(lambda: x.add_(1), ctx.device)
    after = _host_launch_s(x)
    slower = after / before - 1
    outcome = Outcome.HELD if slower <= LINGER_TOLERANCE else Outcome.FAILED
    return ProbeResult(outcome, f"{text}; host time of 200 launches {before * 1e3:.2f} ms before a count, "
                       f"{after * 1e3:.2f} ms after ({slower:+.0%}; limit +{LINGER_TOLERANCE:.0%})")


# Cases the blocked-stream probe measures as the runner does: a one-kernel GEMM, and an FP8 GEMM whose quantize
# phase launches several kernels.
HELD_CASES = (("gemm", (2048, 2048, 2048), "bf16"), ("gemm", (2048, 2048, 2048), "fp8_tensorwise"))


def blocked_stream_holds(ctx: ProbeContext) -> ProbeResult:
    """cases measured with --blocked-stream are timed held (no refusal, give-up or fallback to events)"""
    from fp8bench.measure.runner import CaseMeasurer
    from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
    from fp8bench.measure.timing import SamplingPolicy

    timing = TimingSettings(budget_s=60, policy=SamplingPolicy(min_samples=10, max_time_s=1.0), blocked_stream=True)
    settings = RunSettings(device=str(ctx.device), timing=timing, energy=EnergySettings(enabled=False))
    measurer = CaseMeasurer(settings, ctx.device)
    rows, held = [], True
    for workload, shape, precision in HELD_CASES:
        record = measurer.measure(_gemm_case(shape, precision, "torch"))
        fallback = [n for n in record.notes if n.startswith("timed with cuda_events")]
        held &= record.status == "ok" and record.timing_mode == "blocked_stream" and not fallback
        rows.append(f"{workload}/{precision}: {record.status}, {record.timing_mode}" +
                    (f" ({fallback[0][:120]})" if fallback else ""))
    return ProbeResult(Outcome.HELD if held else Outcome.FAILED, "; ".join(rows))


# The spin kernel's give-up (fp8bench.measure.blocking, SPIN_GIVE_UP_S) is a poll count, from the seconds one poll
# took when the hold was made, on a GPU that is probably idle then. A loaded GPU runs at higher clocks, where a poll
# may be faster and the same count a shorter give-up (up to about max/idle SM clock shorter, were a poll's time all
# SM clock: ~6x on an H100). It must stay far longer than a host needs to queue one held call of at most
# MAX_QUEUED_LAUNCHES kernels (milliseconds): 100 ms keeps a margin of over 10x even for a slow Python host.
GIVE_UP_FLOOR_S = 0.1


def spin_give_up_loaded(ctx: ProbeContext) -> ProbeResult:
    """the spin kernel's calibrated give-up, timed right after a GEMM load has raised the clocks, still lasts 100 ms"""
    from fp8bench.measure.blocking import SPIN_GIVE_UP_S, TritonStreamHold, triton_missing_reason

    missing = triton_missing_reason()
    if missing:
        return ProbeResult(Outcome.NOT_APPLICABLE, missing)
    with ctx.device.guard():
        hold = TritonStreamHold(ctx.device)  # calibrates its poll count now, as a run's timer does
        _busy(ctx, 1.0)()
        loaded_s = hold._timed_spin(hold.max_checks)  # the whole give-up, nothing releasing it
    outcome = Outcome.HELD if loaded_s >= GIVE_UP_FLOOR_S else Outcome.FAILED
    return ProbeResult(outcome, f"{hold.max_checks} polls ({hold.poll_s * 1e9:.0f} ns each when calibrated, for a "
                       f"{SPIN_GIVE_UP_S:g} s give-up) lasted {loaded_s:.3f} s after the load (floor "
                       f"{GIVE_UP_FLOOR_S:g} s)")


# The telemetry sampler polls every 50 ms (fp8bench.energy.telemetry); a poll must cost a small share of that.
POLL_BUDGET_S = 0.005


def nvml_poll_cost(ctx: ProbeContext) -> ProbeResult:
    """one telemetry poll (clocks, temperature, power, throttle reasons) costs under 5 ms"""
    with ctx.nvml() as dev:
        dev.sample()
        costs = []
        for _ in range(50):
            start = time.perf_counter()
            dev.sample()
            costs.append(time.perf_counter() - start)
    median = statistics.median(costs)
    outcome = Outcome.HELD if median < POLL_BUDGET_S else Outcome.FAILED
    return ProbeResult(outcome, f"median poll {median * 1e3:.2f} ms, worst {max(costs) * 1e3:.2f} ms "
                       f"(limit {POLL_BUDGET_S * 1e3:.0f} ms; the sampler polls every 50 ms)")


# Energy windows are sized from a counter update period of about 100 ms (fp8bench.energy.windows); a period outside
# this band makes their length and error bound wrong.
COUNTER_PERIOD_BAND_S = (0.001, 0.2)


def counter_period(ctx: ProbeContext) -> ProbeResult:
    """NVML's total-energy counter advances at least every 200 ms under load (the window sizing assumes ~100 ms)"""
    a = torch.randn(4096, 4096, device=ctx.device.torch, dtype=torch.bfloat16)
    changes: list[float] = []
    with ctx.nvml() as dev:
        last = dev.energy_mj()
        end = time.perf_counter() + 1.5
        while time.perf_counter() < end:
            for _ in range(4):  # keep a few GEMMs queued so the GPU stays busy while the host polls
                a @ a
            now = dev.energy_mj()
            if now != last:
                changes.append(time.perf_counter())
                last = now
    ctx.device.synchronize()
    if len(changes) < 3:
        return ProbeResult(Outcome.FAILED, f"the counter changed {len(changes)} time(s) in 1.5 s of load")
    period = statistics.median(later - earlier for earlier, later in itertools.pairwise(changes))
    low, high = COUNTER_PERIOD_BAND_S
    outcome = Outcome.HELD if low <= period <= high else Outcome.FAILED
    return ProbeResult(outcome, f"median update period {period * 1e3:.0f} ms over {len(changes)} changes "
                       f"(band {low * 1e3:.0f}..{high * 1e3:.0f} ms)")


# The energy-window probes' call: one elementwise pass over a tensor of 3/4 of the L2 (warm calls find its data in
# the L2; after a flush it comes from device memory). Each window is sized for a 5 % quantization bound (about 2 s
# at a 100 ms counter period, fp8bench.energy.windows). The warm window runs a sleep kernel (no memory traffic) where
# the cold one runs the flush, so both keep the GPU busy between calls and differ only in what the L2 holds: about
# 50 us of sleep at 2 GHz, a flush of twice a 50 MB L2 at 3 TB/s. The cold/warm difference is one read of 3/4 of the
# L2 from device memory, whatever the call does besides (a longer call only adds energy both sides share, and with
# it the margin), while the wrapping is as long as the call: so the cold probe sizes its windows for a 1 % bound
# instead. At 1 % every window reaches the 10 s cap at a 100 ms period (about 40 s in all), and the bound on the
# difference of two windows a and b is about 1 % x (a + b) / (a - b), 3-7 % for these calls, not 1 %.
ENERGY_PROBE_L2_SHARE = 0.75
ENERGY_PROBE_ERROR = 0.05
COLD_PROBE_ERROR = 0.01
# A subtracted window must see the counter move at this many of its chunk edges (a window within one step reads no
# energy, one of a few steps a bound far over its target; fp8bench.energy.meters, "What a window runs"). The probe
# tests the observed changes, not the window's length in periods: windows are sized to period / target and at least
# 1 s, so a length in periods holds by construction.
MIN_SUBTRACTED_CHANGES = 2
ENERGY_PROBE_SLEEP_CYCLES = 100_000
# Held and eager cold joules per call may differ by this share beyond their bounds: the held loop waits for every
# sample, so clocks and power between its calls differ a little from the eager loop's.
HELD_ENERGY_TOLERANCE = 0.10


def _energy_probe(ctx: ProbeContext, run: Callable[[Any, Callable[[], None]], ProbeResult],
                  target: float = ENERGY_PROBE_ERROR) -> ProbeResult:
    """``run(meter, call)`` with this GPU's counter meter, windows sized for ``target`` (a fraction), and the
    probes' call; not applicable where nothing meters with a counter here."""
    from fp8bench.energy.meters import WindowMeter, WindowPolicy, meter_for

    meter = meter_for(ctx.device)
    if not isinstance(meter, WindowMeter) or meter.counter is None:
        return ProbeResult(Outcome.NOT_APPLICABLE, "no energy counter meters this GPU: "
                           f"{getattr(meter, 'reason', None) or meter.method}")
    try:
        meter.policy = WindowPolicy(error_target=target)
        with ctx.device.guard():
            l2 = int(torch.cuda.get_device_properties(ctx.device.cuda_index).L2_cache_size)
            x = torch.zeros(int(l2 * ENERGY_PROBE_L2_SHARE) // 4, device=ctx.device.torch)

            def call() -> None:
                x.add_(1.0)

            return run(meter, call)
    finally:
        meter.close()


def _subtracted_periods(reading: Any) -> float:
    """How many counter update periods a reading's subtracted window lasted (0 where either is unknown)."""
    if not reading.subtracted_s or not reading.counter_update_s:
        return 0.0
    return float(reading.subtracted_s / reading.counter_update_s)


def _per_call(reading: Any) -> str:
    bound = f"{reading.error_bound:.1%}" if reading.error_bound is not None else "unbounded"
    return (f"{reading.joules_per_iter * 1e3:.3g} mJ/call (bound {bound}; {reading.subtracted_j:.3g} J in "
            f"{reading.subtracted_s:.3g} s subtracted: {_subtracted_periods(reading):.0f} counter periods, the "
            f"counter seen to move at {reading.subtracted_counter_changes} of its chunk edges)")


def _margin_j(*readings: Any) -> float:
    """The joules per call two readings may differ by within their quantization bounds."""
    return sum((r.error_bound or 0.0) * r.joules_per_iter for r in readings)


def cold_l2_energy(ctx: ProbeContext) -> ProbeResult:
    """a cold-L2 energy window (flush then call, less the flush alone) leaves positive joules per call, above the
    same call's warm ones (sleep then call, less the sleep alone) by more than the windows' bounds"""
    from fp8bench.energy.meters import AsTimed
    from fp8bench.measure.timing import CudaTimer

    def run(meter: Any, call: Callable[[], None]) -> ProbeResult:
        def sleep() -> None:
            torch.cuda._sleep(ENERGY_PROBE_SLEEP_CYCLES)

        def sleep_then_call() -> None:
            sleep()
            call()

        cold_calls = CudaTimer(ctx.device).as_timed(call)
        assert cold_calls is not None  # the timer flushes
        cold = meter.measure_as_timed(cold_calls, ctx.device, name="cold_l2")
        warm = meter.measure_as_timed(AsTimed(sleep_then_call, sleep, "a sleep kernel alone"), ctx.device,
                                      name="warm_l2")
        return cold_versus_warm(cold, warm)

    return _energy_probe(ctx, run, COLD_PROBE_ERROR)


def cold_versus_warm(cold: Any, warm: Any) -> ProbeResult:
    """The verdict of :func:`cold_l2_energy` on two subtracted readings: failed where either left no joules, held
    where the cold call cost more than the warm one beyond both bounds, failed where less, and not applicable
    (inconclusive) where the two lie within their bounds or a subtracted window saw the counter change fewer than
    :data:`MIN_SUBTRACTED_CHANGES` times."""
    if cold.joules_per_iter is None or warm.joules_per_iter is None:
        return ProbeResult(Outcome.FAILED, f"no joules per call left: cold: {cold.reason}; warm: {warm.reason}")
    figure = f"cold {_per_call(cold)}, warm {_per_call(warm)}"
    still = [r.name for r in (cold, warm) if (r.subtracted_counter_changes or 0) < MIN_SUBTRACTED_CHANGES]
    if still:
        return ProbeResult(Outcome.NOT_APPLICABLE, figure + f": inconclusive, the subtracted window of {still[0]} "
                           f"saw the counter change fewer than {MIN_SUBTRACTED_CHANGES} times")
    if cold.joules_per_iter > warm.joules_per_iter + _margin_j(cold, warm):
        return ProbeResult(Outcome.HELD, figure)
    if cold.joules_per_iter < warm.joules_per_iter - _margin_j(cold, warm):
        return ProbeResult(Outcome.FAILED, figure + ": a cold call cost less than a warm one")
    return ProbeResult(Outcome.NOT_APPLICABLE, figure + ": inconclusive within the windows' bounds")


# A GEMM that dominates the flush before it, as the case the subtracted window was wrong for: about 1.6 ms of BF16
# at 700 TFLOP/s behind a flush of ~35 us.
DOMINANT_GEMM = 8192


def subtracted_window_steps(ctx: ProbeContext) -> ProbeResult:
    """a cold-L2 window of a ~2 ms GEMM leaves joules per call within the 5% target, its subtracted flush-alone window
    seeing the counter change at 2 or more of its chunk edges"""
    from fp8bench.measure.timing import CudaTimer

    a = torch.randn(DOMINANT_GEMM, DOMINANT_GEMM, device=ctx.device.torch, dtype=torch.bfloat16)

    def run(meter: Any, call: Callable[[], None]) -> ProbeResult:
        wrapped = CudaTimer(ctx.device).as_timed(lambda: a @ a)
        assert wrapped is not None  # the timer flushes
        return subtracted_verdict(meter.measure_as_timed(wrapped, ctx.device, name="dominant_gemm"),
                                  ENERGY_PROBE_ERROR)

    return _energy_probe(ctx, run)


def subtracted_verdict(reading: Any, target: float) -> ProbeResult:
    """Held where ``reading`` (a subtracted window) has joules per call within ``target`` and its subtracted window
    saw the counter change :data:`MIN_SUBTRACTED_CHANGES` times or more; failed otherwise."""
    if reading.joules_per_iter is None:
        return ProbeResult(Outcome.FAILED, f"no joules per call: {reading.reason}")
    bound = reading.error_bound
    changes = reading.subtracted_counter_changes or 0
    ok = changes >= MIN_SUBTRACTED_CHANGES and bound is not None and bound <= target
    return ProbeResult(Outcome.HELD if ok else Outcome.FAILED, f"{_per_call(reading)}; target {target:.0%}")


def held_energy(ctx: ProbeContext) -> ProbeResult:
    """a held energy window (each call in a held sample, less held samples with no call and the host busy as long
    as the launches) gives the same joules per call as the eager cold-L2 window, within their bounds and 10%"""
    from fp8bench.measure.blocking import (
        BlockedStreamTimer,
        overlap_reason,
        stream_hold_for,
        unavailable_reason,
    )
    from fp8bench.measure.timing import CudaTimer

    why = unavailable_reason(ctx.device)
    if why:
        return ProbeResult(Outcome.NOT_APPLICABLE, why)

    def run(meter: Any, call: Callable[[], None]) -> ProbeResult:
        held_timer = BlockedStreamTimer(ctx.device, stream_hold_for(ctx.device))
        refused = overlap_reason(held_timer)
        if refused:
            return ProbeResult(Outcome.NOT_APPLICABLE, refused)
        cold_calls = CudaTimer(ctx.device).as_timed(call)
        assert cold_calls is not None  # the timer flushes
        eager = meter.measure_as_timed(cold_calls, ctx.device, name="cold_l2")
        held = meter.measure_as_timed(held_timer.as_timed(call), ctx.device, name="held")
        if eager.joules_per_iter is None or held.joules_per_iter is None:
            return ProbeResult(Outcome.FAILED, f"no joules per call left: eager: {eager.reason}; held: {held.reason}")
        off = abs(held.joules_per_iter - eager.joules_per_iter)
        allowed = _margin_j(eager, held) + HELD_ENERGY_TOLERANCE * eager.joules_per_iter
        outcome = Outcome.HELD if off <= allowed else Outcome.FAILED
        return ProbeResult(outcome, f"held {_per_call(held)}, eager {_per_call(eager)}; off by "
                           f"{off * 1e3:.3g} mJ (allowed {allowed * 1e3:.3g} mJ)")

    return _energy_probe(ctx, run)


def loaded_clocks(ctx: ProbeContext) -> ProbeResult:
    """under a GEMM load NVML reports an SM clock above 0 and at most 5% over the reference clock it is judged by"""
    with ctx.nvml() as dev:
        reference, source = dev.reference_sm_clock_mhz()
        wait = _busy(ctx, 1.0)
        samples = [dev.sample() for _ in range(10)]
        wait()
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz]
    if not clocks or not reference:
        return ProbeResult(Outcome.FAILED, f"no SM clock ({clocks}) or no reference ({reference}, {source})")
    top = max(clocks)
    outcome = Outcome.HELD if 0 < top <= 1.05 * reference else Outcome.FAILED
    return ProbeResult(outcome, f"loaded SM clock {min(clocks)}..{top} MHz, reference {reference} MHz ({source})")


def instant_power(ctx: ProbeContext) -> ProbeResult:
    """NVML answers the instantaneous power field (NVML_FI_DEV_POWER_INSTANT) under load, so samples hold it, not the
    one-second average"""
    from fp8bench.energy.nvml import FieldReadFailed
    from fp8bench.energy.telemetry import PowerSource

    with ctx.nvml() as dev:
        wait = _busy(ctx, 1.0)
        try:
            watts, source = dev.instant_power()
            average = dev.power_w()
        except FieldReadFailed as exc:  # an error code in the field's entry other than "not supported"
            return ProbeResult(Outcome.FAILED, f"the instant power field failed under load: {exc}")
        finally:
            wait()
    if source is not PowerSource.INSTANT:
        return ProbeResult(Outcome.FAILED, f"the driver has no instant power field: samples hold the 1 s average "
                           f"({average:.0f} W)")
    outcome = Outcome.HELD if 0 < watts < 5 * max(average, 1.0) else Outcome.FAILED
    return ProbeResult(outcome, f"instant {watts:.0f} W beside the 1 s average {average:.0f} W under load")


def clock_lock_readback(ctx: ProbeContext) -> ProbeResult:
    """a base-clock lock reads back, under load, a clock that the GPU then holds under load (within 5%), and resets"""
    return _lock_readback(ctx, "base")


def clock_lock_readback_max(ctx: ProbeContext) -> ProbeResult:
    """a max-clock lock's reference (its target) is the clock the GPU holds under load (within 5%), and resets"""
    return _lock_readback(ctx, "max")


def _lock_readback(ctx: ProbeContext, policy: str) -> ProbeResult:
    """Lock under ``policy``, then compare the lock's reference clock with the SM clock read under load. A max lock
    that reports failed on a board held under its target by its power cap is a real result: that target is then not
    a clock the GPU holds, and the throttle reference is wrong there."""
    from fp8bench.hardware.clocks import ClockLockRefused, lock_clocks

    try:
        lock = lock_clocks(ctx.device, policy)
    except ClockLockRefused as exc:
        return ProbeResult(Outcome.NOT_APPLICABLE, str(exc))
    assert lock is not None
    try:
        with ctx.nvml() as dev:
            load = _busy(ctx, 1.0)
            loaded = lock_readings(dev, load, 5)
            load()
    finally:
        lock.reset()
    reference, source = lock.clock_mhz, lock.setting.get("reference_source")
    if not loaded:  # the probe failed to load the GPU, or NVML gave no clock: the lock is not under test
        return ProbeResult(Outcome.NOT_APPLICABLE, "no SM clock was read while the load ran (it drained first, or "
                           "NVML gave no clock)")
    if not reference:
        return ProbeResult(Outcome.FAILED, f"no reference clock ({source}); loaded clocks {loaded}")
    worst = max(abs(c - reference) / reference for c in loaded)
    return ProbeResult(Outcome.HELD if worst <= 0.05 else Outcome.FAILED,
                       f"reference {reference} MHz ({source}); {min(loaded)}..{max(loaded)} MHz under load later "
                       f"({worst:.1%} apart at most; limit 5%)")


def lock_readings(dev: Any, load: Any, reads: int) -> list[int]:
    """Up to ``reads`` SM clock readings (MHz) of ``dev``, at least :data:`READBACK_SPACING_S` apart, kept only while
    ``load.running()``: once the load drains, the readings are an idle GPU's and the lock's clock is not under test."""
    clocks: list[int] = []
    for _ in range(reads):
        load.keep_busy(READBACK_SPACING_S)
        time.sleep(READBACK_SPACING_S)
        clock = dev.sample().sm_clock_mhz
        if not load.running():
            break
        if clock:
            clocks.append(clock)
    return clocks


_NVML_REFCOUNT = """
import pynvml as nv
nv.nvmlInit(); nv.nvmlInit(); nv.nvmlShutdown()
nv.nvmlDeviceGetCount()  # one session still open
nv.nvmlShutdown()
try:
    nv.nvmlDeviceGetCount()
    print("answered")
except nv.NVMLError_Uninitialized:
    print("uninitialized")
"""


# The refresh the clock readings are spaced for: the claim is that readings READBACK_SPACING_S apart
# (fp8bench.hardware.clocks) are fresh, so the median gap between changes must be at most that spacing.
CLOCK_REFRESH_S = READBACK_SPACING_S


def clock_refresh(ctx: ProbeContext) -> ProbeResult:
    """under load, NVML's SM clock reading refreshes at least every 50 ms: held when the median gap between its
    changes over 1.5 s (readings taken while the load runs) is at most 50 ms, else inconclusive (a clock may move
    less often than its reading refreshes)"""
    with ctx.nvml() as dev:
        load = _busy(ctx, 2.0)
        changes = clock_changes(dev, load, 1.5)
        load()
    return refresh_verdict(changes, CLOCK_REFRESH_S)


def clock_changes(dev: Any, load: Any, seconds: float) -> list[float]:
    """The perf_counter times, over ``seconds``, at which ``dev``'s SM clock reading changed, counting only readings
    taken while ``load.running()``: once the load drains, the readings are an idle GPU's."""
    changes: list[float] = []
    last = dev.sample().sm_clock_mhz  # the first reading is the start, not a change
    end = time.perf_counter() + seconds
    topped = time.perf_counter()
    while time.perf_counter() < end:
        if time.perf_counter() - topped >= READBACK_SPACING_S:
            load.keep_busy(READBACK_SPACING_S)  # the queue may hold less than the load asked for
            topped = time.perf_counter()
        clock = dev.sample().sm_clock_mhz
        if not load.running():
            break
        if clock is not None and clock != last:
            changes.append(time.perf_counter())
            last = clock
    return changes


def refresh_verdict(changes: list[float], limit_s: float) -> ProbeResult:
    """Held where the median gap between reading changes (perf_counter seconds) is at most ``limit_s``: the reading
    then refreshes at least that often. A longer gap is inconclusive, not failed: the gap is the longer of the
    refresh period and the time between real clock moves, so a clock that moves every 200 ms read through a 20 ms
    refresh shows 200 ms. A clock that changed fewer than 4 times is inconclusive too."""
    if len(changes) < 4:
        return ProbeResult(Outcome.NOT_APPLICABLE, f"the SM clock changed {len(changes)} time(s) under load: too "
                           "steady to see how often its reading refreshes")
    gap = statistics.median(b - a for a, b in itertools.pairwise(changes))
    figure = f"median {gap * 1e3:.0f} ms between {len(changes)} changes (limit {limit_s * 1e3:.0f} ms)"
    if gap <= limit_s:
        return ProbeResult(Outcome.HELD, figure)
    return ProbeResult(Outcome.NOT_APPLICABLE, figure + ": the clock may move less often than its reading refreshes")


def nvml_refcount(ctx: ProbeContext) -> ProbeResult:
    """NVML counts its sessions: a query after the last nvmlShutdown raises Uninitialized, one before it answers"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NVML_REFCOUNT], capture_output=True, text=True, timeout=60)
    said = done.stdout.strip()
    if done.returncode != 0:
        return ProbeResult(Outcome.FAILED, f"a query inside the open session failed: {done.stderr.strip()[-200:]}")
    return ProbeResult(Outcome.HELD if said == "uninitialized" else Outcome.FAILED,
                       "after two inits and two shutdowns a query "
                       + ("raised Uninitialized" if said == "uninitialized" else "still answered"))


# At large K the FP32 accumulator decides the error: Triton's full accumulation must read as torch's does.
ACCUMULATION_SHAPE = (256, 256, 16384)
ACCUMULATION_TOLERANCE_DB = 1.0


def triton_full_accumulation(ctx: ProbeContext) -> ProbeResult:
    """at K=16384 Triton's FP8 GEMM with full accumulation is within 1 dB of torch's full-accumulation SQNR"""
    if BACKENDS.get("triton").availability(ctx.device):
        return ProbeResult(Outcome.NOT_APPLICABLE, "the triton backend is unavailable here")
    sqnr: dict[str, float] = {}
    for backend in ("torch", "triton"):
        record = ctx.measure(_gemm_case(ACCUMULATION_SHAPE, "fp8_tensorwise", backend, fast_accum=False))
        value = record.numerics.sqnr_db
        if record.status != "ok" or value is None:
            return ProbeResult(Outcome.FAILED, f"{backend}: {record.status}: {record.reason or 'no SQNR'}")
        sqnr[backend] = value
    off = sqnr["triton"] - sqnr["torch"]
    outcome = Outcome.HELD if off >= -ACCUMULATION_TOLERANCE_DB else Outcome.FAILED
    return ProbeResult(outcome, f"triton {sqnr['triton']:.2f} dB vs torch {sqnr['torch']:.2f} dB ({off:+.2f} dB; "
                       f"limit -{ACCUMULATION_TOLERANCE_DB:g} dB)")


def unpadded_block_scales(ctx: ProbeContext) -> ProbeResult:
    """torch 2.9's _scaled_mm takes 1x128/128x128 block scales of a shape that is no multiple of 128"""
    if torch.__version__.split("+")[0].rsplit(".", 1)[0] != "2.9":
        return ProbeResult(Outcome.NOT_APPLICABLE, f"torch {torch.__version__} takes block scales through "
                           "another entry point")
    shape = (200, 256, 384)
    torch_record = ctx.measure(_gemm_case(shape, "fp8_blockwise", "torch"))
    emulated = ctx.measure(_gemm_case(shape, "fp8_blockwise", "emulated"))
    if torch_record.status != "ok":
        return ProbeResult(Outcome.FAILED, f"{torch_record.status}: {torch_record.reason}")
    t, e = torch_record.numerics.sqnr_db, emulated.numerics.sqnr_db
    outcome = Outcome.HELD if t is not None and e is not None and abs(t - e) <= 2.0 else Outcome.FAILED
    return ProbeResult(outcome, f"200x256x384 blockwise: torch {t} dB, emulated {e} dB (limit 2 dB apart)")


def memory_estimate(ctx: ProbeContext) -> ProbeResult:
    """a GEMM case allocates no more device memory than the workload's estimate that admits it"""
    from fp8bench.workloads.gemm import GEMM

    report = []
    for precision in ("bf16", "fp8_tensorwise"):
        case = _gemm_case((4096, 4096, 4096), precision, "torch")
        estimate = GEMM.memory_bytes(case.shape, ctx.device)
        torch.cuda.reset_peak_memory_stats(ctx.device.torch)
        before = torch.cuda.memory_allocated(ctx.device.torch)
        ctx.measure(case)
        peak = torch.cuda.max_memory_allocated(ctx.device.torch) - before
        report.append((precision, peak, estimate))
    text = "; ".join(f"{p}: peak {peak / 2**20:.0f} MiB, estimate {est / 2**20:.0f} MiB" for p, peak, est in report)
    outcome = Outcome.HELD if all(peak <= est for _, peak, est in report) else Outcome.FAILED
    return ProbeResult(outcome, text)


def te_recipes(ctx: ProbeContext) -> ProbeResult:
    """Transformer Engine's GEMM of each FP8 recipe it runs is within 2 dB of the emulated reference's SQNR"""
    if BACKENDS.get("te").availability(ctx.device):
        return ProbeResult(Outcome.NOT_APPLICABLE, "Transformer Engine is unavailable here")
    rows, failed = [], False
    for precision in ("fp8_tensorwise", "fp8_delayed", "fp8_blockwise", "mxfp8", "nvfp4"):
        te = ctx.measure(_gemm_case((512, 512, 512), precision, "te"))
        if te.status == "skipped":
            rows.append(f"{precision}: refused ({te.reason})")
            continue
        ref = ctx.measure(_gemm_case((512, 512, 512), precision, "emulated"))
        t, e = te.numerics.sqnr_db, ref.numerics.sqnr_db
        ok = te.status == "ok" and t is not None and e is not None and abs(t - e) <= 2.0
        failed |= not ok
        rows.append(f"{precision}: te {t} dB vs emulated {e} dB" + ("" if ok else f" ({te.status})"))
    return ProbeResult(Outcome.FAILED if failed else Outcome.HELD, "; ".join(rows))


# Variables Transformer Engine reads into recipe defaults (common/recipe/__init__.py, 2.15+), set to what no
# fp8bench precision means; the probe's recipes must come out with the pinned values regardless.
TE_ENVIRONMENT = {"NVTE_BACKWARD_OVERRIDE": "dequantized", "NVTE_NVFP4_4OVER6": "all",
                  "NVTE_NVFP4_ROW_SCALED_ACTIVATION": "1"}
_TE_RECIPES = """
import json
from fp8bench.core.plugins import load_all
load_all()
from fp8bench.kernels.te_backend import PINNED_RECIPE_FIELDS, te_api, te_recipe_spec
from fp8bench.core.precisions import PRECISIONS
api, out = te_api(), {}
for name in ("fp8_tensorwise", "fp8_delayed", "fp8_blockwise", "mxfp8", "nvfp4"):
    spec = te_recipe_spec(PRECISIONS.get(name))
    if spec is not None:
        recipe = api.make_recipe(spec)
        out[name] = {k: [repr(getattr(recipe, k)), repr(v)] for k, v in PINNED_RECIPE_FIELDS.items()
                     if hasattr(recipe, k)}
print(json.dumps(out))
"""


def te_pinned_fields(ctx: ProbeContext) -> ProbeResult:
    """with NVTE_BACKWARD_OVERRIDE, NVTE_NVFP4_4OVER6 and NVTE_NVFP4_ROW_SCALED_ACTIVATION set, the TE recipes fp8bench
    builds still carry the pinned values"""
    import json
    import os
    import subprocess
    import sys

    if BACKENDS.get("te").availability(ctx.device):
        return ProbeResult(Outcome.NOT_APPLICABLE, "Transformer Engine is unavailable here")
    done = subprocess.run([sys.executable, "-c", _TE_RECIPES], env={**os.environ, **TE_ENVIRONMENT},
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return ProbeResult(Outcome.FAILED, f"building the recipes failed: {done.stderr.strip()[-300:]}")
    fields = json.loads(done.stdout.strip().splitlines()[-1])
    leaked = [f"{name}.{k} = {got} (pinned {want})" for name, values in fields.items()
              for k, (got, want) in values.items() if got != want]
    checked = sum(len(v) for v in fields.values())
    if leaked:
        return ProbeResult(Outcome.FAILED, "the environment changed: " + "; ".join(leaked))
    return ProbeResult(Outcome.HELD, f"{checked} pinned field(s) of {len(fields)} recipe(s) kept their values"
                       + ("" if checked else " (this TE release declares none of them)"))


def second_device_events(ctx: ProbeContext) -> ProbeResult:
    """CUDA events on cuda:1 time a loop on cuda:1 within 5% of the wall clock"""
    if torch.cuda.device_count() < 2:
        return ProbeResult(Outcome.NOT_APPLICABLE, "one GPU visible")
    from fp8bench.core.devices import resolve_device
    from fp8bench.measure.timing import timer_for

    device = resolve_device("cuda:1")
    a = torch.randn(4096, 4096, device=device.torch, dtype=torch.bfloat16)

    def loop() -> None:
        for _ in range(50):
            a @ a

    timer = timer_for(device, flush_l2=False)
    loop()
    device.synchronize()
    start = time.perf_counter()
    events_s = timer.time(loop)
    wall_s = time.perf_counter() - start
    off = abs(events_s - wall_s) / wall_s
    return ProbeResult(Outcome.HELD if off <= 0.05 else Outcome.FAILED,
                       f"events {events_s * 1e3:.1f} ms vs wall {wall_s * 1e3:.1f} ms ({off:.1%}; limit 5%)")


# --- the table -------------------------------------------------------------------------------------------------------

CLAIMS: tuple[Claim, ...] = (
    Claim("scale_layouts", "cuBLASLt/CUTLASS accept every scaled-GEMM call fp8bench makes (K-major block scales, "
          "swizzled MX scales, the FP4 nibble order, rowwise scale shapes) and compute the right product",
          "every FP8 and 4-bit record of the torch backend", "fp8bench/numerics/scaled_gemm.py", check="sqnr"),
    Claim("event_timer", "CUDA events bracket exactly the work launched between them, on the case's device",
          "every GPU time", "fp8bench/measure/timing.py", check="timer_vs_wall"),
    Claim("peak_row", "the device table has a row for this exact device name, and its dense peaks are reachable",
          "pct_of_peak", "fp8bench/hardware/peaks.py", check="gemm_peak"),
    Claim("energy_counter", "NVML's total-energy counter agrees with average power x time",
          "energy_j, tflops_per_w", "fp8bench/energy/meters.py", check="energy"),
    Claim("vendor_backends", "torchao, Triton (compiled) and torch.compile (Inductor) run their smallest case on CUDA",
          "records of those backends", "kernels/", check="backend"),
    Claim("no_host_sync", "no timed call reads a value back to the host, copies to the host or synchronizes a stream "
          "(checked without a GPU only by the phase audit's op list)", "every GPU time",
          "fp8bench/verify/phase_audit.py", probe=no_host_sync),
    Claim("bitwise_outputs", "GEMM, grouped GEMM and attention forward kernels return the same bits for the same "
          "inputs (the output check compares them bitwise)", "invalid verdicts from the output check",
          "fp8bench/measure/output_check.py", probe=bitwise_outputs),
    Claim("graph_capture", "an FP8 GEMM with its quantization and an attention block capture in a CUDA graph",
          "--cuda-graph records", "fp8bench/measure/cuda_graphs.py", probe=graph_capture),
    Claim("stream_overlap", "two streams of one device run concurrently (no single hardware queue)",
          "--blocked-stream records", "fp8bench/measure/blocking.py", probe=stream_overlap),
    Claim("launch_count", "the PyTorch profiler (CUPTI) counts every kernel a call launches, and detaches after",
          "which calls are held under --blocked-stream (at most 32 queued launches)", "fp8bench/measure/blocking.py",
          probe=launch_count),
    Claim("blocked_stream_holds", "a held stream is released from a second stream, within the give-up time in "
          "seconds, and warm-up leaves no allocation (an implicit synchronization) inside a held sample",
          "--blocked-stream records", "fp8bench/measure/blocking.py, runner.py", probe=blocked_stream_holds),
    Claim("spin_give_up_loaded", "the spin kernel's give-up, counted in polls timed when the hold is made (often on "
          "an idle GPU), still lasts far longer than a host needs to queue a held call once the GPU runs loaded",
          "--blocked-stream records that fell back to cuda_events after a give-up",
          "fp8bench/measure/blocking.py", probe=spin_give_up_loaded),
    Claim("nvml_poll_cost", "a telemetry poll costs a small share of the 50 ms sampling interval",
          "telemetry, per-sample clocks", "fp8bench/energy/telemetry.py", probe=nvml_poll_cost),
    Claim("cold_l2_energy", "an energy window of cold-L2 calls (flush then call, less the flush alone metered in a "
          "window of its own, per call) meters the cold call's own energy: positive, and above the same call's warm "
          "energy. Assumed, not probed: the flush alone costs what a flush before a call costs (a timed call writes "
          "back the last L2's worth of dirty lines during the call, the flush-alone loop during the next flush: about "
          "one L2 of HBM writes per call, negligible for millisecond GEMMs, perhaps ~10% for 20 us calls)",
          "energy_j and tflops_per_w of records timed with an L2 flush (the default)",
          "fp8bench/energy/meters.py, fp8bench/measure/timing.py", probe=cold_l2_energy),
    Claim("held_energy", "a held energy window, less held samples with no call (the spin polling as long), meters "
          "the call's kernels alone, as the cold eager window does", "energy_j of --blocked-stream records",
          "fp8bench/measure/blocking.py", probe=held_energy),
    Claim("subtracted_window_steps", "a subtracted window (the flush alone behind a dominant call) lasts several "
          "counter periods, so the difference has joules and a bound within the target",
          "energy_j of cold-L2 and --blocked-stream records of millisecond calls",
          "fp8bench/energy/meters.py", probe=subtracted_window_steps),
    Claim("counter_period", "NVML's energy counter updates about every 100 ms",
          "energy window lengths and their error bound", "fp8bench/energy/windows.py", probe=counter_period),
    Claim("loaded_clocks", "NVML's SM clock under load is readable and judged against a reference it can reach",
          "valid/invalid verdicts from clocks", "fp8bench/energy/nvml.py", probe=loaded_clocks),
    Claim("instant_power", "the driver answers NVML_FI_DEV_POWER_INSTANT, so per-sample power is instantaneous",
          "per-sample power (sample_power_w) and its source", "fp8bench/energy/nvml.py", probe=instant_power),
    Claim("clock_lock_readback", "a base-locked GPU under load reports its locked SM clock, which becomes the "
          "throttle reference",
          "--lock-clocks records' valid/invalid verdicts", "fp8bench/hardware/clocks.py", probe=clock_lock_readback),
    Claim("clock_lock_readback_max", "under a max lock the throttle reference is the lock's target, a clock the GPU "
          "holds under load", "--lock-clocks max records' valid/invalid verdicts", "fp8bench/hardware/clocks.py",
          probe=clock_lock_readback_max),
    Claim("clock_refresh", "NVML's clock readings refresh at least every 50 ms under load, so readings 50 ms apart "
          "are fresh ones",
          "the locked clock read back under load (--lock-clocks base)", "fp8bench/hardware/clocks.py",
          probe=clock_refresh),
    Claim("nvml_refcount", "NVML reference-counts nvmlInit/nvmlShutdown (the clock lock keeps its own session)",
          "the reset of --lock-clocks", "fp8bench/hardware/clocks.py", probe=nvml_refcount),
    Claim("triton_full_accumulation", "Triton's FP8 GEMM with --fast-accum off accumulates as precisely as torch's",
          "triton FP8 numerics and speed with full accumulation", "kernels/triton_kernels.py",
          probe=triton_full_accumulation),
    Claim("unpadded_block_scales", "torch 2.9's _scaled_mm takes block scales of shapes that are no multiple of 128",
          "fp8_blockwise records on torch 2.9", "fp8bench/numerics/scaled_gemm.py", probe=unpadded_block_scales),
    Claim("memory_estimate", "the GEMM workload's memory estimate bounds what a case allocates on the GPU",
          "cases refused or admitted for memory", "workloads/gemm.py", probe=memory_estimate),
    Claim("te_recipes", "Transformer Engine runs each recipe with the scales fp8bench sets (its SQNR matches the "
          "emulated reference)", "te records", "kernels/te_backend.py", probe=te_recipes),
    Claim("te_pinned_fields", "the TE recipe fields TE defaults from the environment are pinned by fp8bench",
          "te records of every FP8 and 4-bit recipe", "kernels/te_backend.py", probe=te_pinned_fields),
    Claim("second_device_events", "events and graphs act on cuda:N, not the current device",
          "records on cuda:1 and above", "fp8bench/core/devices.py", probe=second_device_events),
    Claim("sticky_error", "after an illegal address every CUDA call fails again (a synchronize tells a lost context "
          "from an ordinary error), so the runner records the later cases as not run",
          "records after a crashing kernel", "fp8bench/measure/runner.py",
          no_probe="provoking it loses the CUDA context of the selfcheck itself"),
    Claim("collectives", "NCCL all-gathers and reduce-scatters of FP8 payloads run across GPUs and nodes",
          "collective records", "kernels/torch_collective.py", no_probe="needs several GPUs and a torchrun launch"),
    Claim("profiler_trace", "NVTX ranges and CUDA kernels appear in a torch or nsys trace",
          "profile traces", "fp8bench/measure/profiling.py", no_probe="nsys is a separate install; run "
          "`fp8bench run --profile nsys` once and open the trace"),
)


def claim_names() -> list[str]:
    return [c.name for c in CLAIMS]


def run_probe(claim: Claim, ctx: ProbeContext) -> ProbeResult:
    """The claim's probe on this device; a probe that raises has failed, with the error as its figure."""
    assert claim.probe is not None
    try:
        return claim.probe(ctx)
    except Exception as exc:  # the error is the verdict: the claim's code path broke on this device
        first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
        return ProbeResult(Outcome.FAILED, f"{type(exc).__name__}: {first_line}")


def describe(claim: Claim) -> dict[str, Any]:
    return {"claim": claim.name, "statement": claim.statement, "rests_on_it": claim.rests_on_it,
            "relied_on_in": claim.relied_on_in, "how": claim.how}
