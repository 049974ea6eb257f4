"""The results store: one schema behind a small API, SQLite by default and PostgreSQL by URL.

Run files stay the interchange format; the store indexes their records for the dashboard and the gate. Every
write is idempotent: a run is keyed by its ``run_id`` and a record by ``(run_id, seq)``, and inserts skip rows that
exist (``INSERT ... ON CONFLICT DO NOTHING`` on both databases), so ingesting the same run twice, or two writers
racing on one run, stores it once. Queries return pandas DataFrames.

The store records its schema version in a ``meta`` table. Opening an older database migrates it forward, one
version step at a time, inside a transaction; a database written by a newer fp8bench is refused with a message
naming both versions (an old reader would silently drop the columns it does not know). Schema setup holds a lock
(``pg_advisory_xact_lock`` on PostgreSQL, an exclusive ``flock`` on a ``.lock`` file beside an SQLite database), so
several processes opening a new or old database at once create or migrate it exactly once.

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

import contextlib
import fcntl
import json
import numbers
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fp8bench.core.records import SCHEMA_VERSION, case_key
from fp8bench.core.redact import redact
from fp8bench.core.shapes import label
from fp8bench.results.errors import StoreError
from fp8bench.results.record_check import describe, record_problems, repaired, run_problems
from fp8bench.results.runfile import REQUIRED_FIELDS, json_safe
from fp8bench.results.store.columns import RECORD_COLUMNS, phase_rows, profile_trace_of, record_column_values

STORE_SCHEMA_VERSION = 7
DEFAULT_DB_NAME = "fp8bench.sqlite"


metadata = sa.MetaData()

meta_table = sa.Table("meta", metadata, sa.Column("key", sa.String(64), primary_key=True),
                      sa.Column("value", sa.Text, nullable=False))

runs_table = sa.Table(
    "runs", metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("started_at", sa.String(40)),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("status", sa.String(20)),
    sa.Column("git_commit", sa.String(64)),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("host", sa.String(128)),
    sa.Column("device", sa.String(32)),
    sa.Column("device_name", sa.String(128)),
    sa.Column("source", sa.String(32)),  # fp8bench | pytest-benchmark
    sa.Column("schema_version", sa.Integer),
    sa.Column("data", sa.JSON),
    sa.Column("git_branch", sa.String(200), index=True),  # schema 3
    sa.Column("commit_depth", sa.Integer),  # schema 3: first-parent depth of git_commit
    sa.Column("commit_time", sa.String(40)),  # schema 3
)

records_table = sa.Table(
    "records", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("case_key", sa.String(400), index=True),
    sa.Column("workload", sa.String(40)),
    sa.Column("shape", sa.String(200)),
    sa.Column("precision", sa.String(40)),
    sa.Column("fp8_format", sa.String(10)),
    sa.Column("backend", sa.String(40)),
    sa.Column("device", sa.String(32)),
    sa.Column("device_name", sa.String(128)),
    sa.Column("status", sa.String(10)),
    sa.Column("reason", sa.Text),
    sa.Column("median_s", sa.Float),
    sa.Column("prequant_median_s", sa.Float),
    sa.Column("tflops", sa.Float),
    sa.Column("prequant_tflops", sa.Float),
    sa.Column("pct_of_peak", sa.Float),
    sa.Column("energy_j", sa.Float),
    sa.Column("tflops_per_w", sa.Float),
    sa.Column("sqnr_db", sa.Float),
    sa.Column("rel_err", sa.Float),
    sa.Column("valid", sa.Boolean),
    sa.Column("interpreted", sa.Boolean),
    sa.Column("comparability_key", sa.String(32), index=True),  # schema 2
    *[sa.Column(c.name, c.type) for c in RECORD_COLUMNS],  # schema 3 (profile_trace: schema 4)
    sa.UniqueConstraint("run_id", "seq", name="uq_records_run_seq"),
)

# Schema 3 indexes: a case's history in time order, covering what the latest-record-per-case query reads (so that
# query scans the index, not the table: fp8bench.results.store.queries.latest_records), the run-range filter, and the
# sidebar's list filters.
RECORD_INDEXES = {
    "ix_records_case_history": ("case_key", "device_name", "device", "run_started_at", "seq", "status", "valid",
                                "interpreted", "median_s", "energy_j", "sqnr_db", "rel_err", "has_losses",
                                "workload", "backend", "precision", "git_branch"),
    "ix_records_run_started_at": ("run_started_at",),
    "ix_records_git_branch": ("git_branch",),
    "ix_records_workload_precision": ("workload", "precision"),
    # Schema 7: the sidebar's filter choices (device label, workload, backend, precision, branch, with counts),
    # grouped from this index alone instead of a scan of the table (fp8bench.results.store.queries.filter_options):
    # 1.45 s of CPU at a million records before it.
    "ix_records_filter_options": ("device_name", "device", "timing_mode", "workload", "backend", "precision",
                                  "git_branch"),
}
for _name, _cols in RECORD_INDEXES.items():
    sa.Index(_name, *[records_table.c[c] for c in _cols])

# Schema 3: the whole record as JSON (raw samples, telemetry, loss curves), read per run or per record on demand.
# Schemas 1 and 2 kept it in ``records.data``, where every scan of the records had to step over it.
record_data_table = sa.Table(
    "record_data", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id"), primary_key=True),
    sa.Column("data", sa.JSON, nullable=False),
)
# The records table as schemas 1 and 2 had it, for the migrations that read its JSON column.
legacy_records = sa.table("records", sa.column("id", sa.Integer), sa.column("run_id", sa.String),
                          sa.column("data", sa.JSON), sa.column("comparability_key", sa.String))

record_phases_table = sa.Table(
    "record_phases", metadata,  # schema 3: one row per record and timed phase
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id"), primary_key=True),
    sa.Column("phase", sa.String(64), primary_key=True),
    sa.Column("median_s", sa.Float),  # the phase's median time per call, seconds
)

gate_reports_table = sa.Table(
    "gate_reports", metadata,
    sa.Column("report_id", sa.String(64), primary_key=True),
    sa.Column("created_at", sa.String(40)),
    sa.Column("base_run_id", sa.String(64), index=True),
    sa.Column("cand_run_id", sa.String(64), index=True),
    sa.Column("git_commit", sa.String(64)),  # the candidate's commit
    sa.Column("verdict", sa.String(20)),  # pass | regression | inconclusive | error
    sa.Column("exit_code", sa.Integer),
    sa.Column("data", sa.JSON),  # the whole report: per-case verdicts, ratios, intervals
)


def normalize_url(target: str | Path) -> str:
    """A store target as a SQLAlchemy URL: a path or folder means SQLite; ``postgresql://`` uses psycopg 3."""
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    if "://" in text:
        return text
    path = Path(text)
    if path.is_dir() or not path.suffix:
        path = path / DEFAULT_DB_NAME
    return f"sqlite:///{path}"


