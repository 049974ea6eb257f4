"""Records: one immutable result per case, in the shape the run file, store, dashboard and gate share.

Status values: ``ok`` (measured), ``failed`` (the case raised), ``skipped`` (unsupported, unavailable, a shape rule,
or over its time budget; ``reason`` says which), ``invalid`` (measured, but the numbers must not be trusted: NaN or
Inf in the output, or a throttled device). Every record keeps its raw samples.

A record holds what identifies its case (workload, shape, precision and recipe settings, backend, device, timing
mode), what happened (status, reason, validity, notes) and its figures in typed parts
(:mod:`fp8bench.core.record_parts`): ``samples`` (the timed samples and their statistics), ``throughput`` (work,
rates and ceilings), ``efficiency`` (per-call energy figures), ``energy`` (the window), ``numerics``,
``output_check``, ``telemetry``, ``timing`` (warm-up and where the case's time went) and ``harness`` (its own cost).
Only ``extra``, what a workload or plugin adds of its own, stays a plain JSON object.

Stored, a record is one flat JSON object (:data:`STORED_KEYS`): each of the nested parts is one object in it, and the
figures of ``samples``, ``throughput`` and ``efficiency`` are top-level keys, as every run file and store written so
far holds them. :meth:`Record.stored_value` reads one by its stored name, for readers that take a key (a column, an
export field). Stored records, from a run file of any schema or a store, become
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
    Efficiency,
    EnergyResult,
    HarnessCost,
    Numerics,
    OutputCheck,
    Part,
    PhaseStat,
    SampleFigures,
    Telemetry,
    Throughput,
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
    samples: SampleFigures = field(default_factory=SampleFigures)
    throughput: Throughput = field(default_factory=Throughput)
    efficiency: Efficiency = field(default_factory=Efficiency)
    energy: EnergyResult = field(default_factory=EnergyResult)
    numerics: Numerics = field(default_factory=Numerics)
    # The last timed call's output against a fresh call's (fp8bench.measure.output_check).
    output_check: OutputCheck = field(default_factory=OutputCheck)
    # Device telemetry through the timed samples and the energy window.
    telemetry: Telemetry = field(default_factory=Telemetry)
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

    def to_dict(self) -> dict[str, Any]:
        """The record as the run file and the store keep it (JSON values, one flat object: :data:`STORED_KEYS`). A
        record read from storage writes its keys in the order and number it was stored with, and any key set since
        (a record written before a key existed stays without it); one built by the runner writes every key,
        ``repro`` only when it is set. Each part is written back as it was read (fp8bench.core.record_parts): a
        stored record gives the same JSON."""
        values = {key: _json_value(self.stored_value(key)) for key in STORED_KEYS}
        if self.stored_keys is None:
            out = {k: v for k, v in values.items() if not (k == "repro" and v is None)}
        else:
            out = {k: values[k] if k in values else self.other[k] for k in self.stored_keys}
            out.update((k, v) for k, v in values.items() if k not in out and v != _DEFAULT_JSON[k])
        return copy.deepcopy(out)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """The record a :meth:`to_dict` gave: ``Record.from_dict(r.to_dict()) == r``. Keys it lacks take their
        defaults (records written before them); a key that is not one of :data:`STORED_KEYS` is refused by name, as
        is a missing identity key."""
        unknown = sorted(set(data) - _KEY_SET)
        if unknown:
            raise ValueError(f"record has unknown field(s) {', '.join(map(repr, unknown))}; accepted: the keys "
                             f"of a stored fp8bench.core.records.Record ({', '.join(sorted(STORED_KEYS))})")
        missing = [name for name in _IDENTITY if name not in data]
        if missing:
            raise ValueError(f"record lacks the field(s) {', '.join(map(repr, missing))}; every record names "
                             f"{', '.join(_IDENTITY)}")
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
        for key, value in data.items():
            group = _GROUP_OF.get(key)
            (top if group is None else grouped[group])[key] = value
        top.update((name, GROUPS[name](**values)) for name, values in grouped.items())
        return cls(**top, stored_keys=tuple(data))

    def stored_value(self, key: str) -> Any:
        """The value of the stored record's top-level key ``key`` (one of :data:`STORED_KEYS`), from the group
        that holds it (``"median_s"``: ``self.samples.median_s``)."""
        group = _GROUP_OF.get(key)
        return getattr(self, key) if group is None else getattr(getattr(self, group), key)

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


# The groups of figures stored as top-level keys (fp8bench.core.record_parts), by the record's field that holds each.
GROUPS: dict[str, type[SampleFigures] | type[Throughput] | type[Efficiency]] = {
    "samples": SampleFigures, "throughput": Throughput, "efficiency": Efficiency}
_GROUP_OF = {f.name: name for name, group in GROUPS.items() for f in fields(group)}

# The stored record's keys, in the order a record is written: the record's own fields (a part as one object) and
# its groups' fields, flat. The order is that of every run file and store written so far.
STORED_KEYS = (
    "workload", "shape", "precision", "backend", "device", "status", "reason", "fp8_format", "accumulation",
    "delayed_scaling", "scale_format", "samples_s", "median_s", "host_samples_s", "host_median_s",
    "launch_overhead_s", "iqr_s", "rsd", "n", "target_reached", "prequant_median_s", "flops", "bytes", "tflops",
    "prequant_tflops", "gbps", "pct_of_peak", "peak_tflops", "peak_source", "peak_mem_tbps", "phases", "phase_stats",
    "energy_j", "avg_power_w", "tflops_per_w", "energy", "numerics", "output_check", "telemetry", "sm_clock_mhz",
    "discarded_samples", "valid", "interpreted", "notes", "timing", "harness", "timing_mode", "l2_flushed", "extra",
    "seq", "repro")
_KEY_SET = frozenset(STORED_KEYS)


def key_owner(key: str) -> type:
    """The class whose field holds the stored key ``key``: :class:`Record`, or the group that holds it."""
    group = _GROUP_OF.get(key)
    return Record if group is None else GROUPS[group]


def _default_json(key: str) -> Any:
    found = next(f for f in fields(key_owner(key)) if f.name == key)
    return _json_value(found.default if found.default_factory is MISSING else found.default_factory())


_DEFAULT_JSON = {key: _default_json(key) for key in STORED_KEYS}


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
    """The values of the named stored keys (:data:`STORED_KEYS`) of a typed record or of a record's JSON object (a
    store frame's row holds only some; absent ones read as ``None``)."""
    if isinstance(record, Record):
        return [record.stored_value(name) for name in names]
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


