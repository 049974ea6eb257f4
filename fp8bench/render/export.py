"""The export formats: records (:class:`fp8bench.results.export.Row`) as the bytes of CSV, Parquet,
github-action-benchmark or Bencher JSON, for the tools CI already reads.

* ``csv`` and ``parquet``: one row per record, every status included, flat columns (:data:`COLUMNS`; each phase's
  median as ``phase:NAME``). Times are seconds, energy joules per iteration, like the record's own fields. Parquet
  is written with pyarrow (the ``export`` extra). In CSV, a text cell that a spreadsheet would run as a formula
  (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is prefixed with ``'``.
* ``github-action-benchmark``: the input of benchmark-action/github-action-benchmark with
  ``tool: customSmallerIsBetter``: a JSON array of ``{"name", "unit", "value", "range", "extra"}`` entries, where
  ``name``, ``unit`` and ``value`` are required and ``range`` and ``extra`` are free text (``BenchmarkResult`` in
  the action's ``src/extract.ts``). The value is the chosen metric (:data:`SMALLER_IS_BETTER`): the end-to-end
  median in milliseconds by default, with half the interquartile range as ``range``.
* ``bencher``: Bencher Metric Format, ``{benchmark: {measure: {"value", "lower_value", "upper_value"}}}`` with only
  ``value`` required (https://bencher.dev/bmf.json). Measures: ``latency`` (Bencher's built-in measure, in
  nanoseconds: the median, bounded by the first and third quartiles of the raw samples), ``throughput-tflops``,
  ``energy-j`` (per iteration) and ``sqnr-db`` where the record has them; a measure Bencher does not know yet is
  created on first use.

The two benchmark formats take speed-comparable records only (:func:`fp8bench.analysis.selection.is_speed_comparable`:
measured, valid, not interpreted, with a median; an interpreter's time means nothing) and one per benchmark name:
the latest run's, since a tracker wants one value per benchmark in each report. A benchmark's name is the case key
(workload, shape, precision and format, backend, device kind) followed by the device model, so that results from
two GPU models never share a series.

Which records are exported (the source, the dashboard's filters) is :mod:`fp8bench.results.export`; where the bytes
go is the ``export`` verb's.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fp8bench.core.escaping import neutralize_formulas
from fp8bench.core.records import case_key
from fp8bench.core.shapes import label
from fp8bench.results.export import ExportError, Row

if TYPE_CHECKING:  # pandas loads only when an export runs, not for `fp8bench export --help`
    import pandas as pd

FORMATS = ("csv", "parquet", "github-action-benchmark", "bencher")

# Flat columns of the CSV and Parquet exports, in order; phases follow as phase:NAME columns.
COLUMNS = (
    "run_id", "started_at", "git_commit", "device_name", "case_key", "workload", "shape", "precision", "fp8_format",
    "accumulation", "backend", "device", "status", "reason", "valid", "interpreted", "n", "median_s", "iqr_s", "rsd",
    "prequant_median_s", "flops", "bytes", "tflops", "prequant_tflops", "gbps", "pct_of_peak", "energy_j",
    "avg_power_w", "tflops_per_w", "sqnr_db", "rel_err", "max_abs_err", "overflow_frac", "underflow_frac",
)
_NUMERICS = ("sqnr_db", "rel_err", "max_abs_err", "overflow_frac", "underflow_frac")

# github-action-benchmark metrics (smaller is better): record field -> (unit, multiplier from the field's unit).
SMALLER_IS_BETTER: dict[str, tuple[str, float]] = {
    "median_s": ("ms", 1e3), "prequant_median_s": ("ms", 1e3), "energy_j": ("J", 1.0)}


def flat(row: Row) -> dict[str, Any]:
    """One record as a flat row of :data:`COLUMNS` (and ``phase:NAME``)."""
    rec, run = row.record, row.run
    out: dict[str, Any] = {
        "run_id": run.run_id, "started_at": run.started_at, "git_commit": run.git.commit,
        "device_name": row.device_label,
        "case_key": case_key(rec), "shape": label(rec.shape or {}),
    }
    for name in COLUMNS:
        if name not in out:
            out[name] = getattr(rec.numerics, name) if name in _NUMERICS else rec.stored_value(name)
    for name, seconds in (rec.samples.phases or {}).items():
        out[f"phase:{name}"] = seconds
    return out


def to_frame(rows: Sequence[Row]) -> pd.DataFrame:
    import pandas as pd

    records = [flat(r) for r in rows]
    phases = sorted({k for r in records for k in r if k.startswith("phase:")})
    return pd.DataFrame(records, columns=[*COLUMNS, *phases])


def benchmark_name(row: Row) -> str:
    return f"{case_key(row.record)} [{row.device_label}]"


def latest_per_benchmark(rows: Sequence[Row]) -> list[Row]:
    """The latest speed-comparable row of each benchmark name (rows arrive oldest run first), in first-seen
    order."""
    # Function-local: the selection rules import pandas, which `fp8bench export --help` must not load.
    from fp8bench.analysis.selection import is_speed_comparable

    latest: dict[str, Row] = {}
    for row in rows:
        if is_speed_comparable(row.record, row.run):
            latest[benchmark_name(row)] = row
    return list(latest.values())


def github_action_benchmark(rows: Sequence[Row], metric: str = "median_s") -> list[dict[str, Any]]:
    """``customSmallerIsBetter`` entries for ``metric`` (a key of :data:`SMALLER_IS_BETTER`)."""
    unit, scale = SMALLER_IS_BETTER[metric]
    out = []
    for row in latest_per_benchmark(rows):
        rec = row.record
        value = rec.stored_value(metric)
        if value is None:
            continue
        entry: dict[str, Any] = {"name": benchmark_name(row), "unit": unit, "value": float(value) * scale}
        if metric == "median_s" and rec.samples.iqr_s is not None:
            entry["range"] = f"± {float(rec.samples.iqr_s) * scale / 2:.4g}"
        extra = [f"run {row.run.run_id}", f"n={rec.samples.n}"]
        if row.run.git.commit:
            extra.append(f"commit {row.run.git.commit[:12]}")
        if rec.numerics.sqnr_db is not None:
            extra.append(f"SQNR {rec.numerics.sqnr_db:.1f} dB")
        entry["extra"] = "\n".join(extra)
        out.append(entry)
    return out


def bencher_metric_format(rows: Sequence[Row]) -> dict[str, dict[str, dict[str, float]]]:
    """BMF JSON: each benchmark's ``latency`` (ns, quartile bounds), TFLOP/s, joules and SQNR where present."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in latest_per_benchmark(rows):
        rec = row.record
        measures: dict[str, dict[str, float]] = {}
        if rec.samples.median_s is not None:
            latency = {"value": float(rec.samples.median_s) * 1e9}
            samples = sorted(float(v) * 1e9 for v in rec.samples.samples_s)
            if len(samples) >= 2:
                q1, _median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
                latency.update(lower_value=q1, upper_value=q3)
            measures["latency"] = latency
        if rec.throughput.tflops is not None:
            measures["throughput-tflops"] = {"value": float(rec.throughput.tflops)}
        if rec.efficiency.energy_j is not None:
            measures["energy-j"] = {"value": float(rec.efficiency.energy_j)}
        sqnr = rec.numerics.sqnr_db
        if sqnr is not None and math.isfinite(sqnr):
            measures["sqnr-db"] = {"value": float(sqnr)}
        if measures:
            out[benchmark_name(row)] = measures
    return out