class Store:
    """A results database. Use :func:`open_store`."""

    def __init__(self, engine: Engine, sqlite_file: Path | None = None, read_only: bool = False) -> None:
        self.engine = engine
        self.sqlite_file = sqlite_file if sqlite_file is not None or engine.dialect.name != "sqlite" else (
            Path(engine.url.database) if engine.url.database not in (None, "", ":memory:") else None)
        self.read_only = read_only  # opened through a read-only connection: a write fails in the database
        # For messages: the password hidden; an SQLite file by its plain name (the URL form percent-encodes it).
        self.url = (f"sqlite:///{self.sqlite_file or ':memory:'}" if engine.dialect.name == "sqlite"
                    else engine.url.render_as_string(hide_password=True))

    # -- schema ------------------------------------------------------------------------------------------------
    def stored_schema_version(self) -> int | None:
        """The schema version the database records, read without a lock or a write; ``None`` before its tables
        (or its version row) exist."""
        try:
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table(meta_table.name):
                    return None
                row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
        except sa.exc.DatabaseError as exc:
            raise StoreError(_readable(self.url, exc)) from exc
        return None if row is None else int(row[0])

    def check_current(self) -> bool:
        """Whether the schema is this fp8bench's, read without a lock (what a verb that only reads needs); a newer
        schema is refused as :meth:`ensure_schema` refuses it."""
        version = self.stored_schema_version()
        if version is not None and version > STORE_SCHEMA_VERSION:
            raise StoreError(_newer(self.url, version))
        if version == STORE_SCHEMA_VERSION:
            self.schema_version = version
            return True
        return False

    def ensure_schema(self) -> None:
        """Create the tables, or migrate them forward; refuse a newer schema. Safe with concurrent openers."""
        try:
            with self._schema_lock():
                version, migrated = self._set_up_schema()
                if migrated and self.engine.dialect.name == "sqlite":
                    # A migration rewrites tables and leaves their old pages free inside the file (a 100,000-record
                    # store grew from 221 to 417 MB); VACUUM gives them back. It cannot run inside a transaction,
                    # and runs under the lock so that no other opener writes meanwhile.
                    with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                        conn.exec_driver_sql("VACUUM")
        except sa.exc.DatabaseError as exc:
            raise StoreError(_readable(self.url, exc)) from exc
        self.schema_version = version

    def _set_up_schema(self) -> tuple[int, bool]:
        """Create or migrate the tables in one transaction: (the schema version now, whether a migration ran)."""
        migrated = False
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # A migration of a large store may outlast the statement timeout writes get (open_store).
                conn.execute(sa.text(f"SET LOCAL statement_timeout = {PG_SCHEMA_TIMEOUT_MS}"))
                if not conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _PG_SCHEMA_LOCK}).scalar():
                    print(f"fp8bench: waiting for the schema lock of {self.url}: another fp8bench process is "
                          f"creating or migrating it (giving up after {PG_SCHEMA_TIMEOUT_MS // 1000} s)",
                          file=sys.stderr, flush=True)
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
            metadata.create_all(conn)
            row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
            if row is None:
                # A database from before the meta table had rows is a version-1 database if it has records.
                version = 1 if _has_v1_records(conn) else STORE_SCHEMA_VERSION
                conn.execute(meta_table.insert().values(key="schema_version", value=str(version)))
            else:
                version = int(row[0])
            if version > STORE_SCHEMA_VERSION:
                raise StoreError(_newer(self.url, version))
            while version < STORE_SCHEMA_VERSION:
                MIGRATIONS[version](conn)
                version += 1
                migrated = True
                conn.execute(meta_table.update().where(meta_table.c.key == "schema_version")
                             .values(value=str(version)))
        return version, migrated

    @contextlib.contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """An exclusive lock file beside an SQLite database while its schema is set up (PostgreSQL locks in SQL).

        The lock file is named after the database's resolved path, so two links to one database share one lock.
        A process that finds it held says on stderr what it waits for, and gives up after
        :data:`SCHEMA_LOCK_TIMEOUT_S`."""
        if self.engine.dialect.name != "sqlite" or self.sqlite_file is None:
            yield
            return
        lock_path = Path(f"{self.sqlite_file.resolve()}.lock")
        try:
            fh = open(lock_path, "a")  # noqa: SIM115 - held for the whole block
        except OSError as exc:
            raise StoreError(f"cannot set up store {self.url}: its lock file {lock_path} cannot be created "
                             f"({exc.strerror or exc}); a verb that writes needs write access to the store's "
                             "folder (export, changes, payoff, compare and the dashboard only read)") from exc
        with fh:
            _acquire(fh, lock_path, self.url)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- writes ------------------------------------------------------------------------------------------------
    def _insert_ignore(self, conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]],
                       keys: list[str]) -> int:
        if not rows:
            return 0
        _check_values(table, rows)
        stmt = _insert_or_skip(conn, table, keys)
        result = conn.execute(stmt.returning(*[table.c[k] for k in keys]), rows)
        return len(result.fetchall())

    def add_run(self, run: dict[str, Any], source: str = "fp8bench") -> bool:
        """Insert a run header; ``False`` if that run_id is already stored."""
        with self.engine.begin() as conn:
            return self._add_run(conn, run, source)

    def _add_run(self, conn: sa.Connection, run: dict[str, Any], source: str) -> bool:
        git = run.get("git") or {}
        row = {"run_id": run["run_id"], "started_at": run.get("started_at"), "finished_at": run.get("finished_at"),
               "status": run.get("status"), "git_commit": git.get("commit"), "git_dirty": git.get("dirty"),
               "git_branch": git.get("branch"), "commit_depth": git.get("first_parent_depth"),
               "commit_time": git.get("commit_time"),
               "host": (run.get("host") or {}).get("alias"), "device": run.get("device_spec"),
               "device_name": (run.get("device") or {}).get("name"), "source": source,
               "schema_version": run.get("schema_version", SCHEMA_VERSION), "data": run}
        return self._insert_ignore(conn, runs_table, [row], ["run_id"]) == 1

    def update_run(self, run: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            self._update_run(conn, run)

    def _update_run(self, conn: sa.Connection, run: dict[str, Any]) -> None:
        conn.execute(runs_table.update().where(runs_table.c.run_id == run["run_id"]).values(
            finished_at=run.get("finished_at"), status=run.get("status"), data=run))

    def add_records(self, run_id: str, records: list[dict[str, Any]], device_name: str | None = None,
                    run: dict[str, Any] | None = None) -> int:
        """Insert records of one run; returns how many were new. ``run`` (the header) is read from the store when
        not given: the comparability key needs it."""
        with self.engine.begin() as conn:
            return self._add_records(conn, run_id, records, device_name, run)

    def _add_records(self, conn: sa.Connection, run_id: str, records: list[dict[str, Any]],
                     device_name: str | None, run: dict[str, Any] | None, first_index: int = 0) -> int:
        """Insert ``records`` (the file's records ``first_index`` on, for messages) unless stored already."""
        if run is None:
            stored = conn.execute(sa.select(runs_table.c.data).where(runs_table.c.run_id == run_id)).scalar()
            run = _as_dict(stored) if stored is not None else {}
        rows = [_record_row(run_id, r, device_name, run) for r in records]
        if not rows:
            return 0
        for offset, row in enumerate(rows):
            try:
                _check_values(records_table, [row])
            except StoreError as exc:
                raise StoreError(f"record {first_index + offset}: {exc}") from exc
        by_seq: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        for row, record in zip(rows, records, strict=True):
            if row["seq"] in by_seq:
                raise StoreError(_same_seq(run_id, row["seq"], by_seq[row["seq"]][0]["case_key"], row["case_key"]))
            by_seq[row["seq"]] = (row, record)
        inserted = self._insert_new_records(conn, rows)
        self._check_skipped(conn, run_id, by_seq, {seq for _, seq in inserted})
        if inserted:
            conn.execute(record_data_table.insert(), [{"record_id": rec_id, "data": by_seq[seq][1]}
                                                      for rec_id, seq in inserted])
        phases = [p for rec_id, seq in inserted for p in phase_rows(rec_id, by_seq[seq][1])]
        if phases:
            conn.execute(record_phases_table.insert(), phases)
        return len(inserted)

    @staticmethod
    def _check_skipped(conn: sa.Connection, run_id: str, by_seq: dict[int, tuple[dict[str, Any], dict[str, Any]]],
                       inserted: set[int]) -> None:
        """A record skipped because its ``(run_id, seq)`` is stored must be the same case as the stored one: a
        different case under the same identity is another run's record (or an edited one), never merged."""
        skipped = [seq for seq in by_seq if seq not in inserted]
        if not skipped:
            return
        # Compared on the identity columns every schema version wrote the same way (the case key's text has grown
        # suffixes over versions, so an old store's key may differ for the very same record).
        columns = [records_table.c[name] for name in _IDENTITY_COLUMNS]
        stored = {row[0]: row[1:] for row in conn.execute(
            sa.select(records_table.c.seq, records_table.c.case_key, *columns).where(
                records_table.c.run_id == run_id, records_table.c.seq.in_(skipped))).all()}
        for seq in skipped:
            if seq not in stored:
                continue
            stored_key, *stored_identity = stored[seq]
            row = by_seq[seq][0]
            if tuple(stored_identity) != tuple(row[name] for name in _IDENTITY_COLUMNS):
                raise StoreError(_same_seq(run_id, seq, stored_key, row["case_key"], stored=True))

    def _insert_new_records(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
        """Insert record rows, skipping those already stored; ``(id, seq)`` of each new one."""
        _check_values(records_table, rows)
        stmt = _insert_or_skip(conn, records_table, ["run_id", "seq"])
        result = conn.execute(stmt.returning(records_table.c.id, records_table.c.seq), rows)
        return [(int(i), int(q)) for i, q in result.fetchall()]

    def ingest_run(self, payload: dict[str, Any], source: str = "fp8bench") -> tuple[bool, int]:
        """Store a whole run file's content in one transaction (all of it or, on any error, none of it: no run row
        without its records); returns (run was new, records added). Idempotent.

        ``payload["records"]`` may be any iterable (a run file streamed record by record): records are inserted
        :data:`INGEST_BATCH` at a time, so memory does not grow with the run. Two records with the same ``seq``
        (a record without one counts as 0) are refused, and so is a stored run's header being replaced by one that
        is not further along (:func:`run_progress`): re-ingesting an older, partial copy of a finished run changes
        nothing."""
        run = payload["run"]
        with self.engine.begin() as conn:
            new_run = self._add_run(conn, {**run, "schema_version": payload.get("schema_version")}, source)
            if not new_run:
                self._advance_run(conn, run)
            device_name = (run.get("device") or {}).get("name")
            first_at: dict[int, int] = {}  # seq -> index of the record in the file that has it
            added, batch = 0, []
            for index, record in enumerate(payload["records"]):
                seq = record_seq(record)
                if seq in first_at:
                    raise StoreError(f"run {run['run_id']}: records {first_at[seq]} and {index} both have seq "
                                     f"{seq} (a record without seq counts as 0); each record of a run needs its "
                                     "own, so neither is stored")
                first_at[seq] = index
                batch.append(record)
                if len(batch) == INGEST_BATCH:
                    added += self._add_records(conn, run["run_id"], batch, device_name, run, index + 1 - len(batch))
                    batch = []
            added += self._add_records(conn, run["run_id"], batch, device_name, run, len(first_at) - len(batch))
        return new_run, added

    def _advance_run(self, conn: sa.Connection, run: dict[str, Any]) -> None:
        """Replace a stored run's header with ``run`` only when ``run`` is further along."""
        stored = conn.execute(sa.select(runs_table.c.data).where(runs_table.c.run_id == run["run_id"])).scalar()
        if run_progress(run) > run_progress(_as_dict(stored) or {}):
            self._update_run(conn, run)

    def add_gate_report(self, report: dict[str, Any]) -> bool:
        """Store a gate report (keys: report_id, created_at, base_run_id, cand_run_id, git_commit, verdict,
        exit_code, plus anything else); ``False`` if that report_id is already stored."""
        row = {k: report.get(k) for k in ("report_id", "created_at", "base_run_id", "cand_run_id", "git_commit",
                                          "verdict", "exit_code")}
        for side in ("base_run_id", "cand_run_id"):  # the rounds of `fp8bench ab`: ten ids do not fit the column
            row[side] = _run_id_range(row[side], getattr(gate_reports_table.c[side].type, "length", None) or 64)
        row["data"] = report  # every run id, in full
        with self.engine.begin() as conn:
            return self._insert_ignore(conn, gate_reports_table, [row], ["report_id"]) == 1

    # -- reads -------------------------------------------------------------------------------------------------
    def count_records(self, run_id: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(records_table)
        if run_id:
            stmt = stmt.where(records_table.c.run_id == run_id)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def runs_frame(self) -> pd.DataFrame:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table).order_by(runs_table.c.started_at)).mappings().all()
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in runs_table.columns])

    def records_frame(self, run_ids: list[str] | None = None, with_data: bool = False,
                      **equals: Any) -> pd.DataFrame:
        """Records as a DataFrame; filter by run ids and by column equality (``workload="gemm"``). With
        ``with_data``, a ``data`` column holds each record's whole JSON (raw samples included: slow on many)."""
        cols: list[Any] = list(records_table.columns)
        source: Any = records_table.join(runs_table, runs_table.c.run_id == records_table.c.run_id)
        if with_data:
            cols.append(record_data_table.c.data)
            source = source.outerjoin(record_data_table, record_data_table.c.record_id == records_table.c.id)
        stmt = sa.select(*cols, runs_table.c.started_at, runs_table.c.host).select_from(source)
        if run_ids:
            stmt = stmt.where(records_table.c.run_id.in_(run_ids))
        for name, value in equals.items():
            if name not in records_table.c:
                raise StoreError(f"unknown record column {name!r}")
            stmt = stmt.where(records_table.c[name] == value)
        stmt = stmt.order_by(runs_table.c.started_at, records_table.c.seq)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in cols] + ["started_at", "host"])

    def gate_reports_frame(self) -> pd.DataFrame:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(gate_reports_table).order_by(gate_reports_table.c.created_at)).mappings().all()
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in gate_reports_table.columns])

    def run_payload(self, run_id: str) -> dict[str, Any]:
        """A stored run back as a run-file payload (records in run order)."""
        with self.engine.connect() as conn:
            run = conn.execute(sa.select(runs_table.c.data).where(runs_table.c.run_id == run_id)).scalar_one_or_none()
            if run is None:
                raise StoreError(f"no run {run_id!r} in store {self.url}")
            recs = conn.execute(sa.select(record_data_table.c.data).join(
                records_table, records_table.c.id == record_data_table.c.record_id)
                .where(records_table.c.run_id == run_id).order_by(records_table.c.seq)).scalars().all()
        return {"schema_version": SCHEMA_VERSION, "run": _as_dict(run), "records": [_as_dict(r) for r in recs]}


