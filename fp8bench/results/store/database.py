"""The results database behind :func:`open_store`: runs and records written idempotently, read back as pandas
DataFrames, and the schema created or migrated when a store is opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fp8bench.core.records import SCHEMA_VERSION, Record, load_record
from fp8bench.core.redact import redact
from fp8bench.core.run_header import RunHeader, load_header
from fp8bench.results.errors import StoreError
from fp8bench.results.store.columns import phase_rows
from fp8bench.results.store.engine import (
    PG_SCHEMA_LOCK,
    PG_SCHEMA_TIMEOUT_MS,
    acquire_lock,
    engine_url,
    json_text,
    newer_schema_error,
    postgres_timeouts,
    readable_error,
)
from fp8bench.results.store.migrations import MIGRATIONS, has_v1_records
from fp8bench.results.store.rows import (
    IDENTITY_COLUMNS,
    as_dict,
    check_values,
    insert_or_skip,
    record_row,
    record_seq,
    run_columns,
    run_progress,
    same_seq,
)
from fp8bench.results.store.tables import (
    STORE_SCHEMA_VERSION,
    gate_reports_table,
    meta_table,
    metadata,
    record_data_table,
    record_phases_table,
    records_table,
    runs_table,
)


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
            raise StoreError(readable_error(self.url, exc)) from exc
        return None if row is None else int(row[0])

    def check_current(self) -> bool:
        """Whether the schema is this fp8bench's, read without a lock (what a verb that only reads needs); a newer
        schema is refused as :meth:`ensure_schema` refuses it."""
        version = self.stored_schema_version()
        if version is not None and version > STORE_SCHEMA_VERSION:
            raise StoreError(newer_schema_error(self.url, version))
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
            raise StoreError(readable_error(self.url, exc)) from exc
        self.schema_version = version

    def _set_up_schema(self) -> tuple[int, bool]:
        """Create or migrate the tables in one transaction: (the schema version now, whether a migration ran)."""
        migrated = False
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # A migration of a large store may outlast the statement timeout writes get (open_store).
                conn.execute(sa.text(f"SET LOCAL statement_timeout = {PG_SCHEMA_TIMEOUT_MS}"))
                if not conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": PG_SCHEMA_LOCK}).scalar():
                    print(f"fp8bench: waiting for the schema lock of {self.url}: another fp8bench process is "
                          f"creating or migrating it (giving up after {PG_SCHEMA_TIMEOUT_MS // 1000} s)",
                          file=sys.stderr, flush=True)
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_SCHEMA_LOCK})
            metadata.create_all(conn)
            row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
            if row is None:
                # A database from before the meta table had rows is a version-1 database if it has records.
                version = 1 if has_v1_records(conn) else STORE_SCHEMA_VERSION
                conn.execute(meta_table.insert().values(key="schema_version", value=str(version)))
            else:
                version = int(row[0])
            if version > STORE_SCHEMA_VERSION:
                raise StoreError(newer_schema_error(self.url, version))
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
            acquire_lock(fh, lock_path, self.url)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- writes ------------------------------------------------------------------------------------------------
    def _insert_ignore(self, conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]],
                       keys: list[str]) -> int:
        if not rows:
            return 0
        check_values(table, rows)
        stmt = insert_or_skip(conn, table, keys)
        result = conn.execute(stmt.returning(*[table.c[k] for k in keys]), rows)
        return len(result.fetchall())

    def add_run(self, run: dict[str, Any], source: str = "fp8bench") -> bool:
        """Insert a run header; ``False`` if that run_id is already stored."""
        with self.engine.begin() as conn:
            return self._add_run(conn, run, source)

    def _add_run(self, conn: sa.Connection, run: dict[str, Any], source: str) -> bool:
        """Insert ``run`` (the header as the file held it, with the file's ``schema_version`` when ingested) unless
        its run is stored; the JSON is stored as given."""
        version = run.get("schema_version", SCHEMA_VERSION)
        header = load_header(run, version or SCHEMA_VERSION)
        row = {"run_id": header.run_id, **run_columns(header), "source": source, "schema_version": version,
               "data": run}
        return self._insert_ignore(conn, runs_table, [row], ["run_id"]) == 1

    def update_run(self, run: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            self._update_run(conn, run)

    def _update_run(self, conn: sa.Connection, run: dict[str, Any]) -> None:
        header = load_header(run)
        conn.execute(runs_table.update().where(runs_table.c.run_id == header.run_id).values(
            finished_at=header.finished_at, status=header.status, data=run))

    def add_records(self, run_id: str, records: list[dict[str, Any]], device_name: str | None = None,
                    run: dict[str, Any] | None = None) -> int:
        """Insert records of one run; returns how many were new. ``run`` (the header) is read from the store when
        not given: the comparability key needs it."""
        with self.engine.begin() as conn:
            return self._add_records(conn, run_id, records, device_name, None if run is None else load_header(run))

    def _add_records(self, conn: sa.Connection, run_id: str, records: list[dict[str, Any]],
                     device_name: str | None, run: RunHeader | None, first_index: int = 0) -> int:
        """Insert ``records`` (the file's records ``first_index`` on, for messages) unless stored already."""
        if run is None:
            run = _stored_header(conn, run_id) or RunHeader()
        typed = [_typed(r, first_index + i) for i, r in enumerate(records)]
        rows = [record_row(run_id, r, device_name, run) for r in typed]
        if not rows:
            return 0
        for offset, row in enumerate(rows):
            try:
                check_values(records_table, [row])
            except StoreError as exc:
                raise StoreError(f"record {first_index + offset}: {exc}") from exc
        by_seq: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        for row, record in zip(rows, records, strict=True):
            if row["seq"] in by_seq:
                raise StoreError(same_seq(run_id, row["seq"], by_seq[row["seq"]][0]["case_key"], row["case_key"]))
            by_seq[row["seq"]] = (row, record)
        inserted = self._insert_new_records(conn, rows)
        self._check_skipped(conn, run_id, by_seq, {seq for _, seq in inserted})
        if inserted:
            conn.execute(record_data_table.insert(), [{"record_id": rec_id, "data": by_seq[seq][1]}
                                                      for rec_id, seq in inserted])
        by_seq_typed = {row["seq"]: rec for row, rec in zip(rows, typed, strict=True)}
        phases = [p for rec_id, seq in inserted for p in phase_rows(rec_id, by_seq_typed[seq])]
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
        columns = [records_table.c[name] for name in IDENTITY_COLUMNS]
        stored = {row[0]: row[1:] for row in conn.execute(
            sa.select(records_table.c.seq, records_table.c.case_key, *columns).where(
                records_table.c.run_id == run_id, records_table.c.seq.in_(skipped))).all()}
        for seq in skipped:
            if seq not in stored:
                continue
            stored_key, *stored_identity = stored[seq]
            row = by_seq[seq][0]
            if tuple(stored_identity) != tuple(row[name] for name in IDENTITY_COLUMNS):
                raise StoreError(same_seq(run_id, seq, stored_key, row["case_key"], stored=True))

    def _insert_new_records(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
        """Insert record rows, skipping those already stored; ``(id, seq)`` of each new one."""
        check_values(records_table, rows)
        stmt = insert_or_skip(conn, records_table, ["run_id", "seq"])
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
        header = load_header(run, payload.get("schema_version") or SCHEMA_VERSION)
        with self.engine.begin() as conn:
            new_run = self._add_run(conn, {**run, "schema_version": payload.get("schema_version")}, source)
            if not new_run:
                self._advance_run(conn, run)
            device_name = header.device.name
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
                    added += self._add_records(conn, run["run_id"], batch, device_name, header, index + 1 - len(batch))
                    batch = []
            added += self._add_records(conn, run["run_id"], batch, device_name, header, len(first_at) - len(batch))
        return new_run, added

    def _advance_run(self, conn: sa.Connection, run: dict[str, Any]) -> None:
        """Replace a stored run's header with ``run`` only when ``run`` is further along."""
        header = load_header(run)
        if run_progress(header) > run_progress(_stored_header(conn, header.run_id) or RunHeader()):
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
            query = sa.select(gate_reports_table).order_by(gate_reports_table.c.created_at)
            rows = conn.execute(query).mappings().all()
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
        return {"schema_version": SCHEMA_VERSION, "run": as_dict(run), "records": [as_dict(r) for r in recs]}


def _typed(record: dict[str, Any], index: int) -> Record:
    """Record ``index`` of a file, typed; a value its field refuses is a :class:`StoreError` naming the record."""
    try:
        return load_record(record)
    except ValueError as exc:
        raise StoreError(f"record {index}: {exc}") from exc


def _stored_header(conn: sa.Connection, run_id: str | None) -> RunHeader | None:
    """The typed header of a stored run, read at the schema it was stored with; ``None`` if it is not stored."""
    row = conn.execute(sa.select(runs_table.c.data, runs_table.c.schema_version)
                       .where(runs_table.c.run_id == run_id)).first()
    if row is None or row.data is None:
        return None
    return load_header(as_dict(row.data), row.schema_version or SCHEMA_VERSION)


def _run_id_range(ids: str | None, limit: int) -> str | None:
    """Comma-joined run ids as stored in a report column: as they are when they fit, else ``FIRST..LAST`` (the
    dashboard's run-range form; run ids sort by start time)."""
    if ids is None or len(ids) <= limit:
        return ids
    parts = ids.split(",")
    return f"{parts[0]}..{parts[-1]}"


# Records inserted per statement by an ingest: memory stays flat however long the run.
INGEST_BATCH = 500


def open_store(target: str | Path, read_only: bool = False) -> Store:
    """Open the store at a path, folder or database URL, creating it (or migrating it forward) if needed.

    ``read_only`` is for verbs that only read (export, changes, payoff, compare, the gate's inputs, the dashboard):
    a store whose schema is current is opened without the schema lock and without writing, so a store on a
    read-only file system, or one owned by another user, can be read. An SQLite store is then opened through a
    read-only connection; a store that does not exist yet, or whose schema must first be migrated where this
    process cannot write, is a :class:`StoreError` saying so."""
    try:
        url = engine_url(target, create_folder=not read_only)
        if read_only and url.get_backend_name() == "sqlite":
            return _open_sqlite_read_only(target, Path(str(url.database)))
        connect_args = postgres_timeouts(url) if url.get_backend_name() == "postgresql" else {}
        engine = sa.create_engine(url, future=True, connect_args=connect_args, json_serializer=json_text)
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
        engine = sa.create_engine(uri, future=True, json_serializer=json_text)
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
