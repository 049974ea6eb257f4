"""Records: one immutable result per case, in the shape the run file, store, dashboard and gate share.

Status values: ``ok`` (measured), ``failed`` (the case raised), ``skipped`` (unsupported, unavailable, a shape rule,
or over its time budget; ``reason`` says which), ``invalid`` (measured, but the numbers must not be trusted: NaN or
Inf in the output, or a throttled device). Every record keeps its raw samples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fp8bench.core.shapes import label

# The run file's schema: 1, one JSON document rewritten after each record; 2, JSON Lines appended to
# (fp8bench/results/runfile.py). Records and run headers are the same in both; readers take either.
SCHEMA_VERSION = 2

STATUSES = ("ok", "failed", "skipped", "invalid")
# How an FP8 recipe's FP32 scale factors are formed (``Record.scale_format``): ``fp32``, any FP32 value (amax / the
# format's largest value, fp8bench's definition of its per-tensor, per-row and per-block recipes), or ``pow2``,
# rounded to a power of two (Transformer Engine's block-scaling default, kernels/te_backend.py).
SCALE_FP32, SCALE_POW2 = "fp32", "pow2"
SCALE_FORMATS = (SCALE_FP32, SCALE_POW2)
# Values of ``Record.timing_mode`` (fp8bench.measure.timing.TimingMode, kept free of torch here).
TIMING_MODES = ("cpu", "cuda_events", "cuda_graph", "blocked_stream")
# Modes whose figures are a different measurement from eager ``cuda_events`` ones (no launch gaps): their records
# carry the mode in the case key and the comparability key, and a label beside the device name on every page.
# ``cpu`` and ``cuda_events`` keys stay as they were before modes were recorded.
SEPARATE_TIMING_MODES = {"cuda_graph": "CUDA graph", "blocked_stream": "blocked stream"}


@dataclass(frozen=True)
class Record:
    workload: str
    shape: dict[str, int]
    precision: str
    backend: str
    device: str
    status: str
    reason: str | None = None
    fp8_format: str | None = None
    accumulation: str | None = None  # FP8 only: fast_forward (fast accumulation in the forward GEMM) | full
    # fp8_delayed only: the delayed-scaling settings the record was measured with: amax_history_len (iterations),
    # amax_compute_algo ("max" | "most_recent"), margin (powers of two of headroom). Empty for other precisions.
    delayed_scaling: dict[str, Any] = field(default_factory=dict)
    # The scale factors the library ran with (SCALE_FORMATS), stated by backends whose library can round them to
    # powers of two (te: Float8CurrentScaling, Float8BlockScaling). ``None`` elsewhere: fp8bench's own quantizers
    # always use FP32 scales. Enters the comparability key (fp8bench.core.comparability).
    scale_format: str | None = None
    samples_s: list[float] = field(default_factory=list)  # end-to-end samples, seconds
    median_s: float | None = None  # end-to-end median, seconds
    # GPUs: host wall time of each end-to-end sample (from before the call until its end event completed), its
    # median, and the launch overhead: that median less the device median (median_s), seconds. Empty / None on the
    # CPU (its one clock is the host's) and in records written before they were recorded.
    host_samples_s: list[float] = field(default_factory=list)
    host_median_s: float | None = None
    launch_overhead_s: float | None = None
    iqr_s: float | None = None
    rsd: float | None = None
    n: int = 0
    target_reached: bool | None = None
    prequant_median_s: float | None = None  # sum of the pre-quantized phases' medians
    flops: int | None = None
    bytes: int | None = None
    tflops: float | None = None  # end-to-end
    prequant_tflops: float | None = None
    gbps: float | None = None
    pct_of_peak: float | None = None  # end-to-end TFLOP/s as a percentage of the device's ceiling for this dtype
    peak_tflops: float | None = None
    peak_source: str | None = None
    peak_mem_tbps: float | None = None  # the device's memory-bandwidth ceiling, TB/s (the roofline's slope)
    phases: dict[str, float] = field(default_factory=dict)  # phase -> median seconds
    phase_stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    energy_j: float | None = None  # joules per end-to-end iteration
    avg_power_w: float | None = None
    tflops_per_w: float | None = None
    energy: dict[str, Any] = field(default_factory=dict)
    numerics: dict[str, Any] = field(default_factory=dict)
    # The last timed call's output against a fresh call's (fp8bench.measure.output_check): method (bitwise | sqnr |
    # None), passed (None: not checked, with the reason), differing_frac, sqnr_db, threshold_db. Empty in records
    # written before it.
    output_check: dict[str, Any] = field(default_factory=dict)
    # Device telemetry through the case: ``timing`` (the timed samples) and ``energy`` (the energy window), each a
    # summary of clocks, temperature, power and throttle reasons, or a ``reason`` where none was taken.
    telemetry: dict[str, Any] = field(default_factory=dict)
    # Median SM clock (MHz) through the timed samples; ``None`` where the device reports no clock (the CPU) and in
    # records written before it.
    sm_clock_mhz: float | None = None
    # Timed samples discarded because the SM clock read right after them was under the throttle threshold, and
    # retaken (fp8bench.hardware.clocks); ``None`` where no clock is read (the CPU) and in records written before
    # it. The clock and power beside each kept end-to-end sample are in ``telemetry.per_sample``.
    discarded_samples: int | None = None
    valid: bool = True
    interpreted: bool = False
    notes: list[str] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)  # warm-up, overhead, sampling policy outcome
    # The harness's own cost of this case (fp8bench.measure.harness_cost): wall_s, measured_s (inside timed
    # samples), harness_s (the difference), share (of wall_s) and split_s (probe, setup, warmup, sampling,
    # numerics, energy, bookkeeping), seconds. Empty in records written before it.
    harness: dict[str, Any] = field(default_factory=dict)
    # The timer that produced every figure of this record (samples, phases, energy per iteration), or that the run
    # used, for a record without figures: ``cpu`` (host clock), ``cuda_events`` (events around eager calls: launch
    # gaps included) or ``cuda_graph`` (events around replays of a captured CUDA graph: no launch gaps); see
    # fp8bench.measure.timing. ``None`` in records written before it.
    timing_mode: str | None = None
    # Whether the device's L2 cache was flushed before each sample (outside the timed region; CUDA only, so always
    # False on the CPU). ``None`` in records written before it.
    l2_flushed: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # position in the run
    # The ``fp8bench run`` command that measures this one case again (fp8bench.core.repro), written by the runner.
    # Left out of the run file while ``None`` (records of sharded runs, convergence and selfcheck cases, and those
    # written before it): readers derive it from the record and its run's settings.
    repro: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"record status {self.status!r}; accepted: {', '.join(STATUSES)}")
        if self.scale_format is not None and self.scale_format not in SCALE_FORMATS:
            raise ValueError(f"record scale format {self.scale_format!r}; accepted: {', '.join(SCALE_FORMATS)}")
        if self.timing_mode is not None and self.timing_mode not in TIMING_MODES:
            raise ValueError(f"record timing mode {self.timing_mode!r}; accepted: {', '.join(TIMING_MODES)}")

    def to_dict(self) -> dict[str, Any]:
        """The record as the run file and the store keep it (JSON values); ``repro`` only when it is set."""
        out = asdict(self)
        if out["repro"] is None:
            del out["repro"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """The record a :meth:`to_dict` gave: ``Record.from_dict(r.to_dict()) == r``. Fields it lacks take their
        defaults (records written before them); a key that is no field is refused by name, as is a missing
        identity field."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"record has unknown field(s) {', '.join(map(repr, unknown))}; "
                             f"accepted: the fields of fp8bench.core.records.Record ({', '.join(sorted(names))})")
        missing = [name for name in _IDENTITY if name not in data]
        if missing:
            raise ValueError(f"record lacks the field(s) {', '.join(map(repr, missing))}; every record names "
                             f"{', '.join(_IDENTITY)}")
        return cls(**data)

    @property
    def case_key(self) -> str:
        return case_key(self.to_dict())


