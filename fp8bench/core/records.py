"""Records: one immutable result per case, in the shape the run file, store, dashboard and gate share.

Status values: ``ok`` (measured), ``failed`` (the case raised), ``skipped`` (unsupported, unavailable, a shape rule,
or over its time budget; ``reason`` says which), ``invalid`` (measured, but the numbers must not be trusted: NaN or
Inf in the output, or a throttled device). Every record keeps its raw samples.

A record's nested objects are typed parts (:mod:`fp8bench.core.record_parts`: numerics, energy, output check,
telemetry, timing, harness cost, phase statistics, delayed-scaling settings); only ``extra``, what a workload or
plugin adds of its own, stays a plain JSON object. Stored records, from a run file of any schema or a store, become
:class:`Record` through one loader, :func:`load_record`, which says once what a record written before a field reads
as; readers use the typed fields instead of walking the JSON. Writing a loaded record back gives the JSON it was
read from (:meth:`Record.to_dict`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from fp8bench.core.record_parts import (
    DelayedScaling,
    EnergyResult,
    HarnessCost,
    Numerics,
    OutputCheck,
    Part,
    PhaseStat,
    Telemetry,
    TimingInfo,
)
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
    """One case's result. A field a stored record was written without (it predates the field) reads as its default
    (``None``, empty, an empty part) and is left out again when the record is written back (:func:`load_record`)."""

    workload: str
    shape: dict[str, int]
    precision: str
    backend: str
    device: str
    status: str
    reason: str | None = None
    fp8_format: str | None = None
    accumulation: str | None = None  # FP8 only: fast_forward (fast accumulation in the forward GEMM) | full
    # fp8_delayed only: the delayed-scaling settings the record was measured with. Empty for other precisions.
    delayed_scaling: DelayedScaling = field(default_factory=DelayedScaling)
    # The scale factors the library ran with (SCALE_FORMATS), stated by backends whose library can round them to
    # powers of two (te: Float8CurrentScaling, Float8BlockScaling). ``None`` elsewhere: fp8bench's own quantizers
    # always use FP32 scales. Enters the comparability key (fp8bench.core.comparability).
    scale_format: str | None = None
    samples_s: list[float] = field(default_factory=list)  # end-to-end samples, seconds
    median_s: float | None = None  # end-to-end median, seconds
    # GPUs: host wall time of each end-to-end sample (from before the call until its end event completed), its
    # median, and the launch overhead: that median less the device median (median_s), seconds. Empty / None on the
    # CPU (its one clock is the host's).
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
    phase_stats: dict[str, PhaseStat] = field(default_factory=dict)  # phase -> its samples' summary
    energy_j: float | None = None  # joules per end-to-end iteration
    avg_power_w: float | None = None
    tflops_per_w: float | None = None
    energy: EnergyResult = field(default_factory=EnergyResult)
    numerics: Numerics = field(default_factory=Numerics)
    # The last timed call's output against a fresh call's (fp8bench.measure.output_check).
    output_check: OutputCheck = field(default_factory=OutputCheck)
    # Device telemetry through the timed samples and the energy window.
    telemetry: Telemetry = field(default_factory=Telemetry)
    # Median SM clock (MHz) through the timed samples; ``None`` where the device reports no clock (the CPU).
    sm_clock_mhz: float | None = None
    # Timed samples discarded because the SM clock read right after them was under the throttle threshold, and
    # retaken (fp8bench.hardware.clocks); ``None`` where no clock is read (the CPU). The clock and power beside each
    # kept end-to-end sample are in ``telemetry.per_sample``.
    discarded_samples: int | None = None
    valid: bool = True
    interpreted: bool = False
    notes: list[str] = field(default_factory=list)
    timing: TimingInfo = field(default_factory=TimingInfo)  # warm-up, overhead, sampling policy outcome
    # The harness's own cost of this case (fp8bench.measure.harness_cost).
    harness: HarnessCost = field(default_factory=HarnessCost)
    # The timer that produced every figure of this record (samples, phases, energy per iteration), or that the run
    # used, for a record without figures: ``cpu`` (host clock), ``cuda_events`` (events around eager calls: launch
    # gaps included) or ``cuda_graph`` (events around replays of a captured CUDA graph: no launch gaps); see
    # fp8bench.measure.timing.
    timing_mode: str | None = None
    # Whether the device's L2 cache was flushed before each sample (outside the timed region; CUDA only, so always
    # False on the CPU).
    l2_flushed: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # position in the run
    # The ``fp8bench run`` command that measures this one case again (fp8bench.core.repro), written by the runner.
    # Left out of the run file while ``None`` (records of sharded runs, convergence and selfcheck cases): readers
    # derive it from the record and its run's settings.
    repro: str | None = None
    # The keys of the stored record this one was read from, in their order (``None``: built here), and those of its
    # keys that are no field (a plugin's, or a newer fp8bench's of the same schema), carried as stored; see to_dict.
    stored_keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False, kw_only=True)
    other: Mapping[str, object] = field(default_factory=dict, repr=False, kw_only=True)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"record status {self.status!r}; accepted: {', '.join(STATUSES)}")
        if self.scale_format is not None and self.scale_format not in SCALE_FORMATS:
            raise ValueError(f"record scale format {self.scale_format!r}; accepted: {', '.join(SCALE_FORMATS)}")
        if self.timing_mode is not None and self.timing_mode not in TIMING_MODES:
            raise ValueError(f"record timing mode {self.timing_mode!r}; accepted: {', '.join(TIMING_MODES)}")
        # A part given as its stored JSON object (a producer's dict, a stored record) becomes the typed part.
        for name, part in PARTS.items():
            value = getattr(self, name)
            if not isinstance(value, part):
                object.__setattr__(self, name, part.from_json(value))
        stats = {} if self.phase_stats is None else self.phase_stats  # null: a repaired record, none kept
        if not isinstance(stats, Mapping):
            raise ValueError(f"record field 'phase_stats' is {type(stats).__name__}; accepted: an object of phases")
        if stats is not self.phase_stats or not all(isinstance(v, PhaseStat) for v in stats.values()):
            object.__setattr__(self, "phase_stats", {k: v if isinstance(v, PhaseStat) else PhaseStat.from_json(v)
                                                     for k, v in stats.items()})

    def to_dict(self) -> dict[str, Any]:
        """The record as the run file and the store keep it (JSON values). A record read from storage writes its
        fields in the order and number it was stored with, and any field set since (a record written before a field
        existed stays without it); one built by the runner writes every field, ``repro`` only when it is set. Each
        part is written back as it was read (fp8bench.core.record_parts): a stored record gives the same JSON."""
        values = {name: _json_value(getattr(self, name)) for name in _FIELD_NAMES}
        if self.stored_keys is None:
            out = {k: v for k, v in values.items() if not (k == "repro" and v is None)}
        else:
            out = {k: values[k] if k in values else self.other[k] for k in self.stored_keys}
            out.update((k, v) for k, v in values.items() if k not in out and v != _DEFAULT_JSON[k])
        return copy.deepcopy(out)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """The record a :meth:`to_dict` gave: ``Record.from_dict(r.to_dict()) == r``. Fields it lacks take their
        defaults (records written before them); a key that is no field is refused by name, as is a missing
        identity field."""
        unknown = sorted(set(data) - _FIELD_SET)
        if unknown:
            raise ValueError(f"record has unknown field(s) {', '.join(map(repr, unknown))}; accepted: the fields "
                             f"of fp8bench.core.records.Record ({', '.join(sorted(_FIELD_NAMES))})")
        missing = [name for name in _IDENTITY if name not in data]
        if missing:
            raise ValueError(f"record lacks the field(s) {', '.join(map(repr, missing))}; every record names "
                             f"{', '.join(_IDENTITY)}")
        return cls(**data, stored_keys=tuple(data))

    @property
    def case_key(self) -> str:
        return case_key(self)


def _json_value(value: Any) -> Any:
    """A record field's value as JSON holds it: a part as its object, phase statistics as theirs."""
    if isinstance(value, Part):
        return value.to_json()
    if isinstance(value, dict) and value and all(isinstance(v, PhaseStat) for v in value.values()):
        return {k: v.to_json() for k, v in value.items()}
    return value


