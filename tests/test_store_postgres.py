"""The store against a real PostgreSQL server on loopback.

The server comes from ``$FP8BENCH_TEST_POSTGRES_URL`` when set (each test then gets its own fresh database on it),
or is started here for the session: ``initdb`` into a temporary folder (as the ``postgres`` user when running as
root, since PostgreSQL refuses to run as root), ``pg_ctl start`` on a free 127.0.0.1 port, and stopped at the end.
Without the server binaries the tests skip, or fail in CI (``FP8BENCH_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.test_store import (  # noqa: F401 - collected again here, against PostgreSQL
    EXPECTED_AFTER_RACE,
    concurrent_ingest,
    test_a_schema_2_store_is_migrated_to_typed_columns_without_losing_a_record,
    test_gate_reports_round_trip,
    test_ingest_is_idempotent_and_queries_return_frames,
    test_newer_schema_is_refused_with_both_versions,
    test_old_schema_is_migrated_forward,
)
from tests.test_store_queries import (  # noqa: F401 - collected again here, against PostgreSQL
    store,
    test_filters_counts_and_options,
    test_fingerprint_moves_with_every_new_run,
    test_latest_per_class_matches_pandas,
)

pytestmark = pytest.mark.postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="session")
def pg_server():
    """A URL of a PostgreSQL server's maintenance database (``.../postgres``)."""
    given = os.environ.get("FP8BENCH_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    bindir = _bin_dir()
    if bindir is None:
        skip_or_fail("PostgreSQL server binaries (initdb, pg_ctl) not found; install postgresql or set "
                     "FP8BENCH_TEST_POSTGRES_URL")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        skip_or_fail("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
    tmp = Path(tempfile.mkdtemp(prefix="fp8bench-pg-"))
    data, log = tmp / "data", tmp / "server.log"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    port = _free_port()
    try:
        subprocess.run(_as_server_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                                        "--no-sync", "-E", "UTF8"]), check=True, capture_output=True, timeout=120)
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                        "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {tmp} -c fsync=off",
                                        "start"]), check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        server_log = log.read_text() if log.exists() else ""
        shutil.rmtree(tmp, ignore_errors=True)
        skip_or_fail(f"could not start PostgreSQL: {exc}: {detail.decode(errors='replace')} {server_log[-500:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def store_url(pg_server):
    """A fresh, empty database on the server for each test."""
    import psycopg

    name = "fp8bench_test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_server.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_two_concurrent_ingest_processes_into_postgres(tmp_path, store_url):
    """Must-show: two `fp8bench ingest` processes of different runs into one new database, then a count."""
    assert concurrent_ingest(tmp_path, store_url) == EXPECTED_AFTER_RACE


def test_postgres_url_is_normalized_to_psycopg3(store_url):
    from fp8bench.store import open_store

    opened = open_store(store_url)
    assert opened.engine.dialect.name == "postgresql" and opened.engine.dialect.driver == "psycopg"
    assert "postgresql+psycopg://" in opened.url