def render(rows: Sequence[Row], fmt: str, metric: str = "median_s") -> bytes:
    """The export of ``rows`` in ``fmt`` as bytes (UTF-8 text, or Parquet)."""
    if fmt == "csv":
        # Stored text that a spreadsheet would run as a formula is prefixed with ' (fp8bench.core.escaping).
        return neutralize_formulas(to_frame(rows)).to_csv(index=False).encode()
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401  (pandas writes Parquet through it)
        except ImportError as exc:
            raise ExportError("Parquet export needs pyarrow: pip install 'fp8bench[export]'") from exc
        buffer = io.BytesIO()
        to_frame(rows).to_parquet(buffer, engine="pyarrow", index=False)
        return buffer.getvalue()
    if fmt == "github-action-benchmark":
        entries = github_action_benchmark(rows, metric)
        return (json.dumps(entries, indent=1, allow_nan=False, ensure_ascii=False) + "\n").encode()
    if fmt == "bencher":
        return (json.dumps(bencher_metric_format(rows), indent=1, allow_nan=False) + "\n").encode()
    raise ExportError(f"unknown export format {fmt!r}; accepted: {', '.join(FORMATS)}")


def count(rows: Sequence[Row], fmt: str, metric: str = "median_s") -> int:
    """How many entries the export of ``rows`` holds (records for tables, benchmarks for trackers)."""
    if fmt in ("csv", "parquet"):
        return len(rows)
    if fmt == "github-action-benchmark":
        return len(github_action_benchmark(rows, metric))
    return len(bencher_metric_format(rows))