def _insert_or_skip(conn: sa.Connection, table: sa.Table, keys: list[str]) -> Any:
    """``INSERT ... ON CONFLICT (keys) DO NOTHING`` in the connection's dialect."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing(index_elements=keys)
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing(index_elements=keys)
    raise StoreError(f"unsupported database dialect {conn.dialect.name}")  # pragma: no cover


def _run_id_range(ids: str | None, limit: int) -> str | None:
    """Comma-joined run ids as stored in a report column: as they are when they fit, else ``FIRST..LAST`` (the
    dashboard's run-range form; run ids sort by start time)."""
    if ids is None or len(ids) <= limit:
        return ids
    parts = ids.split(",")
    return f"{parts[0]}..{parts[-1]}"


# sa.Integer is INTEGER, four bytes, on PostgreSQL; sa.BigInteger is eight.
_INTEGER_RANGE = {sa.Integer: (-2**31, 2**31 - 1), sa.BigInteger: (-2**63, 2**63 - 1)}


def _check_values(table: sa.Table, rows: list[dict[str, Any]]) -> None:
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
_IDENTITY_COLUMNS = ("workload", "shape", "precision", "fp8_format", "backend", "device")


def record_seq(record: dict[str, Any]) -> int:
    """A record's position in its run, part of its identity in the store; a record without one is 0."""
    return int(record.get("seq") or 0)


def run_progress(run: dict[str, Any]) -> tuple[bool, bool, int]:
    """How far along a run header is: finished, then complete, then how many records it counts. A stored header is
    replaced only by one further along, so a partial copy of a run never rewinds it."""
    n_records = run.get("n_records")
    return (run.get("finished_at") is not None, run.get("status") == "complete",
            n_records if isinstance(n_records, int) and not isinstance(n_records, bool) else 0)


def _same_seq(run_id: str, seq: int, first: str, second: str, stored: bool = False) -> str:
    where = "is stored as" if stored else "is"
    return (f"run {run_id}: the record at seq {seq} {where} {first} and again {second}; a record is identified "
            "by its run and seq, so two records cannot share one (was the run file edited, or two runs given one "
            "run id?); nothing of this file was stored")


def _as_dict(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else value


def _record_row(run_id: str, r: dict[str, Any], device_name: str | None, run: dict[str, Any]) -> dict[str, Any]:
    from fp8bench.core.comparability import comparability_key, key_string

    numerics = r.get("numerics") or {}
    return {"run_id": run_id, "seq": record_seq(r), "case_key": case_key(r), "workload": r["workload"],
            "shape": label(r["shape"]), "precision": r["precision"],
            "fp8_format": r.get("fp8_format"), "backend": r["backend"], "device": r["device"],
            "device_name": device_name, "status": r["status"], "reason": r.get("reason"),
            "median_s": r.get("median_s"), "prequant_median_s": r.get("prequant_median_s"),
            "tflops": r.get("tflops"), "prequant_tflops": r.get("prequant_tflops"),
            "pct_of_peak": r.get("pct_of_peak"), "energy_j": r.get("energy_j"),
            "tflops_per_w": r.get("tflops_per_w"), "sqnr_db": numerics.get("sqnr_db"),
            "rel_err": numerics.get("rel_err"), "valid": r.get("valid", True),
            "interpreted": r.get("interpreted", False),
            "comparability_key": key_string(comparability_key(r, run)), **record_column_values(r, run)}


# Any fixed 64-bit number: the advisory lock that serializes schema setup across fp8bench processes.
_PG_SCHEMA_LOCK = 0x0F8BE7C5
# How long a process waits for another one creating or migrating the same SQLite store: a migration of a large
# store takes minutes; PostgreSQL's schema setup gets the same bound (PG_SCHEMA_TIMEOUT_MS).
SCHEMA_LOCK_TIMEOUT_S = 600.0


def _acquire(fh: Any, lock_path: Path, url: str, timeout_s: float | None = None) -> None:
    """Take the exclusive lock on ``fh``; when another process holds it, say so once and wait, up to
    ``timeout_s`` (default :data:`SCHEMA_LOCK_TIMEOUT_S`)."""
    timeout_s = SCHEMA_LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    print(f"fp8bench: waiting for {lock_path}: another fp8bench process is creating or migrating the store {url} "
          f"(giving up after {timeout_s:.0f} s)", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StoreError(f"gave up after {timeout_s:.0f} s waiting for {lock_path}, held by another process "
                                 f"setting up the store {url}; try again when it has finished") from None
            time.sleep(0.1)


def _newer(url: str, version: int) -> str:
    return (f"store {url} has schema version {version}, newer than this fp8bench understands "
            f"({STORE_SCHEMA_VERSION}); upgrade fp8bench to use it")


def _has_v1_records(conn: sa.Connection) -> bool:
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
        key = key_string(comparability_key(_readable_record(data), runs.get(run_id) or {}))
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


# Records inserted per statement by an ingest: memory stays flat however long the run.
INGEST_BATCH = 500

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
    runs: dict[str, dict[str, Any]] = {}
    for run_id, data in conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data)).all():
        runs[run_id] = run = _readable_run(data)
        git = run.get("git") or {}
        conn.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(
            git_branch=git.get("branch"), commit_depth=git.get("first_parent_depth"),
            commit_time=git.get("commit_time")))
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
            record = _readable_record(data)
            values.append({"record_id": rec_id, **record_column_values(record, runs.get(run_id) or {})})
            phases.extend(phase_rows(rec_id, record))
        conn.execute(update, values)
        if phases:
            conn.execute(_insert_or_skip(conn, record_phases_table, ["record_id", "phase"]), phases)
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
        value = profile_trace_of(_readable_record(data))
        if value is not None:
            conn.execute(records_table.update().where(records_table.c.id == rec_id).values(profile_trace=value))