def check_schema_version(schema_version: object, what: str) -> int:
    """``schema_version`` when this fp8bench reads ``what`` (a run header, a record) of it; a schema newer than
    this fp8bench, or one that is no schema, refused by name with what is accepted."""
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) or schema_version < 1:
        raise ValueError(f"{what} schema version {schema_version!r}; accepted: an integer from 1 to {SCHEMA_VERSION}")
    if schema_version > SCHEMA_VERSION:
        raise ValueError(f"{what} of schema version {schema_version}, newer than this fp8bench reads (1 to "
                         f"{SCHEMA_VERSION}); upgrade fp8bench to read it")
    return schema_version


def load_record(data: Mapping[str, Any], schema_version: int = SCHEMA_VERSION) -> Record:
    """The typed record of a stored one: a record of a run file of ``schema_version`` (1 or 2), or the record JSON
    of a store row (stores keep records as the run file held them, at :data:`SCHEMA_VERSION`). Keys a record was
    written without read as ``None`` or empty (:meth:`Record.from_dict`, fp8bench.core.record_parts); keys that are
    no field are carried through (``Record.other``), where :meth:`Record.from_dict` refuses them. A schema
    newer than this fp8bench reads, or one that is no schema, is refused by name."""
    for version in range(check_schema_version(schema_version, "record"), SCHEMA_VERSION):
        data = _UPGRADES[version](data)
    other = {k: v for k, v in data.items() if k not in _KEY_SET}
    if not other:
        return Record.from_dict(data)
    known = {k: v for k, v in data.items() if k in _KEY_SET}
    return replace(Record.from_dict(known), stored_keys=tuple(data), other=other)
