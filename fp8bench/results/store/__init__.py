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

Modules: ``tables`` (the schema), ``migrations``, ``engine`` (URLs, engines, locks, timeouts), ``rows`` (records
as rows), ``database`` (:class:`Store`, :func:`open_store`), ``columns`` (typed columns) and ``queries`` (reads).
"""

from fp8bench.results.errors import StoreError
from fp8bench.results.store.database import INGEST_BATCH, Store, open_store
from fp8bench.results.store.engine import (
    DEFAULT_DB_NAME,
    PG_CONNECT_TIMEOUT_S,
    PG_STATEMENT_TIMEOUT_MS,
    normalize_url,
    postgres_timeouts,
)
from fp8bench.results.store.migrations import add_missing_columns
from fp8bench.results.store.tables import (
    STORE_SCHEMA_VERSION,
    record_data_table,
    record_phases_table,
    records_table,
    runs_table,
)

__all__ = ["DEFAULT_DB_NAME", "INGEST_BATCH", "PG_CONNECT_TIMEOUT_S", "PG_STATEMENT_TIMEOUT_MS", "STORE_SCHEMA_VERSION",
           "Store", "StoreError", "add_missing_columns", "normalize_url", "open_store", "postgres_timeouts",
           "record_data_table", "record_phases_table", "records_table", "runs_table"]