# The record's fields as stored, in the order a record is written, and each one's default as JSON.
_FIELD_NAMES = tuple(f.name for f in fields(Record) if f.name not in ("stored_keys", "other"))
_FIELD_SET = frozenset(_FIELD_NAMES)
_DEFAULT_JSON = {f.name: _json_value(f.default if f.default_factory is MISSING else f.default_factory())
                 for f in fields(Record) if f.name in _FIELD_NAMES}


# The fields with no default: what identifies a record's case and says what happened to it.
_IDENTITY = ("workload", "shape", "precision", "backend", "device", "status")

# The record's fields that hold a typed part, and the part (fp8bench.core.record_parts).
PARTS: dict[str, type[Part]] = {
    "delayed_scaling": DelayedScaling, "energy": EnergyResult, "numerics": Numerics, "output_check": OutputCheck,
    "telemetry": Telemetry, "timing": TimingInfo, "harness": HarnessCost}


# Precisions whose default is fast accumulation in the forward GEMM (``ScaledRecipe.fast_accum``); block-scaled
# recipes always accumulate in full precision, so "full" is their default and not a variant. A test keeps this list
# equal to the registry's (this module stays free of torch).
FAST_ACCUM_BY_DEFAULT = ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise")


def fields_of(record: Record | Mapping[str, Any], *names: str) -> list[Any]:
    """The named fields of a typed record or of a record's JSON object (a store frame's row holds only some; absent
    ones read as ``None``)."""
    if isinstance(record, Record):
        return [getattr(record, name) for name in names]
    return [record.get(name) for name in names]


