"""The store's typed record columns: every record field that a page, ``gate``, ``compare``, ``changes``, ``payoff``
or ``export`` reads, kept outside the record JSON so that reading it never decodes JSON.

A record's JSON holds everything, raw timing samples included (a few kilobytes each). Decoding 100,000 of them
to draw one heatmap is what made large stores slow, so from store schema 3 each field that is *read* is a column
written at insert (and back-filled by the migration from schema 2); the JSON stays the record of truth, read per
run on demand (``Store.run_payload``). Phase times live in a narrow side table, one row per record and phase,
because their names vary by workload (quantize/gemm/epilogue, forward/backward/optimizer, ...).

Adding a column is one line in :data:`RECORD_COLUMNS`: a name, a SQL type, and a function from ``(record, run
header)`` to the value. A new column needs a store schema version step that adds and back-fills it
(:func:`fp8bench.results.store.migrations.add_missing_columns` does both for any column listed here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from fp8bench.core.records import Record
from fp8bench.core.run_header import RunHeader

# A column's value from a record (a stored one: fp8bench.core.records.load_record) and its run's header.
Reader = Callable[[Record, RunHeader], Any]


@dataclass(frozen=True)
class RecordColumn:
    """One typed column of the ``records`` table: ``read(record, run)`` gives its value (``None`` when absent)."""

    name: str
    type: Any  # a SQLAlchemy type
    read: Reader
    doc: str


def _field(name: str) -> Reader:
    return lambda r, _run: r.stored_value(name)


def _git(name: str) -> Reader:
    return lambda _r, run: getattr(run.git, name)


def _convergence(name: str) -> Reader:
    def read(r: Record, _run: RunHeader) -> Any:
        verdict = (r.extra or {}).get("convergence")
        return verdict.get(name) if isinstance(verdict, dict) else None
    return read


def _timed_power(r: Record, _run: RunHeader) -> float | None:
    """The median power of the telemetry polled through the timed samples (``telemetry.timing.power_w.median``)."""
    timing = r.telemetry.timing
    power = timing.get("power_w") if isinstance(timing, dict) else None
    value = power.get("median") if isinstance(power, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _has_losses(r: Record, _run: RunHeader) -> bool:
    losses = (r.extra or {}).get("losses")
    return isinstance(losses, list) and bool(losses)


def _timing_mode(r: Record, _run: RunHeader) -> str | None:
    """How the samples were timed (eager launches, CUDA graph replay, ...); older records say nothing."""
    return r.timing_mode or r.timing.mode


def profile_trace_of(r: Record, _run: RunHeader | None = None) -> str | None:
    """Where the case's profile trace was written (``fp8bench run --profile``, :mod:`fp8bench.measure.profiling`)."""
    profile = (r.extra or {}).get("profile")
    trace = profile.get("trace") if isinstance(profile, dict) else None
    return str(trace) if trace else None


def _as_float(read: Reader) -> Reader:
    """Counts that can pass 2**63 (FLOPs of a large training step) are stored as floats."""
    def wrapped(r: Record, run: RunHeader) -> float | None:
        value = read(r, run)
        return None if value is None else float(value)
    return wrapped


