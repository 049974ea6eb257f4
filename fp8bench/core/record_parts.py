"""The typed parts of a record: what a case's numerics, output check, energy window, telemetry, timing outcome,
harness cost, phase statistics, delayed-scaling settings, samples, throughput and efficiency hold, each a frozen
dataclass with its units.

A record is stored as JSON (the run file, the store's record column), and each of these parts is one JSON object
in it (``"numerics": {...}``), read and written back as every stored object is (:mod:`fp8bench.core.parts`): a key
a record was written without reads as ``None``, and a stored record writes back the same bytes.

The values are JSON values as stored (an integer stays an integer), checked for their JSON type where records
enter (:mod:`fp8bench.results.record_check`).

Three more groups hold figures that a record stores as top-level keys, not as an object of their own (so records of
every schema keep one flat layout): :class:`SampleFigures` (the timed samples and their statistics),
:class:`Throughput` (work, rates and the device's ceilings) and :class:`Efficiency` (what the energy window gives per
call). They are plain frozen dataclasses; :mod:`fp8bench.core.records` says which stored key belongs to which group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from fp8bench.core.parts import Part


@dataclass(frozen=True)
class DelayedScaling(Part):
    """The delayed-scaling settings an ``fp8_delayed`` record was measured with; empty for other precisions."""

    what: ClassVar[str] = "delayed_scaling"
    amax_history_len: int | None = None  # iterations of amax history the scale is computed from
    amax_compute_algo: str | None = None  # "max" (of the history) | "most_recent"
    margin: int | None = None  # powers of two of headroom below the format's largest value


@dataclass(frozen=True)
class Numerics(Part):
    """Accuracy of the case's output against its FP64 reference (fp8bench.numerics.accuracy). ``sqnr_db`` is null
    for an exact match (JSON has no infinity; ``rel_err`` is then 0)."""

    what: ClassVar[str] = "numerics"
    sqnr_db: float | None = None  # signal-to-quantization-noise ratio, dB
    rel_err: float | None = None  # ||output - reference|| / ||reference||, a fraction
    max_abs_err: float | None = None  # largest |output - reference|, in the output's units
    overflow_frac: float | None = None  # share of elements past the FP8 format's largest value, 0..1
    underflow_frac: float | None = None  # share of non-zero elements flushed to zero by quantization, 0..1
    nonfinite_frac: float | None = None  # share of NaN/Inf output elements, 0..1


@dataclass(frozen=True)
class OutputCheck(Part):
    """The last timed call's output against a fresh call's (fp8bench.measure.output_check)."""

    what: ClassVar[str] = "output_check"
    method: str | None = None  # "bitwise" | "sqnr" | None (not checked)
    passed: bool | None = None  # None: the check did not apply (``reason`` says why)
    reason: str | None = None  # why it failed, or why it was not checked
    differing_frac: float | None = None  # share of elements whose bits differ (bitwise), 0..1
    sqnr_db: float | None = None  # timed output against the fresh one, dB (null: identical)
    threshold_db: float | None = None  # what ``sqnr_db`` had to reach, dB (sqnr)


@dataclass(frozen=True)
class EnergyResult(Part):
    """The energy window of the case (fp8bench.energy.meters.EnergyReading, as stored), or only a ``reason`` where
    no window ran. Joules and watts are null where the meter could not measure."""

    what: ClassVar[str] = "energy"
    method: str | None = None  # nvml_counter | nvml_power | rapl | none (null: interpreted, never metered)
    joules_per_iter: float | None = None  # J per end-to-end call (the subtracted window's difference, if any)
    avg_power_w: float | None = None  # W over the window
    window_s: float | None = None  # the window's length, s
    iterations: int | None = None  # calls in the window
    reason: str | None = None  # why joules are missing or approximate
    telemetry: dict[str, object] | None = None  # clocks, temperature, power through the window
    valid: bool | None = None  # False: the window was throttled (``invalid_reasons``)
    invalid_reasons: list[str] | None = None
    name: str | None = None  # "end_to_end", or the phase it metered
    window_j: float | None = None  # J over the whole window
    samples: int | None = None  # telemetry samples taken in the window
    idle_power_w: float | None = None  # W, the idle baseline measured before the run, if asked for
    joules_above_idle_per_iter: float | None = None  # J per call above the idle baseline
    phases: dict[str, object] | None = None  # phase -> its own reading (each phase looped alone)
    clock_notes: list[str] | None = None  # limiters seen that do not invalidate (power capping)
    counter_update_s: float | None = None  # the energy counter's measured update period, s
    error_bound: float | None = None  # bound of the window's relative quantization error, a fraction
    bound_scope: str | None = None  # what ``error_bound`` covers and leaves out
    start_temperature_c: int | None = None  # the GPU's temperature as the window began, degrees C
    cooldown_s: float | None = None  # s waited before the window for the GPU to cool
    matches_timing: bool | None = None  # whether the window ran the calls as the samples did (None: not compared)
    subtracted_what: str | None = None  # what the subtracted window (the samples' wrapping alone) ran
    subtracted_j: float | None = None  # J of the subtracted window
    subtracted_s: float | None = None  # s of the subtracted window
    subtracted_iterations: int | None = None
    subtracted_counter_changes: int | None = None  # counter steps seen at its chunk edges (a lower bound)

    @property
    def reasons(self) -> str | None:
        """Why the energy figure is missing or not to be trusted, in one line (``None``: nothing to say)."""
        return self.reason or "; ".join(self.invalid_reasons or []) or None


@dataclass(frozen=True)
class Telemetry(Part):
    """Device telemetry through the case (fp8bench.energy.telemetry): each a summary of clocks (MHz), temperature
    (degrees C), power (W) and throttle reasons, or a ``reason`` where none was taken."""

    what: ClassVar[str] = "telemetry"
    timing: dict[str, object] | None = None  # through the timed samples
    per_sample: dict[str, object] | None = None  # the SM clock and power beside each kept end-to-end sample
    energy: dict[str, object] | None = None  # through the energy window


@dataclass(frozen=True)
class TimingInfo(Part):
    """How the timing went (fp8bench.measure.runner): warm-up, the sampling policy's outcome and where the case's
    wall time went, in seconds. Which keys a record holds depends on how far the case got (a case skipped over
    budget has ``warmup_calls`` and ``last_call_s``, or ``estimated_call_s``)."""

    what: ClassVar[str] = "timing"
    warmup_s: float | None = None
    warmup_calls: int | None = None
    # What ended the warm-up: ``warmup_iters`` (its least calls), ``warmup_s`` (its longest time, a GPU's least) or
    # ``settled`` (two calls in a row agreed, on the CPU; fp8bench.measure.runner.WARMUP_SETTLED).
    warmup_stopped_by: str | None = None
    last_call_s: float | None = None  # the last warm-up call, when warm-up found the case over budget
    estimated_call_s: float | None = None  # the probe's estimate of one call, when it found the case over budget
    e2e_iqr_s: float | None = None  # end-to-end samples' interquartile range
    e2e_rsd: float | None = None  # their relative standard deviation, a fraction
    e2e_median_rse: float | None = None  # relative standard error of their median, a fraction
    e2e_stopped_by: str | None = None  # the sampling policy's stop rule that fired
    numerics_s: float | None = None  # checking numerics and the output
    timed_s: float | None = None  # inside timed samples
    graph_capture_s: float | None = None  # capturing CUDA graphs
    overhead_s: float | None = None  # the case's wall time outside warm-up and samples
    check_s: float | None = None  # an interpreted case's numerics check
    case_wall_s: float | None = None  # the whole case, probe to record
    mode: str | None = None  # the timing mode, in records written before ``Record.timing_mode``


@dataclass(frozen=True)
class HarnessCost(Part):
    """The harness's own cost of the case (fp8bench.measure.harness_cost), seconds."""

    what: ClassVar[str] = "harness"
    wall_s: float | None = None  # the case's wall time
    measured_s: float | None = None  # inside timed samples
    harness_s: float | None = None  # wall_s - measured_s
    share: float | None = None  # harness_s / wall_s, a fraction (null when wall_s is 0)
    split_s: dict[str, float] | None = None  # probe, setup, warmup, sampling, numerics, energy, bookkeeping -> s


