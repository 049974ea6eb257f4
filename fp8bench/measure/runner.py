"""The runner: expands a spec into cases and measures each into a record, streaming records to the run file and
the store as they finish.

Per case (docs/method.md, "The steps of one case"):

1. **Skip early** what cannot run: a backend unavailable on the device, a precision it does not support, a shape
   the recipe's kernels cannot take. Each becomes a ``skipped`` record with the reason; nothing disappears.
2. **Bound the cost.** A case has a time budget. Big shapes are first timed once at a scaled-down *probe* shape and
   the full call's cost extrapolated by FLOPs; a case whose minimum sampling would overrun the budget is skipped as
   ``over budget`` before it can hang the run (FP16 GEMMs on some CPUs run at 0.4 GFLOP/s).
3. **Warm up** (compilation, autotuning, allocator, thread pools), then **sample** the end-to-end call and each
   phase adaptively (:mod:`fp8bench.measure.timing`): eagerly, or as replays of a CUDA graph captured from each call
   (``cuda_graph``, :mod:`fp8bench.measure.cuda_graphs`; a call that cannot be captured is skipped with the reason).
4. **Check numerics** against the FP64 reference, outside any timed region.
5. **Meter energy** over a window of repeated calls where a meter exists.
6. **Profile** (``profile``, :mod:`fp8bench.measure.profiling`): one more pass of the calls under a profiler, after
   every figure of the record is taken, so no profiling overhead enters a timed sample.

Clocks and throttle reasons are polled through the timed samples of step 3, energy or not, and through every
energy window of step 5; a throttled device makes the case ``invalid`` (:mod:`fp8bench.energy.telemetry`).

An **interpreted** case (a backend whose kernels run under an interpreter on this device, such as Triton's on the
CPU) is there to check correctness: its pipeline runs once, at the smallest legal shape of the workload when the
case's shape is over :data:`INTERPRETED_MAX_FLOPS`, its numerics are recorded, and it ends ``ok`` with every timing
field empty and the reason :data:`INTERPRETED_REASON`. Its times would be meaningless, so none are taken.

Every case runs under its GPU's device guard (:meth:`fp8bench.core.devices.Device.guard`): inputs, kernels, the timer's
events and L2 flush, graph captures and energy windows all act on the case's device, whichever GPU was current.

Ctrl-C (and SIGTERM or SIGHUP, which the command line turns into the same interrupt) stops the run between or
inside cases; every record finished before it stays in the run file and store. A full disk stops the run too,
with status ``failed: disk full`` (:mod:`fp8bench.results.record_stream`).
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import torch

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import (
    BuildContext,
    Pipeline,
    Unsupported,
    first_line,
    is_cuda_runtime_error,
    is_out_of_memory,
)
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import (
    Precision,
    delayed_scaling_settings,
    fp4_settings,
    resolve_precision,
)
from fp8bench.core.record_parts import DelayedScaling, Efficiency, PhaseStat, SampleFigures, Throughput
from fp8bench.core.records import Record
from fp8bench.core.repro import repro_of
from fp8bench.core.shapes import Shape, label
from fp8bench.energy.meters import (
    EnergyMeter,
    EnergyReading,
    configure_meter,
    idle_baseline,
    measure_case_energy,
    meter_for,
    not_metered,
    timing_mismatch,
)
from fp8bench.energy.telemetry import TelemetryWindow, ThrottlePolicy, ThrottleVerdict
from fp8bench.hardware import environment
from fp8bench.hardware.clocks import (
    ClockCheckedTimer,
    lock_clocks,
    locked_clock_policy,
)
from fp8bench.hardware.peaks import Peaks
from fp8bench.measure.blocking import HoldTimedOut, gave_up_note, held_timer, timer_for_calls
from fp8bench.measure.cuda_graphs import CaptureRefused, GraphCapturer
from fp8bench.measure.harness_cost import CostClock, Step, summarise
from fp8bench.measure.output_check import OutputCheck, OutputWatch, deterministic
from fp8bench.measure.profiling import CaseProfiler
from fp8bench.measure.settings import RunSettings
from fp8bench.measure.timing import (
    Samples,
    Timer,
    TimingMode,
    agreed,
    sample,
    timer_for,
    timing_mode_for,
)
from fp8bench.numerics.accuracy import Numerics, compare, worst
from fp8bench.paths import default_results_dir, profile_dir
from fp8bench.results.record_stream import STATUS_DISK_FULL, DiskFull, RecordStream

# Probe shapes for estimating a big case's cost, in FLOPs: 2e7 takes 0.05 s at the 0.4 GFLOP/s of the slowest
# CPU kernel seen (FP16 matmul); the larger levels refine estimates for kernels that are slow only on small shapes.
PROBE_FLOPS_LEVELS = (2e7, 2e8, 2e9)
# Probing a larger shape is worth at most this share of the case's budget.
PROBE_BUDGET_SHARE = 0.1
# Timings of one probe taken, the least kept: on a shared machine one timing can be inflated many times over by
# preemption (noise only ever adds time), which would skip a cheap case as over budget.
PROBE_REPEATS = 5
# The end-to-end samples may use this share of a case's budget; the phases share the rest.
END_TO_END_BUDGET_SHARE = 0.5
# An interpreted case over this many FLOPs checks its numerics at the workload's smallest legal shape instead: Triton's
# CPU interpreter took 4 to 8 s per 256^3 FP8 GEMM on a loaded 2-core machine, and grows with the tile count.
INTERPRETED_MAX_FLOPS = 2 * 256**3
INTERPRETED_REASON = "interpreted: not timed"
# On the CPU, warm-up ends early, after ``warmup_iters`` calls, once a call takes within this fraction of the one
# before: the first calls' one-off costs (allocation, lazy initialisation, cold caches) are behind, and waiting out
# ``warmup_s`` would only add calls that change nothing (for a 14 ms CPU call the 50 ms floor was a tenth of the case's
# wall time, scripts/harness_cost.py). A GPU keeps ``warmup_s`` as its least warm-up: its SM clock ramps up from idle
# gradually, so two host-timed calls can agree mid-ramp (a 0.25 ms GEMM changes by well under 5 % a call), and the
# per-sample clock check that would catch a slow sample is off in lockstep runs and keeps samples above 75 % of the
# reference (nvbench judges clocks per trial instead: nvbench/detail/measure_cold.cu).
WARMUP_SETTLED = 0.05
# An energy window loops a call for as long as the meter needs, a count each rank would choose on its own clock:
# in a distributed run the ranks' collectives would stop matching, so no window runs.
NOT_METERED_LOCKSTEP = ("not metered in a distributed run: each rank's energy window would loop a different number "
                        "of collective calls")


def _configured(meter: EnergyMeter, settings: RunSettings, locked_clock_mhz: int | None = None) -> EnergyMeter:
    """``meter`` set to the energy and clock parts of ``settings`` (:func:`fp8bench.energy.meters.configure_meter`)."""
    energy, clocks = settings.energy, settings.clocks
    return configure_meter(meter, energy.window_s, clocks.floor, clocks.strict, energy.error_target, locked_clock_mhz)


def warmup_may_settle(device: Device) -> bool:
    """Whether a warm-up on ``device`` may end once two calls agree (:data:`WARMUP_SETTLED`): on the CPU only."""
    return not device.is_cuda


def expand_cases(workload_shapes: list[tuple[str, list[str]]], precisions: list[str], backends: list[str],
                 settings: RunSettings) -> list[Case]:
    """Every combination of (workload, shape) x precision (x accumulation mode, for FP8) x backend. Raises on
    unknown names or bad shapes."""
    load_all()
    for b in backends:
        BACKENDS.get(b)
    cases = []
    for workload_name, shape_texts in workload_shapes:
        workload = WORKLOADS.get(workload_name)
        shapes = [workload.parse_shape(s) for s in shape_texts]
        for shape in shapes:
            # A recipe's default FP8 format depends on whether the workload trains (recipes.default_fp8_format).
            resolved: list[Precision] = []
            for p in precisions:
                for fast in settings.recipe.fast_accum:
                    precision = resolve_precision(p, settings.recipe.options(fast, workload.trains(shape)))
                    if precision not in resolved:  # float precisions have no accumulation switch: once each
                        resolved.append(precision)
            for precision in resolved:
                for backend in backends:
                    cases.append(Case(workload_name, shape, precision, backend))
    return cases


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def case_flops(case: Case) -> int:
    """Floating-point operations of one end-to-end call of ``case`` (its workload's count)."""
    return WORKLOADS.get(case.workload).flops(case.shape)


def case_bytes(case: Case) -> int:
    """The least bytes one end-to-end call of ``case`` must move, at its precision (its workload's count)."""
    return WORKLOADS.get(case.workload).min_bytes(case.shape, case.precision)


def case_record(case: Case, device: Device, seq: int, status: str, reason: str | None = None,
                **fields: Any) -> Record:
    """A record of ``case`` on ``device`` with what every record states (names, recipe settings, its position
    ``seq`` in the run, and the FLOPs and bytes of one call unless ``fields`` brings a measured ``throughput``);
    measured fields come in ``fields``."""
    if "throughput" not in fields:
        fields["throughput"] = Throughput(flops=case_flops(case), bytes=case_bytes(case))
    record = Record(**case.stored_fields(), device=str(device), status=status, reason=reason,
                    delayed_scaling=DelayedScaling.from_json(delayed_scaling_settings(case.precision)),
                    seq=seq, **fields)
    options = fp4_settings(case.precision)
    if options:  # the 4-bit recipe's gradient options (they act on training workloads only)
        record.extra["fp4_options"] = options
    return record


class CaseMeasurer:
    """Measures single cases on one device. Inputs and FP64 references are cached per (workload, shape)."""

    def __init__(self, settings: RunSettings, device: Device, peaks: Peaks | None = None,
                 timer: Timer | None = None, profiler: CaseProfiler | None = None,
                 locked_clock_mhz: int | None = None) -> None:
        self.settings, self.device = settings, device
        self.profiler = profiler  # adds a profile to each measured record, after its figures are taken
        timing = settings.timing
        self.timing_mode = timing_mode_for(device, timing.cuda_graph, timing.blocked_stream)
        self.l2_flushed = device.is_cuda and timing.flush_l2
        self.peaks = peaks
        with device.guard():
            # ``timer`` replaces the device's own (the selfcheck passes the probe's, so its fakes reach every sample).
            self.timer = timer or timer_for(device, timing.flush_l2)
            self.graphs = GraphCapturer(device) if timing.cuda_graph else None
            # blocked_stream: its timer, or None and the note each record carries about the mode used instead.
            self.blocked, self.blocked_note = held_timer(device, timing.blocked_stream, timing.flush_l2, timer)
            if timing.blocked_stream and self.blocked is None:
                self.timing_mode = timing_mode_for(device, timing.cuda_graph)
            # Under --lock-clocks the locked clock, read back, is the reference of every throttle check.
            self.meter = _configured(meter_for(device), settings, locked_clock_mhz)
            # The timed samples are watched through the meter's device telemetry, under the meter's throttle rule,
            # whether or not energy is metered (fp8bench.energy.telemetry).
            self.telemetry = getattr(self.meter, "source", None)
            self.throttle: ThrottlePolicy = getattr(self.meter, "throttle", ThrottlePolicy())
            self.telemetry_absent = ((getattr(self.meter, "reason", None) or "the energy meter reads no telemetry")
                                     if device.is_cuda else "clock and throttle telemetry comes from NVML, on NVIDIA "
                                     "GPUs")
            # Idle power is measured once, before any case runs, so that no case's heat is in it.
            energy = settings.energy
            self.idle = idle_baseline(self.meter, device, energy.idle_baseline_s) if energy.enabled else None
        # A timer shared by several processes (fp8bench.measure.lockstep.LockstepTimer) makes every decision together.
        self.lockstep = hasattr(self.timer, "agree")
        self.cost = CostClock()  # the harness's own cost of the case being measured (measure.harness_cost)
        self._inputs: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
        self._refs: dict[tuple[str, str], torch.Tensor] = {}
        self.context_lost: str | None = None  # why no later case can run on this device (lost_context)

    def _inputs_for(self, workload: str, shape: Shape) -> dict[str, torch.Tensor]:
        key = (workload, label(shape))
        if key not in self._inputs:
            self._inputs.clear()  # keep one shape's tensors alive at a time: big shapes are big
            self._refs.clear()
            self._inputs[key] = WORKLOADS.get(workload).make_inputs(shape, self.device, self.settings.seed)
        return self._inputs[key]

    def _reference_for(self, workload: str, shape: Shape) -> torch.Tensor:
        key = (workload, label(shape))
        if key not in self._refs:
            self._refs[key] = WORKLOADS.get(workload).reference(self._inputs_for(workload, shape))
        return self._refs[key]

    def _agree_reason(self, reason: str | None) -> str | None:
        """A refusal on any rank of a distributed run is every rank's (each would otherwise wait for the others
        in the case's first collective); on one process, the reason itself."""
        agree_reason = getattr(self.timer, "agree_reason", None)
        return agree_reason(reason) if agree_reason is not None else reason

    def _base(self, case: Case, seq: int, status: str, reason: str | None = None, **fields: Any) -> Record:
        fields.setdefault("energy", not_metered(self.meter, status))
        fields.setdefault("timing_mode", self.timing_mode.value)
        fields.setdefault("l2_flushed", self.l2_flushed)
        return case_record(case, self.device, seq, status, reason, **fields)

    def skipped(self, case: Case, seq: int, reason: str) -> Record:
        """The record of ``case`` not measured, with the reason."""
        return self._base(case, seq, "skipped", reason)

    def measure(self, case: Case, seq: int = 0, settings: RunSettings | None = None) -> Record:
        """The record of ``case``, measured under ``settings`` (a suite budget's shortened ones) or the run's."""
        if self.context_lost is not None:  # every CUDA call of this process would fail with the same error
            return self._base(case, seq, "skipped", self.context_lost)
        started = time.monotonic()
        self.cost = CostClock()
        with self.device.guard(), self._settings_for_case(settings):
            try:
                record = self._measure_or_explain(case, seq, started)
            finally:
                if self.graphs is not None:
                    self.graphs.release()
        wall = time.monotonic() - started
        return replace(record, timing=replace(record.timing, case_wall_s=wall),
                       harness=self.cost.record(wall, record.timing.timed_s or 0.0))

    @contextmanager
    def _settings_for_case(self, settings: RunSettings | None) -> Iterator[None]:
        """Measure under ``settings`` for one case (the energy meter's windows follow them), then the run's again."""
        run_settings = self.settings
        if settings is None or settings == run_settings:
            yield
            return
        self.settings = settings
        _configured(self.meter, settings)
        try:
            yield
        finally:
            self.settings = run_settings
            _configured(self.meter, run_settings)

    def _clock_checked(self, timer: Timer) -> ClockCheckedTimer | None:
        """``timer`` with the per-sample clock check (fp8bench.hardware.clocks), where the device reports its SM clock
        and a reference, the check is on, and the run is not in lockstep (each rank would retake different samples)."""
        source, clocks = self.telemetry, self.settings.clocks
        if source is None or not source.reference_clock_mhz or not clocks.throttle_threshold or self.lockstep:
            return None
        return ClockCheckedTimer(timer, source.read, float(source.reference_clock_mhz), clocks.throttle_threshold,
                                 clocks.throttle_recovery_s)

    def _timed_call(self, name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        """What the timer samples for ``fn``: the eager call, or the replay of a CUDA graph captured from it
        (raises :class:`fp8bench.measure.cuda_graphs.CaptureRefused` with the reason when it cannot be captured)."""
        return self.graphs.capture(name, fn).replay if self.graphs is not None else fn

    def _measure_or_explain(self, case: Case, seq: int, started: float) -> Record:
        try:
            return self._measure(case, seq, started)
        except KeyboardInterrupt:
            raise
        except Unsupported as exc:  # a refusal may wrap a kernel fault (the context is then checked too)
            self.context_lost = lost_context(self.device, seq, exc)
            return self._base(case, seq, "skipped", str(exc))
        except Exception as exc:  # a crashing kernel fails its case, never the run
            if is_out_of_memory(exc):  # free what the failed case cached, so the next case has the memory
                torch.cuda.empty_cache()
                return self._base(case, seq, "failed", f"out of memory on {self.device}: {first_line(exc)}")
            self.context_lost = lost_context(self.device, seq, exc)
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            return self._base(case, seq, "failed", f"{type(exc).__name__}: {exc} "
                              f"(at {Path(tb.filename).name}:{tb.lineno})")

    def _build(self, case: Case, shape: Shape, inputs: dict[str, torch.Tensor]) -> Pipeline:
        ctx = BuildContext(case.workload, shape, case.precision, self.device, inputs)
        return BACKENDS.get(case.backend).build(ctx)

    def _estimate_call_s(self, case: Case, budget_s: float) -> tuple[float, Shape] | None:
        """Extrapolated seconds of one full-size call, or ``None`` when the shape is small enough to just run.

        Probes grow through :data:`PROBE_FLOPS_LEVELS`: a tiny probe bounds the cost of a pathological kernel
        cheaply, and a larger one corrects the pessimism of extrapolating from a shape too small to be efficient.
        Each probe runs once to warm up, then is timed, up to :data:`PROBE_REPEATS` times while its estimate
        would skip the case; the least timing counts.
        """
        workload = WORKLOADS.get(case.workload)
        needed_calls = self.settings.timing.policy.min_samples + self.settings.timing.warmup_iters
        estimate: tuple[float, Shape] | None = None
        for i, level in enumerate(PROBE_FLOPS_LEVELS):
            probe = workload.probe_shape(case.shape, level)
            if probe is None:
                return estimate
            pipeline = self._build(case, probe, workload.make_inputs(probe, self.device, self.settings.seed))
            pipeline.end_to_end()
            scale = workload.flops(case.shape) / workload.flops(probe)
            t = self.timer.time(pipeline.end_to_end)
            # Retime only while the estimate would skip the case (where a preempted timing would do harm); each
            # retime costs one probe call, bounded by the level's FLOPs or the refine rule below.
            for _ in range(PROBE_REPEATS - 1):
                if t * scale * needed_calls <= budget_s:
                    break
                t = min(t, self.timer.time(pipeline.end_to_end))
            estimate = (t * scale, probe)
            if estimate[0] * needed_calls <= budget_s or i + 1 == len(PROBE_FLOPS_LEVELS):
                return estimate
            # Refine with the next, larger probe only while its two calls cost a small part of the budget.
            next_probe = workload.probe_shape(case.shape, PROBE_FLOPS_LEVELS[i + 1]) or case.shape
            if 2 * t * workload.flops(next_probe) / workload.flops(probe) > PROBE_BUDGET_SHARE * budget_s:
                return estimate
        return estimate

    def _numerics(self, case: Case, shape: Shape, pipeline: Pipeline, output: torch.Tensor | None = None) -> Numerics:
        """Numerics of a fresh output against the FP64 reference at ``shape`` (outside any timed region): ``output``
        where the caller holds one, else a call of the pipeline's output."""
        if output is None:
            output = pipeline.output()
        self.device.synchronize()
        stats = pipeline.cast_stats()
        return compare(output, self._reference_for(case.workload, shape),
                       worst(*(c.overflow_frac for c in stats.values())),
                       worst(*(c.underflow_frac for c in stats.values())))

    def _check_interpreted(self, case: Case, seq: int, started: float) -> Record:
        """Record an interpreted case's numerics, and check its repeated calls against its fresh output
        (:meth:`fp8bench.measure.output_check.OutputWatch.repeat`), with no timing at all."""
        workload = WORKLOADS.get(case.workload)
        shape = case.shape
        if workload.flops(shape) > INTERPRETED_MAX_FLOPS:
            shape = workload.probe_shape(shape, 0) or shape  # the smallest shape every recipe's tiles accept
        pipeline = self._build(case, shape, self._inputs_for(case.workload, shape))
        outputs = OutputWatch(pipeline.output, pipeline.returns, False,
                              deterministic(case.precision, pipeline.returns))
        num = self._numerics(case, shape, pipeline, outputs.fresh)
        output_check = outputs.repeat(pipeline.end_to_end, self._reference_for(case.workload, shape))
        status, reason, valid = "ok", INTERPRETED_REASON, True
        notes = list(pipeline.notes)
        extra = dict(pipeline.extra)
        if shape != case.shape:
            notes.append(f"interpreted: numerics checked at {label(shape)}, the smallest legal shape, because "
                         f"{label(case.shape)} is over the interpreter's limit")
            extra["numerics_shape"] = dict(shape)
        if not num.finite:
            status, valid = "invalid", False
            reason = f"{reason}; non-finite output: {num.nonfinite_frac:.3%} of elements NaN/Inf"
        if output_check.passed is False:
            status, valid, reason = "invalid", False, f"{reason}; {output_check.reason}"
        return self._base(case, seq, status, reason, numerics=num.to_dict(), valid=valid, interpreted=True,
                          output_check=output_check.to_dict(),
                          notes=notes, extra=extra, timing={"check_s": time.monotonic() - started},
                          scale_format=pipeline.scale_format,
                          energy={"method": None, "joules_per_iter": None, "reason": INTERPRETED_REASON})

    def _measure(self, case: Case, seq: int, started: float) -> Record:
        """Measure ``case``: refuse it, check it (interpreted backends), or build, warm up, time, check numerics,
        meter energy, and turn what was measured into its record."""
        refused = self._refusal(case, seq)
        if refused is not None:
            return refused
        if BACKENDS.get(case.backend).interpreted(self.device):
            return self._check_interpreted(case, seq, started)
        s = self.settings
        deadline = started + s.timing.budget_s
        over_budget = self._over_budget(case, seq)
        if over_budget is not None:
            return over_budget

        with self.cost.part(Step.SETUP):
            inputs = self._inputs_for(case.workload, case.shape)
            build_started = time.monotonic()
            pipeline = self._build(case, case.shape, inputs)
        # Building (torch.compile, Triton autotuning) is setup, recorded by the backend, not measurement time.
        deadline += time.monotonic() - build_started
        # A fresh call's output, before any warm-up, to check the last timed call against
        # (fp8bench.measure.output_check); where the timed call is the output itself, the first warm-up call.
        with self.cost.part(Step.NUMERICS):
            outputs = OutputWatch(pipeline.output, pipeline.returns, self.graphs is not None,
                                  deterministic(case.precision, pipeline.returns), timed_fn=pipeline.end_to_end)
        # Warm-up runs what the samples run (the call with its output kept), so the allocator holds every block
        # the samples need before any sample, and no sample allocates (cudaMalloc synchronizes implicitly).
        timed_call = outputs.timed(pipeline.end_to_end)
        with self.cost.part(Step.WARMUP):
            warm = self._warm_up(timed_call, deadline, outputs.first_call)
        if warm.over_budget:
            return self._base(case, seq, "skipped", warm.over_budget,
                              timing={"warmup_calls": warm.calls, "last_call_s": warm.last_call_s})
        with self.cost.part(Step.SAMPLING):
            timed = self._time(pipeline, timed_call, deadline, outputs)
        timing: dict[str, Any] = {"warmup_s": warm.seconds, "warmup_calls": warm.calls,
                                  "warmup_stopped_by": warm.stopped_by, **{
            f"e2e_{k}": v for k, v in timed.e2e.summary().items() if k not in ("median_s", "n")}}
        if timed.e2e.over_budget:
            e2e = timed.e2e
            return self._base(case, seq, "skipped", f"over budget: {e2e.n} of {s.timing.policy.min_samples} "
                              f"samples in the {s.timing.budget_s:g} s budget",
                              samples=SampleFigures(samples_s=e2e.samples_s, n=e2e.n), timing=timing,
                              timing_mode=timed.timing_mode, notes=list(timed.notes))

        numerics_started = time.monotonic()
        with self.cost.part(Step.NUMERICS):
            # A deterministic case's calls must all return the same bits (the output check holds them to it), so
            # the fresh output taken before warm-up serves the numerics: one call of the case fewer.
            num = self._numerics(case, case.shape, pipeline, outputs.fresh if outputs.exact else None)
            output_check = outputs.verdict(self._reference_for(case.workload, case.shape))
        timing["numerics_s"] = time.monotonic() - numerics_started
        with self.cost.part(Step.ENERGY):
            energy = self._energy(pipeline, timed)
        timing["timed_s"] = timed.seconds
        if self.graphs is not None:
            timing["graph_capture_s"] = sum(c.capture_s for c in self.graphs.captured)
        timing["overhead_s"] = time.monotonic() - started - timed.seconds - warm.seconds
        record = self._measured_record(case, seq, pipeline, timed, num, output_check, energy, timing)
        return record if self.profiler is None else self.profiler.attach(record, case, pipeline, self.device, s)

    def _over_budget(self, case: Case, seq: int) -> Record | None:
        """The ``over budget`` record of a case whose probe-timed call, times the fewest calls it needs, exceeds its
        budget; ``None`` when it may fit."""
        s = self.settings.timing
        min_needed = s.policy.min_samples + s.warmup_iters
        with self.cost.part(Step.PROBE):
            estimate = self._estimate_call_s(case, s.budget_s)
        if estimate and estimate[0] * min_needed > s.budget_s:
            return self._base(case, seq, "skipped", f"over budget: one call is estimated at {estimate[0]:.3g} s "
                              f"(timed at probe shape {label(estimate[1])}), {min_needed} calls exceed the "
                              f"{s.budget_s:g} s budget", timing={"estimated_call_s": estimate[0]})
        return None

    def _refusal(self, case: Case, seq: int) -> Record | None:
        """The record of a case that is not measured here, with the reason: its backend does not support it, its
        shape does not fit its recipe, or it would not fit in memory; ``None`` when it can be measured."""
        workload = WORKLOADS.get(case.workload)
        backend = BACKENDS.get(case.backend)
        why = backend.unsupported_reason(case.workload, case.precision, self.device)
        why = self._agree_reason(why or workload.shape_reason(case.shape, case.precision))
        if why:
            return self._base(case, seq, "skipped", why)
        oom = self._agree_reason(workload.memory_reason(case.shape, case.precision, self.device))
        if oom:  # refused before allocating: on the CPU a real out-of-memory kills the whole process
            return self._base(case, seq, "failed", oom)
        return None

    def _warm_up(self, e2e: Callable[[], Any], deadline: float, after_first: Callable[[], None]) -> _Warmup:
        """Warm up: at least ``warmup_iters`` calls, then until ``warmup_s`` seconds have passed or, on the CPU, two
        calls in a row agree to within :data:`WARMUP_SETTLED` (the first calls' one-off costs are behind), stopping
        early if one call is too slow for the samples to fit before ``deadline``; ``after_first`` runs once, right
        after the first call. ``stopped_by`` says which rule ended it."""
        s = self.settings.timing
        warm = _Warmup()
        warm_start = time.monotonic()
        settled, may_settle = False, warmup_may_settle(self.device)
        # Both decisions read this process's clock: a distributed run takes them together (``agreed``).
        # At least one call, whatever the settings: the first is the output check's fresh call.
        while agreed(self.timer, warm.calls < max(1, s.warmup_iters)
                     or (not settled and time.monotonic() - warm_start < s.warmup_s)):
            t0 = time.monotonic()
            e2e()
            self.device.synchronize()
            previous, warm.last_call_s = warm.last_call_s, time.monotonic() - t0
            settled = (may_settle and warm.calls > 0
                       and abs(warm.last_call_s - previous) <= WARMUP_SETTLED * previous)
            warm.calls += 1
            if warm.calls == 1:
                after_first()
            remaining = deadline - time.monotonic()
            if agreed(self.timer, warm.last_call_s * s.policy.min_samples > remaining):
                warm.over_budget = (f"over budget: one call takes {warm.last_call_s:.3g} s, {s.policy.min_samples} "
                                    f"samples exceed the {s.budget_s:g} s budget")
                return warm
        warm.seconds = time.monotonic() - warm_start
        least = max(1, s.warmup_iters)
        warm.stopped_by = "settled" if settled and warm.calls > least else "warmup_s" if warm.calls > least \
            else "warmup_iters"
        return warm

    def _time(self, pipeline: Pipeline, e2e: Callable[[], Any], deadline: float, outputs: OutputWatch) -> _Timed:
        """The timed samples: end to end first (``e2e``, the call as warmed up, in its share of the budget), then
        each phase until ``deadline``, with clocks and throttle reasons polled through all of them; ``outputs``
        keeps the last timed output."""
        # blocked_stream: each call is tried once held; a call that synchronizes sends the case to cuda_events.
        mode = (self.timer, self.timing_mode, self.blocked_note)
        if self.blocked is not None:
            mode = timer_for_calls(self.blocked, self.timer, [e2e, *pipeline.phases.values()])
        try:
            return self._sample_all(pipeline, e2e, deadline, outputs, mode)
        except HoldTimedOut as exc:  # a later held sample gave up: every figure of the case from events instead
            return self._sample_all(pipeline, e2e, deadline, outputs, (self.timer, TimingMode.CUDA_EVENTS,
                                                                        gave_up_note(exc)))

    def _sample_all(self, pipeline: Pipeline, e2e: Callable[[], Any], deadline: float, outputs: OutputWatch,
                    mode: tuple[Timer, TimingMode, str | None]) -> _Timed:
        """:meth:`_time`'s samples with ``mode``'s timer, the mode it times in and the note that says why."""
        s = self.settings.timing
        timer, timing_mode, mode_note = mode
        e2e_deadline = min(deadline, time.monotonic() + s.budget_s * END_TO_END_BUDGET_SHARE)
        # GPUs: the SM clock and power read after every sample; a sample at a throttled clock is retaken.
        checked = self._clock_checked(timer)
        timer = checked or timer
        watch = TelemetryWindow(self.telemetry, absent_reason=self.telemetry_absent)
        with watch:
            e2e_call = self._timed_call("end_to_end", e2e)
            timed = _Timed(sample(e2e_call, timer, s.policy, e2e_deadline), e2e_call,
                           notes=[*pipeline.notes, *([mode_note] if mode_note else [])],
                           timing_mode=timing_mode.value, timer=mode[0])
            outputs.keep_last()
            timed.per_sample = checked.take_record() if checked is not None else None
            if not timed.e2e.over_budget and s.phases and len(pipeline.phases) > 0:
                self._time_phases(pipeline, timed, deadline, timer)
        timed.watched = watch.verdict(self.throttle)
        if checked is not None and timed.per_sample is not None:
            timed.discarded = timed.per_sample["discarded_samples"] + checked.take_record()["discarded_samples"]
        return timed

    def _time_phases(self, pipeline: Pipeline, timed: _Timed, deadline: float, timer: Timer) -> None:
        """Sample each phase of ``pipeline`` into ``timed``, noting a phase that could not be timed and why."""
        for name, fn in pipeline.phases.items():
            if fn is pipeline.end_to_end:  # a one-phase pipeline: its phase was just measured
                timed.phase_samples[name], timed.phase_calls[name] = timed.e2e, timed.e2e_call
                continue
            try:
                timed.phase_calls[name] = self._timed_call(name, fn)
            except CaptureRefused as exc:  # timed as a graph or not at all: one mode per record
                timed.notes.append(f"phase {name} not timed: {exc}")
                continue
            timed.phase_samples[name] = sample(timed.phase_calls[name], timer, self.settings.timing.policy, deadline)
            if timed.phase_samples[name].n == 0:
                timed.notes.append(f"phase {name} not timed: budget spent")

    def _energy(self, pipeline: Pipeline, timed: _Timed) -> EnergyReading | None:
        """The case's energy, or ``None`` when it is not metered (disabled, or a distributed run's lockstep)."""
        s = self.settings.energy
        if not s.enabled or self.lockstep:
            return None
        # The energy window loops what was timed: in graph mode the replays, so joules and seconds describe one work,
        # and each call as the samples' timer ran it (after a flush, behind a hold) where it wrapped them.
        metered = pipeline if self.graphs is None else replace(pipeline, end_to_end=timed.e2e_call,
                                                               phases=timed.phase_calls)
        as_timed = getattr(timed.timer, "as_timed", None)
        mismatch = None if as_timed is not None else timing_mismatch(timed.timing_mode, self.l2_flushed)
        args = (self.meter, metered, self.device, timed.e2e.median_s or 0.0, timed.phases, s.phases, self.idle)
        try:
            return measure_case_energy(*args, mismatch, as_timed)
        except HoldTimedOut as exc:  # the call reads back to the host now and then: no held window, the bare call
            gave_up = f"a held call gave up in the energy window ({exc})"
            return measure_case_energy(*args, "; ".join(filter(None, [timing_mismatch(timed.timing_mode,
                                                                                     self.l2_flushed), gave_up])))

    def _measured_record(self, case: Case, seq: int, pipeline: Pipeline, timed: _Timed, num: Numerics,
                         output_check: OutputCheck, energy: EnergyReading | None, timing: dict[str, Any]) -> Record:
        """The record of a measured case: its rates and share of the device's peak, its numerics and energy, and
        its status (``invalid`` for a non-finite output or a throttled device)."""
        e2e, phases, watched = timed.e2e, timed.phases, timed.watched
        prequant = None
        if pipeline.prequantized_phases and all(p in phases for p in pipeline.prequantized_phases):
            prequant = sum(phases[p] for p in pipeline.prequantized_phases)
        median = e2e.median_s
        rates = self._throughput(case, median, prequant)
        flops = rates.flops or 0
        status, reason, valid = "ok", None, True
        if not num.finite:
            status, reason, valid = "invalid", f"non-finite output: {num.nonfinite_frac:.3%} of elements NaN/Inf", False
        if output_check.passed is False:
            status, valid = "invalid", False
            reason = "; ".join(filter(None, [reason, output_check.reason]))
        throttled = [*watched.invalid_reasons, *(energy.invalid_reasons if energy is not None else ())]
        if throttled:
            status, valid = "invalid", False
            reason = "; ".join(filter(None, [reason, *throttled]))
        notes = [*timed.notes, *watched.notes, *(energy.clock_notes if energy is not None else ())]
        if pipeline.interpreted:
            notes.append("interpreted: timings are not comparable and never gate anything")
        withheld = self.peaks.withheld() if rates.peak_tflops is None and self.peaks is not None else None
        if withheld:
            notes.append(withheld)
        telemetry = {"timing": watched.telemetry}
        if timed.per_sample is not None:
            telemetry["per_sample"] = timed.per_sample
        if energy is not None:
            telemetry["energy"] = energy.telemetry or {"reason": f"not sampled: {energy.reason or 'no telemetry'}"}
        joules = energy.joules_per_iter if energy else None
        return self._base(
            case, seq, status, reason,
            samples=SampleFigures(
                samples_s=e2e.samples_s, median_s=median, iqr_s=e2e.iqr_s, rsd=e2e.rsd, n=e2e.n,
                host_samples_s=e2e.host_samples_s, host_median_s=e2e.host_median_s,
                launch_overhead_s=e2e.launch_overhead_s, target_reached=e2e.target_reached,
                prequant_median_s=prequant, phases=phases,
                phase_stats={k: PhaseStat.from_json(v.summary()) for k, v in timed.phase_samples.items()},
                sm_clock_mhz=watched.sm_clock_mhz, discarded_samples=timed.discarded),
            throughput=rates,
            efficiency=Efficiency(energy_j=joules, avg_power_w=energy.avg_power_w if energy else None,
                                  tflops_per_w=(flops / joules / 1e12) if joules else None),
            energy=energy.to_dict() if energy else {"reason": NOT_METERED_LOCKSTEP if (self.settings.energy.enabled
                                                                                        and self.lockstep)
                                                    else "energy metering disabled"},
            numerics=num.to_dict(), output_check=output_check.to_dict(), telemetry=telemetry, valid=valid,
            interpreted=pipeline.interpreted, notes=notes, timing=timing, extra=_extra(pipeline, median, phases),
            scale_format=pipeline.scale_format, timing_mode=timed.timing_mode)

    def _throughput(self, case: Case, median: float | None, prequant: float | None) -> Throughput:
        """The case's work and rates from its end-to-end and pre-quantized medians (seconds), against the device's
        ceilings."""
        flops, nbytes = case_flops(case), case_bytes(case)
        tflops = flops / median / 1e12 if median and flops else None  # a pure collective does no arithmetic
        peak = self.peaks.compute(case.precision) if self.peaks else None
        bandwidth = self.peaks.bandwidth() if self.peaks else None
        return Throughput(
            flops=flops, bytes=nbytes, tflops=tflops,
            prequant_tflops=flops / prequant / 1e12 if prequant and flops else None,
            gbps=nbytes / median / 1e9 if median else None,
            pct_of_peak=100 * tflops / peak.value if (tflops and peak) else None,
            peak_tflops=peak.value if peak else None, peak_source=peak.source if peak else None,
            peak_mem_tbps=bandwidth.value if bandwidth else None)


def lost_context(device: Device, seq: int, exc: BaseException) -> str | None:
    """The reason every later case of the process is not run, when case ``seq`` failed with a CUDA error that broke
    the context; ``None`` when the device still works.

    A kernel fault (an illegal address, a launch failure) is sticky: the CUDA Runtime API documents that the
    process is left in an inconsistent state, every later CUDA call returns the same error, and only a new process
    can use the device. Which errors are sticky is read from the device itself: after any error of a case on a CUDA
    device (a library may word the fault its own way, cuBLAS's ``CUBLAS_STATUS_EXECUTION_FAILED``, or a builder may
    turn it into a refusal), one synchronize either succeeds (the error was the failed call's alone) or fails with
    a CUDA error (the context is lost).
    """
    if not device.is_cuda:
        return None
    try:
        device.synchronize()
    except RuntimeError as again:
        if is_cuda_runtime_error(again):
            return (f"not run: CUDA context lost after case {seq} ({type(again).__name__}: {first_line(again)}); "
                    "run the remaining cases in a new process")
    return None


@dataclass
class _Warmup:
    """The warm-up of one case: the calls made, the last one's seconds, the seconds spent, and why the case is
    over budget (``None``: it fits)."""

    calls: int = 0
    last_call_s: float = 0.0
    seconds: float = 0.0
    over_budget: str | None = None
    # What ended it: ``warmup_iters`` (the least calls, which outlasted ``warmup_s`` or settled as they ended),
    # ``warmup_s`` (its seconds passed) or ``settled`` (two calls agreed after the least, CPU only: WARMUP_SETTLED).
    stopped_by: str | None = None


@dataclass
class _Timed:
    """The timed samples of one case: end to end and per phase, what the timer called for each (the eager call or
    a CUDA-graph replay), the notes on phases not timed, and the device telemetry's verdict over all of them."""

    e2e: Samples
    e2e_call: Callable[[], Any]
    phase_samples: dict[str, Samples] = field(default_factory=dict)
    phase_calls: dict[str, Callable[[], Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    watched: ThrottleVerdict = field(default_factory=lambda: ThrottleVerdict({}))
    timing_mode: str = ""  # the mode the samples were taken in (blocked_stream falls back per case)
    timer: Timer | None = None  # the timer that took them (its ``as_timed`` runs a call as they did, for energy)
    per_sample: dict[str, Any] | None = None  # GPUs: SM clock and power after each end-to-end sample
    discarded: int | None = None  # samples retaken after a throttled clock reading (None: not checked)

    @property
    def phases(self) -> dict[str, float]:
        """Median seconds of each timed phase."""
        return {k: v.median_s for k, v in self.phase_samples.items() if v.median_s is not None}

    @property
    def seconds(self) -> float:
        """Seconds inside timed samples (a phase timed by the end-to-end samples counted once)."""
        return sum(self.e2e.samples_s) + sum(sum(v.samples_s) for v in self.phase_samples.values()
                                             if v is not self.e2e)


def _extra(pipeline: Pipeline, median_s: float | None, phases: dict[str, float]) -> dict[str, Any]:
    """The pipeline's record extras, with throughput in tokens/s where it states its tokens per call, and the
    bandwidths of a collective where it states its bytes (``comm_bytes``, nccl-tests' size S) and the bus factor of
    its operation: ``algbw = S / t`` and ``busbw = algbw * bus_factor``, ``t`` the median of its ``communicate``
    phase (the collective alone, as nccl-tests times it), in GB/s."""
    extra = dict(pipeline.extra)
    if extra.get("tokens_per_step") and median_s:
        extra["tokens_per_s"] = extra["tokens_per_step"] / median_s
    comm_s = phases.get("communicate")
    if "comm_bytes" in extra and "bus_factor" in extra and comm_s:
        extra["algbw_gbps"] = extra["comm_bytes"] / comm_s / 1e9
        extra["busbw_gbps"] = extra["algbw_gbps"] * extra["bus_factor"]
    return extra


@dataclass
class RunOutcome:
    run_id: str
    records: list[Record]
    interrupted: bool
    run_file: Path | None
    store_url: str | None
    store_errors: list[str]
    wall_s: float
    disk_full: str | None = None  # what failed when the run file's disk filled; the run stopped there
    run_file_complete: bool = True  # the run file on disk holds every record (False only after a full disk)
    interrupted_by: str | None = None  # SIGINT (Ctrl-C), SIGTERM or SIGHUP
    harness: dict[str, Any] | None = None  # the harness's cost over the run (measure.harness_cost.summarise)
    wall_budget: dict[str, Any] | None = None  # the wall budget's outcome (measure.budget), when the run had one


def run_header(run_id: str, device: Device, device_spec: str, settings: RunSettings,
               spec: dict[str, Any]) -> dict[str, Any]:
    env = environment.capture(device)
    settings_dict = settings.to_header()
    return {"run_id": run_id, "started_at": datetime.now(timezone.utc).isoformat(), "status": "running",
            "device_spec": str(device), "requested_device": device_spec, **env,
            "settings": settings_dict, "spec": spec, "energy_method": meter_for(device).method}


def case_profiler(settings: RunSettings, run_file: Path | None, results_dir: Path | None,
                  run_id: str) -> CaseProfiler | None:
    """The run's profiler when ``settings.profile`` asks for one: profiles beside the run file, or under the results
    folder's ``runs`` when there is none."""
    if not settings.profile:
        return None
    runs = run_file.parent if run_file else (results_dir or default_results_dir()) / "runs"
    return CaseProfiler(settings.profile, profile_dir(runs, run_id))


def run_cases(cases: list[Case], settings: RunSettings, device: Device, *, run_file: Path | None,
              store: Any | None = None, spec: dict[str, Any] | None = None, results_dir: Path | None = None,
              on_record: Callable[[int, Case, Record], None] | None = None,
              on_start: Callable[[int, Case], None] | None = None, run_id: str | None = None,
              timer: Timer | None = None, budget: RunBudget | None = None) -> RunOutcome:
    """Measure ``cases`` in order, streaming each record to ``run_file`` and ``store``.

    A ``KeyboardInterrupt`` ends the loop; the run is marked ``interrupted`` and everything already measured is
    kept. Store write errors are collected, not raised: the run file is the record of truth and can be ingested
    later. ``timer`` replaces the device's own (a distributed run passes a
    :class:`fp8bench.measure.lockstep.LockstepTimer`; its non-zero ranks pass ``run_file=None`` and no store).
    ``budget`` fits the run into a wall-clock budget (:mod:`fp8bench.measure.budget`; ``cases`` in its order).
    """
    threads = settings.threads_here()
    if threads:
        torch.set_num_threads(threads)
    run_id = run_id or new_run_id()
    started = time.monotonic()
    header = run_header(run_id, device, settings.device, settings, spec or {})
    # --lock-clocks: refused here, before anything is written, where it cannot lock; undone after the last case
    # (below), on Ctrl-C (caught below) and at interpreter exit after any other error (fp8bench.hardware.clocks).
    lock = lock_clocks(device, settings.clocks.lock)
    if lock is not None:
        header["clock_lock"] = lock.environment()
        header.setdefault("gpu", {})["clock_policy"] = locked_clock_policy(lock)
    if budget is not None:
        header["wall_budget"] = budget.header()
    run = StreamedRun(RecordStream(run_file, header, store), started)
    measurer = CaseMeasurer(settings, device, Peaks(device, header["device"]["name"], results_dir), timer=timer,
                            profiler=case_profiler(settings, run_file, results_dir, run_id),
                            locked_clock_mhz=lock.clock_mhz if lock is not None else None)
    stream_s = 0.0
    with run:
        ceilings_s = _cpu_ceilings(measurer, cases)
        for i, case in enumerate(cases):
            if settings.energy.cooldown_s and i > 0:
                time.sleep(settings.energy.cooldown_s)
            if on_start:
                on_start(i, case)
            record = _budgeted(measurer, case, i, budget)
            # the `fp8bench run` command of this one case
            record = replace(record, repro=repro_of(record, header))
            streamed = time.monotonic()
            run.stream.add(record)
            stream_s += time.monotonic() - streamed
            if budget is not None:
                budget.written(time.monotonic() - streamed)
            if on_record:
                on_record(i, case, record)
    if lock is not None:
        lock.reset()
    final = {"wall_budget": budget.header(final=True)} if budget is not None else {}
    harness = {**summarise(run.stream.records, stream_s), "ceilings_s": ceilings_s}
    run.finish(n_cases=len(cases), harness=harness, **final)
    return replace(run.outcome(run_id, run_file, store), harness=harness, wall_budget=final.get("wall_budget"))


def _cpu_ceilings(measurer: CaseMeasurer, cases: list[Case]) -> float:
    """Read or measure the CPU's ceilings before the first case, so that no case's wall time holds a cost of the
    run's (fp8bench.hardware.peaks caches them per host); seconds taken."""
    started = time.monotonic()
    if cases and measurer.peaks is not None and not measurer.device.is_cuda:
        measurer.peaks.cpu_ceilings()
    return time.monotonic() - started


class BudgetDecision(Protocol):
    """A wall budget's decision for one case: skip it (with ``reason``), or measure it under ``settings``."""

    @property
    def skip(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    @property
    def settings(self) -> RunSettings | None: ...


class RunBudget(Protocol):
    """What the runner asks of a run's wall budget (:class:`fp8bench.measure.budget.SuiteBudget`) around each case."""

    def decide(self, i: int, now: float | None = None) -> BudgetDecision: ...

    def done(self, i: int, decision: Any, wall_s: float) -> None: ...

    def annotate(self, record: Record, decision: Any) -> Record: ...

    def written(self, seconds: float) -> None: ...

    def header(self, final: bool = False) -> dict[str, Any]: ...


def _budgeted(measurer: CaseMeasurer, case: Case, seq: int, budget: RunBudget | None) -> Record:
    """The record of ``case``, measured under what ``budget`` decides for it (shortened settings, or skipped)."""
    if budget is None:
        return measurer.measure(case, seq=seq)
    started = time.monotonic()
    decision = budget.decide(seq, started)
    if decision.skip:
        record = measurer.skipped(case, seq, decision.reason)
    else:
        record = measurer.measure(case, seq=seq, settings=decision.settings)
    budget.done(seq, decision, time.monotonic() - started)
    return budget.annotate(record, decision)


class StreamedRun:
    """The one way a command that streams records ends: every verb that keeps records as they finish (``run``,
    sharded and distributed runs, ``converge``, ``selfcheck``) produces them inside ``with StreamedRun(stream):``,
    adding each to the :class:`fp8bench.results.record_stream.RecordStream`, then calls :meth:`finish`.

    The block ends early, without losing a record already added, on a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM
    and SIGHUP through :mod:`fp8bench.measure.interrupts`) or on :class:`fp8bench.results.record_stream.DiskFull`; any
    other exception propagates. :meth:`finish` then writes the final header with the status that says which it was.
    """

    def __init__(self, stream: RecordStream, started: float | None = None) -> None:
        self.stream = stream
        self.started = time.monotonic() if started is None else started  # the run's wall clock starts here
        self.interrupted_by: str | None = None  # SIGINT (Ctrl-C), SIGTERM or SIGHUP
        self.disk_full = False

    def __enter__(self) -> StreamedRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, KeyboardInterrupt):
            self.interrupted_by = getattr(exc, "signal_name", "SIGINT")
            return True
        if isinstance(exc, DiskFull):
            self.disk_full = True
            return True
        return False

    @property
    def interrupted(self) -> bool:
        return self.interrupted_by is not None

    @property
    def status(self) -> str:
        """The run header's final status: ``complete``, ``interrupted`` or ``failed: disk full``."""
        return STATUS_DISK_FULL if self.disk_full else "interrupted" if self.interrupted else "complete"

    def finish(self, **fields: Any) -> None:
        """Write the final header: the status, when it finished, how many records were kept, and ``fields``."""
        self.stream.finish(status=self.status, finished_at=datetime.now(timezone.utc).isoformat(),
                           n_records=len(self.stream.records), **fields)

    def outcome(self, run_id: str, run_file: Path | None, store: Any | None) -> RunOutcome:
        stream = self.stream
        return RunOutcome(run_id, stream.records, self.interrupted, run_file, getattr(store, "url", None),
                          stream.store_errors, time.monotonic() - self.started, stream.disk_error,
                          stream.file_complete or run_file is None, self.interrupted_by)


