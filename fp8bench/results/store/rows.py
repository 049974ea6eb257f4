"""Records and run headers as table rows: the typed columns of a record, values checked against their columns
before a write (a driver's error on one bad value would name the whole batch), and the idempotent insert.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np
import sqlalchemy as sa

from fp8bench.core.records import Record, case_key
from fp8bench.core.run_header import RunHeader
from fp8bench.core.shapes import label
from fp8bench.results.errors import StoreError
from fp8bench.results.record_check import describe
from fp8bench.results.store.columns import record_column_values


def insert_or_skip(conn: sa.Connection, table: sa.Table, keys: list[str]) -> Any:
    """``INSERT ... ON CONFLICT (keys) DO NOTHING`` in the connection's dialect."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing(index_elements=keys)
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing(index_elements=keys)
    raise StoreError(f"unsupported database dialect {conn.dialect.name}")  # pragma: no cover


# sa.Integer is INTEGER, four bytes, on PostgreSQL; sa.BigInteger is eight.
_INTEGER_RANGE = {sa.Integer: (-2**31, 2**31 - 1), sa.BigInteger: (-2**63, 2**63 - 1)}


def check_values(table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Refuse a value its column cannot hold, naming the column, on every database alike: PostgreSQL refuses text in
    a number column, an integer beyond its column's range and a too-long text with a parameter dump, where SQLite
    would keep them (and Python's sqlite3 cannot pass an integer beyond 64 bits at all). An integer for a float
    column is converted to float, as PostgreSQL would."""
    for column in table.columns:
        kind = column.type
        if isinstance(kind, sa.JSON):
            continue
        for row in rows:
            value = row.get(column.name)
            if value is None:
                continue
            where = f"{table.name}.{column.name}"
            if isinstance(kind, sa.String):
                if not isinstance(value, str):
                    raise StoreError(f"{where} is {describe(value)}; the store keeps text there")
                if kind.length and len(value) > kind.length:
                    raise StoreError(f"{where} {value[:40]!r}... is {len(value)} characters long; the store keeps "
                                     f"at most {kind.length}")
            elif isinstance(kind, sa.Boolean):
                if not isinstance(value, bool | np.bool_):
                    raise StoreError(f"{where} is {describe(value)}; the store keeps true or false there")
            elif isinstance(kind, sa.Integer):
                low, high = _INTEGER_RANGE[sa.BigInteger if isinstance(kind, sa.BigInteger) else sa.Integer]
                if isinstance(value, float) and value.is_integer():
                    value = row[column.name] = int(value)
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= int(value) <= high:
                    raise StoreError(f"{where} is {describe(value)}; the store keeps an integer from {low} to "
                                     f"{high} there")
            elif isinstance(kind, sa.Float):
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise StoreError(f"{where} is {describe(value)}; the store keeps a number there")
                try:
                    row[column.name] = float(value)
                except OverflowError as exc:
                    raise StoreError(f"{where} is {describe(value)}, beyond any floating-point number") from exc


# What makes two records the same case, as columns written alike by every schema version.
IDENTITY_COLUMNS = ("workload", "shape", "precision", "fp8_format", "backend", "device")


def record_seq(record: dict[str, Any]) -> int:
    """A record's position in its run, part of its identity in the store; a record without one is 0."""
    return int(record.get("seq") or 0)


def run_progress(run: RunHeader) -> tuple[bool, bool, int]:
    """How far along a run header is: finished, then complete, then how many records it counts. A stored header is
    replaced only by one further along, so a partial copy of a run never rewinds it."""
    n_records = run.n_records
    return (run.finished, run.status == "complete",
            n_records if isinstance(n_records, int) and not isinstance(n_records, bool) else 0)


def run_columns(run: RunHeader) -> dict[str, Any]:
    """The ``runs`` table's typed columns of a run header (beside its id, source, schema and JSON)."""
    return {"started_at": run.started_at, "finished_at": run.finished_at, "status": run.status,
            "git_commit": run.git.commit, "git_dirty": run.git.dirty, "git_branch": run.git.branch,
            "commit_depth": run.git.first_parent_depth, "commit_time": run.git.commit_time,
            "host": run.host.alias, "device": run.device_spec, "device_name": run.device.name}


def same_seq(run_id: str, seq: int, first: str, second: str, stored: bool = False) -> str:
    where = "is stored as" if stored else "is"
    return (f"run {run_id}: the record at seq {seq} {where} {first} and again {second}; a record is identified "
            "by its run and seq, so two records cannot share one (was the run file edited, or two runs given one "
            "run id?); nothing of this file was stored")


def as_dict(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else value


def record_row(run_id: str, rec: Record, device_name: str | None, run: RunHeader) -> dict[str, Any]:
    """The ``records`` table's row of a record (a stored one: :func:`fp8bench.core.records.load_record`) of run
    ``run_id``, whose header is ``run``."""
    from fp8bench.core.comparability import comparability_key, key_string

    return {"run_id": run_id, "seq": int(rec.seq or 0), "case_key": case_key(rec), "workload": rec.workload,
            "shape": label(rec.shape), "precision": rec.precision,
            "fp8_format": rec.fp8_format, "backend": rec.backend, "device": rec.device,
            "device_name": device_name, "status": rec.status, "reason": rec.reason,
            "median_s": rec.samples.median_s, "prequant_median_s": rec.samples.prequant_median_s,
            "tflops": rec.throughput.tflops, "prequant_tflops": rec.throughput.prequant_tflops,
            "pct_of_peak": rec.throughput.pct_of_peak, "energy_j": rec.efficiency.energy_j,
            "tflops_per_w": rec.efficiency.tflops_per_w, "sqnr_db": rec.numerics.sqnr_db,
            "rel_err": rec.numerics.rel_err, "valid": rec.valid, "interpreted": rec.interpreted,
            "comparability_key": key_string(comparability_key(rec, run)), **record_column_values(rec, run)}