def full_accum_variant(record: Record | Mapping[str, Any]) -> bool:
    """Whether ``record`` ran in full-precision accumulation where its recipe's default is fast accumulation."""
    accumulation, precision = fields_of(record, "accumulation", "precision")
    return accumulation == "full" and precision in FAST_ACCUM_BY_DEFAULT


def case_key(record: Record | Mapping[str, Any]) -> str:
    """Identity of a case across runs: workload, shape, precision (+format, + full accumulation when not the
    default fast-forward one), backend, device (+ ``cuda_graph`` when timed as CUDA-graph replays: a different
    measurement, never compared with eager timings; eager keys, and keys of records that predate the mode, are
    unchanged). A record's JSON object must hold the identity fields (a ``KeyError`` names the one it lacks)."""
    ident = ("workload", "shape", "precision", "backend", "device")
    workload, shape, precision, backend, device = (
        fields_of(record, *ident) if isinstance(record, Record) else [record[name] for name in ident])
    fp8_format, timing_mode = fields_of(record, "fp8_format", "timing_mode")
    fmt = f"/{fp8_format}" if fp8_format else ""
    accum = "/full-accum" if full_accum_variant(record) else ""
    graph = f" {timing_mode}" if timing_mode in SEPARATE_TIMING_MODES else ""
    return f"{workload}[{label(shape)}] {precision}{fmt}{accum} {backend} {device}{graph}"


# How a record of each run-file schema becomes one of the next (fp8bench/results/runfile.py). Schema 2 changed the
# file's layout (JSON Lines), not its records: a record of schema 1 is one of schema 2 as it stands. A schema that
# changes what a record holds adds its step here, and every reader gets it through :func:`load_record`.
_UPGRADES: dict[int, Callable[[Mapping[str, Any]], Mapping[str, Any]]] = {1: lambda record: record}


def load_record(data: Mapping[str, Any], schema_version: int = SCHEMA_VERSION) -> Record:
    """The typed record of a stored one: a record of a run file of ``schema_version`` (1 or 2), or the record JSON
    of a store row (stores keep records as the run file held them, at :data:`SCHEMA_VERSION`). Keys a record was
    written without read as ``None`` or empty (:meth:`Record.from_dict`, fp8bench.core.record_parts); keys that are
    no field are carried through (``Record.other``), where :meth:`Record.from_dict` refuses them. A schema
    newer than this fp8bench reads, or one that is no schema, is refused by name."""
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) or schema_version < 1:
        raise ValueError(f"record schema version {schema_version!r}; accepted: an integer from 1 to {SCHEMA_VERSION}")
    if schema_version > SCHEMA_VERSION:
        raise ValueError(f"record of schema version {schema_version}, newer than this fp8bench reads (1 to "
                         f"{SCHEMA_VERSION}); upgrade fp8bench to read it")
    for version in range(schema_version, SCHEMA_VERSION):
        data = _UPGRADES[version](data)
    other = {k: v for k, v in data.items() if k not in _FIELD_SET}
    if not other:
        return Record.from_dict(data)
    known = {k: v for k, v in data.items() if k in _FIELD_SET}
    return replace(Record.from_dict(known), stored_keys=tuple(data), other=other)
