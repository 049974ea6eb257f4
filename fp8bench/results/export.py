"""Export results for the tools CI already reads: CSV, Parquet, github-action-benchmark and Bencher.

Records come from run files (or pytest-benchmark JSON) or from a store, narrowed by the dashboard's filters
(:class:`fp8bench.results.store.queries.RecordFilter`: device, workload, backend, precision, branch, and a run range that
becomes run start times): as SQL on a store, the same rules in Python on files (:func:`keeps`). Four formats:

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

The two benchmark formats take speed-comparable records only (the rule of
:func:`fp8bench.analysis.selection.is_speed_comparable`, which the ``export`` verb passes in as ``comparable``: measured,
valid, not interpreted, with a median; an interpreter's time means nothing) and one per benchmark name: the latest run's, since a tracker wants one value per benchmark in
each report. A benchmark's name is the case key (workload, shape, precision and format, backend, device kind)
followed by the device model, so that results from two GPU models never share a series.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8bench.core.escaping import neutralize_formulas
from fp8bench.core.records import Record, case_key, load_record
from fp8bench.core.shapes import label

if TYPE_CHECKING:  # pandas and the store load only when an export runs, not for `fp8bench --help`
    import pandas as pd

    from fp8bench.results.store import Store
    from fp8bench.results.store.queries import RecordFilter

FORMATS = ("csv", "parquet", "github-action-benchmark", "bencher")
TEXT_FORMATS = ("csv", "github-action-benchmark", "bencher")

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


class ExportError(ValueError):
    """An export that cannot be made as asked (a format's missing library, an unwritable path)."""


# Which records a tracker may get, given a record and its run header: the speed-comparable rule
# (fp8bench.analysis.selection.is_speed_comparable, a layer above this one, so the verb passes it in).
Comparable = Callable[[Record, Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Row:
    """One record with the run header it came from; a stored record's JSON is read into its :class:`Record`."""

    run: dict[str, Any]
    record: Record

    def __post_init__(self) -> None:
        if not isinstance(self.record, Record):
            object.__setattr__(self, "record", load_record(self.record))

    @property
    def device_label(self) -> str:
        """The device model (``NVIDIA H100 80GB HBM3``, the CPU's brand), else the device kind: the dashboard's
        device filter value."""
        return str((self.run.get("device") or {}).get("name") or self.record.device)


def rows_from_payloads(payloads: Iterable[dict[str, Any]]) -> list[Row]:
    """Every record of the given run payloads, oldest run first."""
    ordered = sorted(payloads, key=lambda p: str(p["run"].get("started_at") or ""))
    return [Row(p["run"], load_record(r, p["schema_version"])) for p in ordered for r in p["records"]]


def run_range(started: Mapping[str, str], text: str | None) -> tuple[str | None, str | None]:
    """``FIRST..LAST`` (run ids, or one id) -> the start times bounding it; ``(None, None)`` for no range.

    ``started`` maps every run id of the source to its start time (ISO 8601). Unknown ids are refused by name."""
    if not text:
        return None, None
    first, sep, last = text.partition("..")
    if not first or (sep and not last):
        raise ExportError(f"--runs {text!r}: expected FIRST_RUN_ID..LAST_RUN_ID or one run id")
    ends = [first, last or first]
    unknown = [r for r in ends if r not in started]
    if unknown:
        raise ExportError(f"--runs {text!r}: no run {', '.join(map(repr, unknown))} in the source "
                          f"({len(started)} run(s))")
    lo, hi = sorted(started[r] for r in ends)
    return lo, hi


def keeps(flt: RecordFilter, row: Row) -> bool:
    """The store query's filter (:meth:`RecordFilter.conditions`) applied to a record read from a file."""
    rec, started = row.record, str(row.run.get("started_at") or "")
    branch = (row.run.get("git") or {}).get("branch")
    return all((
        not flt.device or row.device_label in flt.device,
        not flt.workload or rec.workload in flt.workload,
        not flt.backend or rec.backend in flt.backend,
        not flt.precision or rec.precision in flt.precision,
        not flt.branch or branch in flt.branch,
        flt.started_from is None or started >= flt.started_from,
        flt.started_to is None or started <= flt.started_to,
    ))


def store_runs(store: Store) -> dict[str, dict[str, Any]]:
    """Every run header in the store, by run id, oldest first."""
    runs = store.runs_frame()
    return {str(run_id): (data if isinstance(data, dict) else json.loads(data or "{}"))
            for run_id, data in zip(runs["run_id"], runs["data"], strict=True)}


def rows_from_store(store: Store, flt: RecordFilter, headers: Mapping[str, dict[str, Any]]) -> list[Row]:
    """The records ``flt`` selects in a store (in SQL), with their run headers, oldest run first."""
    from fp8bench.results.store.queries import record_json, select_records

    picked = select_records(store, flt, columns=["id", "run_id"])
    full = record_json(store, [int(i) for i in picked["id"]])
    return [Row(headers.get(str(run_id)) or {"run_id": run_id}, load_record(full[int(i)]))
            for i, run_id in zip(picked["id"], picked["run_id"], strict=True) if int(i) in full]


def flat(row: Row) -> dict[str, Any]:
    """One record as a flat row of :data:`COLUMNS` (and ``phase:NAME``)."""
    rec, run = row.record, row.run
    out: dict[str, Any] = {
        "run_id": run.get("run_id"), "started_at": run.get("started_at"),
        "git_commit": (run.get("git") or {}).get("commit"), "device_name": row.device_label,
        "case_key": case_key(rec), "shape": label(rec.shape or {}),
    }
    for name in COLUMNS:
        if name not in out:
            out[name] = getattr(rec.numerics, name) if name in _NUMERICS else getattr(rec, name)
    for name, seconds in (rec.phases or {}).items():
        out[f"phase:{name}"] = seconds
    return out


def to_frame(rows: Sequence[Row]) -> pd.DataFrame:
    import pandas as pd

    records = [flat(r) for r in rows]
    phases = sorted({k for r in records for k in r if k.startswith("phase:")})
    return pd.DataFrame(records, columns=[*COLUMNS, *phases])


def benchmark_name(row: Row) -> str:
    return f"{case_key(row.record)} [{row.device_label}]"


def latest_per_benchmark(rows: Sequence[Row], comparable: Comparable) -> list[Row]:
    """The latest row of each benchmark name whose record is ``comparable(record, run)`` (rows arrive oldest run
    first), in first-seen order."""
    latest: dict[str, Row] = {}
    for row in rows:
        if comparable(row.record, row.run):
            latest[benchmark_name(row)] = row
    return list(latest.values())


def github_action_benchmark(rows: Sequence[Row], metric: str = "median_s", *,
                            comparable: Comparable) -> list[dict[str, Any]]:
    """``customSmallerIsBetter`` entries for ``metric`` (a key of :data:`SMALLER_IS_BETTER`)."""
    unit, scale = SMALLER_IS_BETTER[metric]
    out = []
    for row in latest_per_benchmark(rows, comparable):
        rec = row.record
        value = getattr(rec, metric)
        if value is None:
            continue
        entry: dict[str, Any] = {"name": benchmark_name(row), "unit": unit, "value": float(value) * scale}
        if metric == "median_s" and rec.iqr_s is not None:
            entry["range"] = f"± {float(rec.iqr_s) * scale / 2:.4g}"
        extra = [f"run {row.run.get('run_id')}", f"n={rec.n}"]
        if (row.run.get("git") or {}).get("commit"):
            extra.append(f"commit {row.run['git']['commit'][:12]}")
        if rec.numerics.sqnr_db is not None:
            extra.append(f"SQNR {rec.numerics.sqnr_db:.1f} dB")
        entry["extra"] = "\n".join(extra)
        out.append(entry)
    return out


def bencher_metric_format(rows: Sequence[Row], *, comparable: Comparable) -> dict[str, dict[str, dict[str, float]]]:
    """BMF JSON: each benchmark's ``latency`` (ns, quartile bounds), TFLOP/s, joules and SQNR where present."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in latest_per_benchmark(rows, comparable):
        rec = row.record
        measures: dict[str, dict[str, float]] = {}
        if rec.median_s is not None:
            latency = {"value": float(rec.median_s) * 1e9}
            samples = sorted(float(v) * 1e9 for v in rec.samples_s or [])
            if len(samples) >= 2:
                q1, _median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
                latency.update(lower_value=q1, upper_value=q3)
            measures["latency"] = latency
        if rec.tflops is not None:
            measures["throughput-tflops"] = {"value": float(rec.tflops)}
        if rec.energy_j is not None:
            measures["energy-j"] = {"value": float(rec.energy_j)}
        sqnr = rec.numerics.sqnr_db
        if sqnr is not None and math.isfinite(sqnr):
            measures["sqnr-db"] = {"value": float(sqnr)}
        if measures:
            out[benchmark_name(row)] = measures
    return out


def render(rows: Sequence[Row], fmt: str, metric: str = "median_s", *, comparable: Comparable) -> bytes:
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
        return (json.dumps(github_action_benchmark(rows, metric, comparable=comparable), indent=1, allow_nan=False, ensure_ascii=False)
                + "\n").encode()
    if fmt == "bencher":
        return (json.dumps(bencher_metric_format(rows, comparable=comparable), indent=1, allow_nan=False) + "\n").encode()
    raise ExportError(f"unknown export format {fmt!r}; accepted: {', '.join(FORMATS)}")


def count(rows: Sequence[Row], fmt: str, metric: str = "median_s", *, comparable: Comparable) -> int:
    """How many entries the export of ``rows`` holds (records for tables, benchmarks for trackers)."""
    if fmt in ("csv", "parquet"):
        return len(rows)
    if fmt == "github-action-benchmark":
        return len(github_action_benchmark(rows, metric, comparable=comparable))
    return len(bencher_metric_format(rows, comparable=comparable))


def write(data: bytes, out: Path, overwrite: bool = False) -> None:
    """Write ``data`` to ``out`` atomically (a reader never sees half a file), never over a device, a FIFO or a
    link, nor over an existing file unless ``overwrite`` (:func:`fp8bench.results.runfile.write_user_file`)."""
    from fp8bench.results.runfile import write_user_file

    write_user_file(out, data, overwrite, what="the export")