# Columns added by store schema 3 (schemas 1 and 2 already had case_key, workload, shape, precision, fp8_format,
# backend, device, device_name, status, reason, median_s, prequant_median_s, tflops, prequant_tflops,
# pct_of_peak, energy_j, tflops_per_w, sqnr_db, rel_err, valid, interpreted and comparability_key).
RECORD_COLUMNS: tuple[RecordColumn, ...] = (
    # Where and from what: denormalized from the run header so that history and change queries need no join.
    RecordColumn("run_started_at", sa.String(40), lambda _r, run: run.started_at, "run start, ISO 8601"),
    RecordColumn("git_commit", sa.String(64), _git("commit"), "commit measured"),
    RecordColumn("git_branch", sa.String(200), _git("branch"), "branch of that commit"),
    RecordColumn("commit_depth", sa.Integer, _git("first_parent_depth"),
                 "commits on the branch's first-parent chain up to this one (orders commits)"),
    RecordColumn("commit_time", sa.String(40), _git("commit_time"), "committer date, ISO 8601"),
    # How it was timed.
    RecordColumn("timing_mode", sa.String(32), _timing_mode,
                 "cpu, cuda_events, cuda_graph or blocked_stream (fp8bench.measure.timing)"),
    RecordColumn("accumulation", sa.String(16), _field("accumulation"),
                 "FP8 accumulation: fast_forward (fast accumulation in the forward GEMM) or full"),
    RecordColumn("n", sa.Integer, _field("n"), "samples taken"),
    RecordColumn("iqr_s", sa.Float, _field("iqr_s"), "interquartile range of the samples, s"),
    RecordColumn("rsd", sa.Float, _field("rsd"), "relative spread of the median"),
    RecordColumn("target_reached", sa.Boolean, _field("target_reached"), "sampling reached its precision target"),
    # Work and ceilings.
    RecordColumn("flops", sa.Float, _as_float(_field("flops")), "floating-point operations per call"),
    RecordColumn("bytes", sa.Float, _as_float(_field("bytes")), "minimum bytes moved per call"),
    RecordColumn("gbps", sa.Float, _field("gbps"), "achieved GB/s"),
    RecordColumn("peak_tflops", sa.Float, _field("peak_tflops"), "device ceiling for this dtype, TFLOP/s"),
    RecordColumn("peak_source", sa.Text, _field("peak_source"), "where that ceiling comes from"),
    RecordColumn("peak_mem_tbps", sa.Float, _field("peak_mem_tbps"), "memory-bandwidth ceiling, TB/s"),
    # Energy.
    RecordColumn("avg_power_w", sa.Float, _field("avg_power_w"), "average power over the energy window, W"),
    RecordColumn("energy_method", sa.String(32), lambda r, _run: r.energy.method, "nvml, rapl, none, ..."),
    RecordColumn("energy_reason", sa.Text, lambda r, _run: r.energy.reasons, "why energy is missing or invalid"),
    # Numerics beyond SQNR and relative error.
    RecordColumn("max_abs_err", sa.Float, lambda r, _run: r.numerics.max_abs_err, "largest absolute error"),
    RecordColumn("overflow_frac", sa.Float, lambda r, _run: r.numerics.overflow_frac, "share saturated at the max"),
    RecordColumn("underflow_frac", sa.Float, lambda r, _run: r.numerics.underflow_frac, "share flushed to zero"),
    # Convergence (fp8bench converge): the verdict is typed; the loss curve stays in the JSON (has_losses says so).
    RecordColumn("has_losses", sa.Boolean, _has_losses, "the record carries a training-loss curve"),
    RecordColumn("conv_verdict", sa.String(20), _convergence("verdict"), "ok, gap or diverged"),
    RecordColumn("conv_final_gap", sa.Float, _convergence("final_gap"), "relative loss gap at the end"),
    RecordColumn("conv_max_gap", sa.Float, _convergence("max_gap"), "largest relative loss gap"),
    RecordColumn("conv_max_gap_step", sa.Integer, _convergence("max_gap_step"), "step of the largest gap"),
    RecordColumn("conv_window", sa.Integer, _convergence("window"), "smoothing window, steps"),
    # Store schema 6: host time and device state through the timed samples (GPUs; null on the CPU and before).
    RecordColumn("host_median_s", sa.Float, _field("host_median_s"), "median host wall time per call, s"),
    RecordColumn("launch_overhead_s", sa.Float, _field("launch_overhead_s"),
                 "host wall time beyond device time per call (launches, host work), s"),
    RecordColumn("sm_clock_mhz", sa.Float, _field("sm_clock_mhz"), "median SM clock through the timed samples, MHz"),
    RecordColumn("timed_power_w", sa.Float, _timed_power, "median power through the timed samples, W"),
    # Store schema 4: profiles on demand (fp8bench run --profile).
    RecordColumn("profile_trace", sa.Text, profile_trace_of, "path of the case's torch.profiler trace (Chrome JSON)"),
)


def record_column_values(record: Record, run: RunHeader) -> dict[str, Any]:
    """Every typed column's value for one record of the run whose header is ``run``."""
    return {c.name: c.read(record, run) for c in RECORD_COLUMNS}


def phase_rows(record_id: int, record: Record) -> list[dict[str, Any]]:
    """Rows of the ``record_phases`` side table: one per timed phase, median seconds."""
    phases = record.samples.phases or {}
    return [{"record_id": record_id, "phase": str(name), "median_s": None if value is None else float(value)}
            for name, value in phases.items()]