REPAIRED_WHEN = "the store was migrated to schema 5"


def _checked(data: Any, problems_of: Callable[[dict[str, Any]], list[Any]]) -> tuple[dict[str, Any], bool]:
    """Stored JSON as an object with every field its readers cannot take set to null (and a note saying so), and
    whether anything was changed; see :mod:`fp8bench.results.record_check`."""
    value = _as_dict(data)
    if not isinstance(value, dict):
        return {"notes": [f"the stored JSON was {describe(value)}, not an object; dropped when {REPAIRED_WHEN}"]}, True
    problems = problems_of(value)
    if not problems:
        return value, False
    return repaired(value, problems, REPAIRED_WHEN, required=REQUIRED_FIELDS), True


def _readable_record(data: Any) -> dict[str, Any]:
    return _checked(data, record_problems)[0]


def _readable_run(data: Any) -> dict[str, Any]:
    return _checked(data, run_problems)[0]


def _migrate_4_to_5(conn: sa.Connection) -> None:
    """Repair what older versions stored without checking its shape: a record or run header field of a type its
    readers cannot take (``phases`` as a list, ``numerics`` as text, a number as text, a shape of ``"64k"``)
    becomes null, with a note in the JSON's ``notes`` (:mod:`fp8bench.results.record_check`); the repaired records' typed
    columns and phases are written again from the repaired JSON. Every record's JSON is read once, in batches."""
    runs: dict[str, dict[str, Any]] = {}
    for run_id, data in conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data)).all():
        runs[run_id], changed = _checked(data, run_problems)
        if changed:
            git = runs[run_id].get("git") or {}
            conn.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(
                data=runs[run_id], started_at=runs[run_id].get("started_at"),
                finished_at=runs[run_id].get("finished_at"), status=runs[run_id].get("status"),
                git_commit=git.get("commit"), git_dirty=git.get("dirty"), git_branch=git.get("branch"),
                commit_depth=git.get("first_parent_depth"), commit_time=git.get("commit_time"),
                host=(runs[run_id].get("host") or {}).get("alias"),
                device_name=(runs[run_id].get("device") or {}).get("name")))
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
            if not changed and run_problems(runs.get(run_id) or {}) == []:
                continue
            row = _record_row(run_id, record, device_name, runs.get(run_id) or {})
            _check_values(records_table, [row])
            conn.execute(update, [{"record_id": rec_id, **{name: row[name] for name in columns}}])
            conn.execute(record_data_table.update().where(record_data_table.c.record_id == rec_id)
                         .values(data=record))
            conn.execute(record_phases_table.delete().where(record_phases_table.c.record_id == rec_id))
            phases = phase_rows(rec_id, record)
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
        record = _readable_record(data)
        values = {name: read(record, {}) for name, read in readers.items()}
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