# The fields with no default: what identifies a record's case and says what happened to it.
_IDENTITY = ("workload", "shape", "precision", "backend", "device", "status")


# Precisions whose default is fast accumulation in the forward GEMM (``ScaledRecipe.fast_accum``); block-scaled
# recipes always accumulate in full precision, so "full" is their default and not a variant. A test keeps this list
# equal to the registry's (this module stays free of torch).
FAST_ACCUM_BY_DEFAULT = ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise")


def full_accum_variant(record: dict[str, Any]) -> bool:
    """Whether ``record`` ran in full-precision accumulation where its recipe's default is fast accumulation."""
    return record.get("accumulation") == "full" and record.get("precision") in FAST_ACCUM_BY_DEFAULT


def case_key(record: dict[str, Any]) -> str:
    """Identity of a case across runs: workload, shape, precision (+format, + full accumulation when not the
    default fast-forward one), backend, device (+ ``cuda_graph`` when timed as CUDA-graph replays: a different
    measurement, never compared with eager timings; eager keys, and keys of records that predate the mode, are
    unchanged)."""
    shape = label(record["shape"])
    fmt = f"/{record['fp8_format']}" if record.get("fp8_format") else ""
    accum = "/full-accum" if full_accum_variant(record) else ""
    graph = f" {record['timing_mode']}" if record.get("timing_mode") in SEPARATE_TIMING_MODES else ""
    return (f"{record['workload']}[{shape}] {record['precision']}{fmt}{accum} {record['backend']} "
            f"{record['device']}{graph}")
