"""Run files and a store written by earlier fp8bench releases, kept in ``tests/data`` as they were made, and how tests
read them: the store is opened immutable, so SQLite writes nothing beside it (no -wal or -shm) into the checkout."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
RUN_FILES = sorted((DATA / "runfiles").iterdir())  # schemas 1 and 2, each complete and killed mid-run
# A schema-2 store written by fp8bench before schema 3 (two `fp8bench run`s of 128^3 and 256^3 GEMMs in bf16,
# fp8_rowwise and mxfp8 on the torch and emulated backends, an `fp8bench converge` and an `fp8bench gate`, all on a
# CPU).
SCHEMA2_STORE = DATA / "store_schema2.sqlite"


def schema2_rows(sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects from the schema-2 store, as its database holds them."""
    with sqlite3.connect(f"file:{SCHEMA2_STORE}?immutable=1", uri=True) as conn:
        return list(conn.execute(sql))