def _readable(url: str, exc: sa.exc.DatabaseError) -> str:
    text = redact(str(exc.orig or exc).strip().splitlines()[0])
    if "file is not a database" in text or "database disk image is malformed" in text:
        return (f"cannot open store {url}: the file is not a readable SQLite database ({text}); it may be "
                "corrupt or another kind of file. Move it aside to start a new store, or give another --store")
    return f"cannot open store {url}: {text}"


# PostgreSQL defaults that keep a stalled server (one that accepts connections but never answers, or a statement
# stuck behind a lock) from hanging a run or an ingest forever. libpq's own settings win: `connect_timeout` or
# `options` in the URL's query, or $PGCONNECT_TIMEOUT / $PGOPTIONS in the environment.
PG_CONNECT_TIMEOUT_S = 10
PG_STATEMENT_TIMEOUT_MS = 60_000
# Schema setup (creating, or migrating a large store forward, or waiting for another process doing so) gets longer.
PG_SCHEMA_TIMEOUT_MS = 600_000


def postgres_timeouts(url: sa.engine.URL) -> dict[str, Any]:
    """``connect_args`` adding the default connect and statement timeouts where the user set none."""
    args: dict[str, Any] = {}
    if "connect_timeout" not in url.query and "PGCONNECT_TIMEOUT" not in os.environ:
        args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    options = str(url.query.get("options", os.environ.get("PGOPTIONS", "")))
    if "statement_timeout" not in options:
        # Passed explicitly, `options` replaces $PGOPTIONS, so the user's own options are kept in it.
        args["options"] = f"{options} -c statement_timeout={PG_STATEMENT_TIMEOUT_MS}".strip()
    return args


