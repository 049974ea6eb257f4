"""Reaching a store's database: the URL a store target means, the engine with its timeouts, the lock held while a
schema is set up, and the one-line messages a database error becomes.

A path or a folder means SQLite (``fp8bench.sqlite`` inside a folder); ``postgresql://`` means PostgreSQL through
psycopg 3. SQLite sets its schema up under an exclusive ``flock`` on a ``.lock`` file beside the database;
PostgreSQL under ``pg_advisory_xact_lock``. PostgreSQL connections get a connect timeout and a statement timeout,
so a stalled server costs seconds, not a night.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from fp8bench.core.redact import redact
from fp8bench.results.errors import StoreError
from fp8bench.results.runfile import json_safe
from fp8bench.results.store.tables import STORE_SCHEMA_VERSION

DEFAULT_DB_NAME = "fp8bench.sqlite"


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


# Any fixed 64-bit number: the advisory lock that serializes schema setup across fp8bench processes.
PG_SCHEMA_LOCK = 0x0F8BE7C5


# How long a process waits for another one creating or migrating the same SQLite store: a migration of a large
# store takes minutes; PostgreSQL's schema setup gets the same bound (PG_SCHEMA_TIMEOUT_MS).
SCHEMA_LOCK_TIMEOUT_S = 600.0


def acquire_lock(fh: Any, lock_path: Path, url: str, timeout_s: float | None = None) -> None:
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


def newer_schema_error(url: str, version: int) -> str:
    return (f"store {url} has schema version {version}, newer than this fp8bench understands "
            f"({STORE_SCHEMA_VERSION}); upgrade fp8bench to use it")


def readable_error(url: str, exc: sa.exc.DatabaseError) -> str:
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


def json_text(value: Any) -> str:
    """JSON columns' serializer: NaN and infinity become null, as in run files (PostgreSQL's json type refuses
    them, which would lose a whole run's records over one non-finite statistic)."""
    return json.dumps(json_safe(value), allow_nan=False)


def engine_url(target: str | Path, create_folder: bool = True) -> sa.engine.URL:
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
