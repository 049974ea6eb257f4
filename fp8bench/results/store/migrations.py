"""Migrations: every older schema of the store brought forward to this fp8bench's, one version step at a time.

:class:`fp8bench.results.store.database.Store` runs the steps of :data:`MIGRATIONS` inside one transaction under the
schema lock; a database written by a newer fp8bench is refused, never migrated backwards.

Schema history:


* 1: ``meta``, ``runs``, ``records``, ``gate_reports``.
* 2: ``records.comparability_key`` (:func:`fp8bench.core.comparability.key_string`), so that the gate and the dashboard
  can select comparable measurements in SQL; filled in for existing records by the migration.
* 3: typed columns for every record field that is read (:mod:`fp8bench.results.store.columns`: commit, branch and commit
  order, timing mode, accumulation, work and ceilings, energy, numerics, convergence verdict), the
  ``record_phases`` side table (one row per record and phase), ``runs.git_branch``, ``runs.commit_depth`` and
  ``runs.commit_time``, and indexes for the dashboard's filters and per-case history; back-filled from the record
  JSON by the migration. The record JSON (raw samples included, kilobytes per record) moves from ``records.data``
  to its own table, ``record_data``: a scan of the typed columns no longer reads past every record's JSON.
* 4: ``records.profile_trace`` (the path of a case's profile trace).
* 5: no new column. Records and run headers stored before the types of their fields were checked
  (:mod:`fp8bench.results.record_check`) are repaired: a field that no reader can take becomes null, with a note in the
  JSON's ``notes``, and the typed columns are written again from the repaired JSON.
* 6: ``records.host_median_s``, ``records.launch_overhead_s`` (host wall time per call and its excess over device
  time), ``records.sm_clock_mhz`` and ``records.timed_power_w`` (device state through the timed samples), for the
  Phases and History pages; the last two back-filled from the JSON of records that carry them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from fp8bench.core.records import load_record
from fp8bench.core.run_header import RunHeader, load_header
from fp8bench.results.record_check import describe, record_problems, repaired, run_problems
from fp8bench.results.runfile import REQUIRED_FIELDS
from fp8bench.results.store.columns import RECORD_COLUMNS, phase_rows, profile_trace_of, record_column_values
from fp8bench.results.store.rows import as_dict, check_values, insert_or_skip, record_row, run_columns
from fp8bench.results.store.tables import (
    legacy_records,
    record_data_table,
    record_phases_table,
    records_table,
    runs_table,
)


def has_v1_records(conn: sa.Connection) -> bool:
    return conn.execute(sa.select(sa.func.count()).select_from(runs_table)).scalar_one() > 0


def _migrate_1_to_2(conn: sa.Connection) -> None:
    """Add ``records.comparability_key`` and fill it from each record and its run header."""
    from fp8bench.core.comparability import comparability_key, key_string

    columns = {c["name"] for c in sa.inspect(conn).get_columns("records")}
    if "comparability_key" not in columns:
        conn.execute(sa.text("ALTER TABLE records ADD COLUMN comparability_key VARCHAR(32)"))
        conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_records_comparability_key "
                             "ON records (comparability_key)"))
    runs = {rid: _readable_run(data) for rid, data in conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data))}
    rows = conn.execute(sa.select(legacy_records.c.id, legacy_records.c.run_id, legacy_records.c.data)).all()
    for rec_id, run_id, data in rows:
        key = key_string(comparability_key(load_record(_readable_record(data)), runs.get(run_id) or RunHeader()))
        conn.execute(legacy_records.update().where(legacy_records.c.id == rec_id).values(comparability_key=key))


def add_missing_columns(conn: sa.Connection, table: sa.Table) -> list[str]:
    """``ALTER TABLE ... ADD COLUMN`` for every column of ``table``'s definition the database lacks; their names."""
    have = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
    added = []
    for column in table.columns:
        if column.name not in have:
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
            added.append(column.name)
    return added


# Rows back-filled per statement by the migration: bounded memory on a store of millions of records.
_MIGRATION_BATCH = 5000