def _json_text(value: Any) -> str:
    """JSON columns' serializer: NaN and infinity become null, as in run files (PostgreSQL's json type refuses
    them, which would lose a whole run's records over one non-finite statistic)."""
    return json.dumps(json_safe(value), allow_nan=False)


def _engine_url(target: str | Path, create_folder: bool = True) -> sa.engine.URL:
    """The SQLAlchemy URL of a store target. A plain path is built into the URL as a file name, so characters
    that mean something in a URL (``?``, ``#``, ``%``) stay part of the name."""
    url = normalize_url(target)
    if "://" in str(target) or not url.startswith("sqlite:///"):
        made = sa.engine.make_url(url)
        if made.get_backend_name() == "sqlite" and not made.database:
            raise StoreError(f"--store {str(target)!r} names no database file; give a path (results/fp8bench.sqlite, "
                             "or sqlite:////absolute/path.sqlite) or a postgresql:// URL")
        return made
    path = Path(url.removeprefix("sqlite:///"))
    if create_folder:
        path.parent.mkdir(parents=True, exist_ok=True)
    return sa.engine.URL.create("sqlite", database=str(path))


def open_store(target: str | Path, read_only: bool = False) -> Store:
    """Open the store at a path, folder or database URL, creating it (or migrating it forward) if needed.

    ``read_only`` is for verbs that only read (export, changes, payoff, compare, the gate's inputs, the dashboard):
    a store whose schema is current is opened without the schema lock and without writing, so a store on a
    read-only file system, or one owned by another user, can be read. An SQLite store is then opened through a
    read-only connection; a store that does not exist yet, or whose schema must first be migrated where this
    process cannot write, is a :class:`StoreError` saying so."""
    try:
        url = _engine_url(target, create_folder=not read_only)
        if read_only and url.get_backend_name() == "sqlite":
            return _open_sqlite_read_only(target, Path(str(url.database)))
        connect_args = postgres_timeouts(url) if url.get_backend_name() == "postgresql" else {}
        engine = sa.create_engine(url, future=True, connect_args=connect_args, json_serializer=_json_text)
    except (sa.exc.ArgumentError, ImportError, ValueError) as exc:  # ValueError: a URL's port is not a number
        raise StoreError(redact(f"cannot open store {str(target)!r}: {exc}")) from exc
    if engine.dialect.name == "sqlite":
        # WAL lets readers (the dashboard) run while a benchmark writes; the busy timeout serializes writers.
        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    store = Store(engine)
    if not (read_only and store.check_current()):
        store.ensure_schema()
    return store


