"""The records an export takes: from run files (or pytest-benchmark JSON) or from a store, narrowed by the
dashboard's filters (:class:`fp8bench.results.store.queries.RecordFilter`: device, workload, backend, precision,
branch, and a run range that becomes run start times): as SQL on a store, the same rules in Python on files
(:func:`keeps`). Each record travels with the run header it came from (:class:`Row`).

The formats they are written in (CSV, Parquet, github-action-benchmark, Bencher) are :mod:`fp8bench.render.export`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8bench.core.records import Record, load_record
from fp8bench.core.run_header import RunHeader, load_header, payload_header, stored_schema_version

if TYPE_CHECKING:  # the store loads only when an export runs, not for `fp8bench --help`
    from fp8bench.results.store import Store
    from fp8bench.results.store.queries import RecordFilter


class ExportError(ValueError):
    """An export that cannot be made as asked (an unknown run or format, a format's missing library)."""


@dataclass(frozen=True)
class Row:
    """One record with the run header it came from; a stored record's JSON is read into its :class:`Record`."""

    run: RunHeader
    record: Record

    def __post_init__(self) -> None:
        if not isinstance(self.run, RunHeader):
            object.__setattr__(self, "run", load_header(self.run))
        if not isinstance(self.record, Record):
            object.__setattr__(self, "record", load_record(self.record))

    @property
    def device_label(self) -> str:
        """The device model (``NVIDIA H100 80GB HBM3``, the CPU's brand), else the device kind: the dashboard's
        device filter value."""
        return str(self.run.device.name or self.record.device)


def rows_from_payloads(payloads: Iterable[dict[str, Any]]) -> list[Row]:
    """Every record of the given run payloads, oldest run first."""
    ordered = sorted(((payload_header(p), p) for p in payloads), key=lambda pair: str(pair[0].started_at or ""))
    return [Row(header, load_record(r, p["schema_version"])) for header, p in ordered for r in p["records"]]


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
    rec, started = row.record, str(row.run.started_at or "")
    branch = row.run.git.branch
    return all((
        not flt.device or row.device_label in flt.device,
        not flt.workload or rec.workload in flt.workload,
        not flt.backend or rec.backend in flt.backend,
        not flt.precision or rec.precision in flt.precision,
        not flt.branch or branch in flt.branch,
        flt.started_from is None or started >= flt.started_from,
        flt.started_to is None or started <= flt.started_to,
    ))


def store_runs(store: Store) -> dict[str, RunHeader]:
    """Every run header in the store, by run id, oldest first."""
    runs = store.runs_frame()
    return {str(run_id): load_header(data if isinstance(data, dict) else json.loads(data or "{}"),
                                     stored_schema_version(version))
            for run_id, data, version in zip(runs["run_id"], runs["data"], runs["schema_version"], strict=True)}


def rows_from_store(store: Store, flt: RecordFilter, headers: Mapping[str, RunHeader]) -> list[Row]:
    """The records ``flt`` selects in a store (in SQL), with their run headers, oldest run first."""
    from fp8bench.results.store.queries import record_json, select_records

    picked = select_records(store, flt, columns=["id", "run_id"])
    full = record_json(store, [int(i) for i in picked["id"]])
    return [Row(headers.get(str(run_id), RunHeader(run_id=str(run_id))), load_record(full[int(i)]))
            for i, run_id in zip(picked["id"], picked["run_id"], strict=True) if int(i) in full]