def _migrate_2_to_3(conn: sa.Connection) -> None:
    """Add the typed record columns, the run columns and the phases table, fill them from the record JSON, and
    move the JSON from ``records.data`` to ``record_data``."""
    add_missing_columns(conn, runs_table)
    add_missing_columns(conn, records_table)
    record_phases_table.create(conn, checkfirst=True)
    record_data_table.create(conn, checkfirst=True)
    for index in records_table.indexes:
        index.create(conn, checkfirst=True)
    runs: dict[str, RunHeader] = {}
    for run_id, data in conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data)).all():
        runs[run_id] = run = _readable_run(data)
        typed = run_columns(run)
        conn.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(
            {name: typed[name] for name in ("git_branch", "commit_depth", "commit_time")}))
    update = records_table.update().where(records_table.c.id == sa.bindparam("record_id")).values(
        {c.name: sa.bindparam(c.name) for c in RECORD_COLUMNS})
    last_id = -1
    while True:
        batch = conn.execute(sa.select(legacy_records.c.id, legacy_records.c.run_id, legacy_records.c.data)
                             .where(legacy_records.c.id > last_id).order_by(legacy_records.c.id)
                             .limit(_MIGRATION_BATCH)).all()
        if not batch:
            break
        values, phases = [], []
        for rec_id, run_id, data in batch:
            record = load_record(_readable_record(data))
            values.append({"record_id": rec_id, **record_column_values(record, runs.get(run_id) or RunHeader())})
            phases.extend(phase_rows(rec_id, record))
        conn.execute(update, values)
        if phases:
            conn.execute(insert_or_skip(conn, record_phases_table, ["record_id", "phase"]), phases)
        last_id = batch[-1][0]
    conn.execute(record_data_table.insert().from_select(["record_id", "data"],
                                                        sa.select(legacy_records.c.id, legacy_records.c.data)))
    # SQLite rewrites the table without the column (3.35 and later), PostgreSQL drops it in place.
    conn.execute(sa.text("ALTER TABLE records DROP COLUMN data"))


def _migrate_3_to_4(conn: sa.Connection) -> None:
    """Add ``records.profile_trace`` and fill it for the records whose JSON carries a profile. Only a record with
    ``extra.profile`` can have one, so the JSON is searched as text in SQL and only those records are decoded."""
    add_missing_columns(conn, records_table)
    text = sa.cast(record_data_table.c.data, sa.Text)
    rows = conn.execute(sa.select(record_data_table.c.record_id, record_data_table.c.data)
                        .where(text.like('%"profile"%'))).all()
    for rec_id, data in rows:
        value = profile_trace_of(load_record(_readable_record(data)))
        if value is not None:
            conn.execute(records_table.update().where(records_table.c.id == rec_id).values(profile_trace=value))


REPAIRED_WHEN = "the store was migrated to schema 5"


def _checked(data: Any, problems_of: Callable[[dict[str, Any]], list[Any]]) -> tuple[dict[str, Any], bool]:
    """Stored JSON as an object with every field its readers cannot take set to null (and a note saying so), and
    whether anything was changed; see :mod:`fp8bench.results.record_check`."""
    value = as_dict(data)
    if not isinstance(value, dict):
        return {"notes": [f"the stored JSON was {describe(value)}, not an object; dropped when {REPAIRED_WHEN}"]}, True
    problems = problems_of(value)
    if not problems:
        return value, False
    return repaired(value, problems, REPAIRED_WHEN, required=REQUIRED_FIELDS), True


def _readable_record(data: Any) -> dict[str, Any]:
    return _checked(data, record_problems)[0]


def _readable_run(data: Any) -> RunHeader:
    """A stored header, fields its readers cannot take set to null (:mod:`fp8bench.results.record_check`), typed."""
    return load_header(_checked(data, run_problems)[0])