def _open_sqlite_read_only(target: str | Path, path: Path) -> Store:
    """An SQLite store through read-only connections (see :func:`open_store`).

    SQLite reads a WAL database read-only through its ``-shm`` index; where that file is absent and cannot be
    created (a read-only file system, another user's folder), the database is opened ``immutable``: read as a
    snapshot, which is what it is there, since nothing can write it."""
    if not path.is_file():
        raise StoreError(f"no store at {path}: nothing has been stored there yet (`fp8bench run` or `fp8bench "
                         "ingest` creates it)")
    for options in ({"mode": "ro"}, {"mode": "ro", "immutable": "1"}):
        uri = sa.engine.URL.create("sqlite", database=f"file:{urllib.parse.quote(str(path.resolve()))}",
                                   query={**options, "uri": "true"})
        engine = sa.create_engine(uri, future=True, json_serializer=_json_text)
        store = Store(engine, sqlite_file=path, read_only=True)
        try:
            current = store.check_current()
        except StoreError:
            engine.dispose()
            if options.get("immutable"):
                raise
            continue
        if current:
            return store
        engine.dispose()
        break
    if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        return open_store(target)  # an older schema: migrate it, as a verb that writes would
    raise StoreError(f"store {path} has an older schema than this fp8bench reads ({STORE_SCHEMA_VERSION}), and "
                     "upgrading it needs write access that this process lacks here (a read-only file system, or "
                     "another user's store); run `fp8bench ingest` on it once where it can be written")