@dataclass(frozen=True)
class PhaseStat(Part):
    """The samples of one phase (fp8bench.measure.timing.Samples.summary), seconds."""

    what: ClassVar[str] = "phase_stats"
    median_s: float | None = None
    iqr_s: float | None = None
    rsd: float | None = None  # relative standard deviation, a fraction
    n: int | None = None  # samples
    median_rse: float | None = None  # relative standard error of the median, a fraction
    stopped_by: str | None = None  # the sampling policy's stop rule that fired


@dataclass(frozen=True)
class SampleFigures:
    """The case's timed samples and their statistics (fp8bench.measure.timing), seconds unless named otherwise.

    On GPUs ``host_samples_s`` is the host wall time of each end-to-end sample (from before the call until its end
    event completed), ``host_median_s`` its median and ``launch_overhead_s`` that median less the device median
    (``median_s``); they are empty / ``None`` on the CPU, whose one clock is the host's."""

    samples_s: list[float] = field(default_factory=list)  # end-to-end samples
    median_s: float | None = None  # end-to-end median
    host_samples_s: list[float] = field(default_factory=list)
    host_median_s: float | None = None
    launch_overhead_s: float | None = None
    iqr_s: float | None = None  # interquartile range of the end-to-end samples
    rsd: float | None = None  # their relative standard deviation, a fraction
    n: int = 0  # end-to-end samples kept
    target_reached: bool | None = None  # whether the sampling policy's precision target was met
    prequant_median_s: float | None = None  # sum of the pre-quantized phases' medians
    phases: dict[str, float] = field(default_factory=dict)  # phase -> median seconds
    phase_stats: dict[str, PhaseStat] = field(default_factory=dict)  # phase -> its samples' summary
    # Median SM clock (MHz) through the timed samples; ``None`` where the device reports no clock (the CPU).
    sm_clock_mhz: float | None = None
    # Timed samples discarded because the SM clock read right after them was under the throttle threshold, and
    # retaken (fp8bench.hardware.clocks); ``None`` where no clock is read (the CPU). The clock and power beside each
    # kept end-to-end sample are in the record's ``telemetry.per_sample``.
    discarded_samples: int | None = None

    def __post_init__(self) -> None:
        stats = {} if self.phase_stats is None else self.phase_stats  # null: a repaired record, none kept
        if not isinstance(stats, Mapping):
            raise ValueError(f"record field 'phase_stats' is {type(stats).__name__}; accepted: an object of phases")
        if stats is not self.phase_stats or not all(isinstance(v, PhaseStat) for v in stats.values()):
            object.__setattr__(self, "phase_stats", {k: v if isinstance(v, PhaseStat) else PhaseStat.from_json(v)
                                                     for k, v in stats.items()})


@dataclass(frozen=True)
class Throughput:
    """The case's work and rates, and the device's ceilings they are read against (fp8bench.hardware.peaks)."""

    flops: int | None = None  # floating-point operations of one end-to-end call
    bytes: int | None = None  # the least bytes one call must move
    tflops: float | None = None  # end-to-end TFLOP/s
    prequant_tflops: float | None = None  # TFLOP/s over the pre-quantized phases alone
    gbps: float | None = None  # GB/s
    pct_of_peak: float | None = None  # end-to-end TFLOP/s as a percentage of the device's ceiling for this dtype
    peak_tflops: float | None = None  # that ceiling, TFLOP/s
    peak_source: str | None = None  # where the ceiling comes from (the peak table, a measurement)
    peak_mem_tbps: float | None = None  # the device's memory-bandwidth ceiling, TB/s (the roofline's slope)


@dataclass(frozen=True)
class Efficiency:
    """What the energy window gives per end-to-end call (the window itself is the record's ``energy`` part)."""

    energy_j: float | None = None  # joules per end-to-end iteration
    avg_power_w: float | None = None  # watts over the window
    tflops_per_w: float | None = None  # end-to-end TFLOP/s per watt