def _migrate_4_to_5(conn: sa.Connection) -> None:
    """Repair what older versions stored without checking its shape: a record or run header field of a type its
    readers cannot take (``phases`` as a list, ``numerics`` as text, a number as text, a shape of ``"64k"``)
    becomes null, with a note in the JSON's ``notes`` (:mod:`fp8bench.results.record_check`); the repaired records'
    typed columns and phases are written again from the repaired JSON. Every record's JSON is read once, in batches."""
    runs: dict[str, RunHeader] = {}
    unrepaired: set[str] = set()  # runs a problem of a required field was left in
    for run_id, data in conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data)).all():
        run, changed = _checked(data, run_problems)
        runs[run_id] = load_header(run)
        if changed:
            unrepaired.update([run_id] if run_problems(run) else [])
            # Every typed column but ``device``, which this repair never rewrote.
            run_cols = {k: v for k, v in run_columns(runs[run_id]).items() if k != "device"}
            conn.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(data=run, **run_cols))
    columns = [c.name for c in records_table.columns if c.name not in ("id", "run_id", "seq", "device_name")]
    update = records_table.update().where(records_table.c.id == sa.bindparam("record_id")).values(
        {name: sa.bindparam(name) for name in columns})
    last_id = -1
    while True:
        batch = conn.execute(
            sa.select(records_table.c.id, records_table.c.run_id, records_table.c.device_name, record_data_table.c.data)
            .join(record_data_table, record_data_table.c.record_id == records_table.c.id)
            .where(records_table.c.id > last_id).order_by(records_table.c.id).limit(_MIGRATION_BATCH)).all()
        if not batch:
            break
        last_id = batch[-1][0]
        for rec_id, run_id, device_name, data in batch:
            record, changed = _checked(data, record_problems)
            if not changed and run_id not in unrepaired:
                continue
            typed = load_record(record)
            row = record_row(run_id, typed, device_name, runs.get(run_id) or RunHeader())
            check_values(records_table, [row])
            conn.execute(update, [{"record_id": rec_id, **{name: row[name] for name in columns}}])
            conn.execute(record_data_table.update().where(record_data_table.c.record_id == rec_id)
                         .values(data=record))
            conn.execute(record_phases_table.delete().where(record_phases_table.c.record_id == rec_id))
            phases = phase_rows(rec_id, typed)
            if phases:
                conn.execute(record_phases_table.insert(), phases)


# The columns schema 6 adds; records stored before carry only the device state among them, in their telemetry.
_SCHEMA_6_COLUMNS = ("host_median_s", "launch_overhead_s", "sm_clock_mhz", "timed_power_w")


def _migrate_5_to_6(conn: sa.Connection) -> None:
    """Add the columns of :data:`_SCHEMA_6_COLUMNS` and fill them from the JSON of the records that can have a
    value (an SM clock or a power reading: only GPU records with telemetry), found as text in SQL."""
    add_missing_columns(conn, records_table)
    readers = {c.name: c.read for c in RECORD_COLUMNS if c.name in _SCHEMA_6_COLUMNS}
    text = sa.cast(record_data_table.c.data, sa.Text)
    rows = conn.execute(sa.select(record_data_table.c.record_id, record_data_table.c.data)
                        .where(sa.or_(text.like('%"sm_clock_mhz": %'), text.like('%"power_w"%')))).all()
    for rec_id, data in rows:
        record = load_record(_readable_record(data))
        values = {name: read(record, RunHeader()) for name, read in readers.items()}
        if any(v is not None for v in values.values()):
            conn.execute(records_table.update().where(records_table.c.id == rec_id).values(values))


def _migrate_6_to_7(conn: sa.Connection) -> None:
    """Add the index the sidebar's filter choices are grouped from (:data:`RECORD_INDEXES`)."""
    for index in records_table.indexes:
        if index.name == "ix_records_filter_options":
            index.create(conn, checkfirst=True)


# MIGRATIONS[n] takes a database from schema n to n + 1.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _migrate_1_to_2, 2: _migrate_2_to_3,
                                                          3: _migrate_3_to_4, 4: _migrate_4_to_5,
                                                          5: _migrate_5_to_6, 6: _migrate_6_to_7}
