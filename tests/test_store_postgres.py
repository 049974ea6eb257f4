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
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.test_ingest_files import (  # noqa: F401 - collected again here, against PostgreSQL
    test_a_non_finite_statistic_outside_the_samples_is_stored_as_null,
    test_bad_files_are_named_and_skipped_and_bad_records_alone_are_left_out,
    test_gate_report_of_many_rounds_is_stored_with_its_run_range,
    test_nan_and_infinite_samples_are_one_line_errors_naming_the_record,
    test_over_long_ids_are_refused_in_one_line_naming_the_column,
)
from tests.test_selection import (  # noqa: F401 - collected again here, against PostgreSQL
    mixed_store,
    test_fastest_cells_take_the_fastest_non_reference_backend,
    test_latest_per_case_sql_and_frame_agree,
    test_speed_comparable_sql_frame_and_dict_forms_agree,
)
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
from tests.test_stored_data import (  # noqa: F401 - collected again here, against PostgreSQL
    test_a_different_case_under_a_stored_run_and_seq_is_refused,
    test_a_wrongly_typed_field_is_named_with_file_and_record_and_the_rest_is_ingested,
    test_an_older_partial_copy_never_rewinds_a_finished_run,
    test_an_older_store_holding_such_records_is_repaired_when_migrated,
    test_json_nested_200000_deep_is_refused_without_a_crash,
    test_the_store_refuses_on_sqlite_what_postgresql_refuses,
    test_two_records_with_one_seq_are_refused_never_merged,
)

pytestmark = pytest.mark.postgres

# A role the test server authenticates by password (scram-sha-256); see pg_server.
PASSWORD_ROLE = "fp8bench_pw"


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
        # One role must prove its password (the credential tests); every other role is trusted on loopback.
        hba = data / "pg_hba.conf"
        hba.write_text(f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
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
    from fp8bench.results.store import open_store

    opened = open_store(store_url)
    assert opened.engine.dialect.name == "postgresql" and opened.engine.dialect.driver == "psycopg"
    assert "postgresql+psycopg://" in opened.url


@pytest.fixture
def password_store(pg_server, store_url):
    """(URL without a password, the password) of a database owned by a role that must authenticate."""
    import psycopg

    if os.environ.get("FP8BENCH_TEST_POSTGRES_URL"):
        pytest.skip("an external test server: its authentication rules are not set up here")
    secret = "S3cret-" + uuid.uuid4().hex[:8]
    db = store_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {PASSWORD_ROLE}")
        conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{secret}'")
        conn.execute(f'ALTER DATABASE "{db}" OWNER TO {PASSWORD_ROLE}')
    url = store_url.replace("postgres@", f"{PASSWORD_ROLE}@")
    yield url, secret
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')  # its tables belong to the role
        conn.execute(f"DROP ROLE IF EXISTS {PASSWORD_ROLE}")


def test_password_comes_from_pgpass_or_environment_and_never_shows(password_store, tmp_path, monkeypatch):
    """libpq's conventions: ~/.pgpass (or $PGPASSFILE, mode 0600) and $PGPASSWORD; a URL password is masked."""
    from fp8bench.results.store import StoreError, open_store

    url, secret = password_store
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(StoreError) as refused:
        open_store(url)
    assert "password" in str(refused.value) and secret not in str(refused.value)

    host, port, db = url.split("@", 1)[1].replace("/", ":").split(":")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"{host}:{port}:{db}:{PASSWORD_ROLE}:{secret}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert open_store(url).count_records() == 0

    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    monkeypatch.setenv("PGPASSWORD", secret)
    assert open_store(url).count_records() == 0

    monkeypatch.delenv("PGPASSWORD")
    in_url = url.replace(f"{PASSWORD_ROLE}@", f"{PASSWORD_ROLE}:{secret}@")
    opened = open_store(in_url)
    assert secret not in opened.url and "***" in opened.url
    with pytest.raises(StoreError) as wrong:
        open_store(in_url.replace(secret, secret + "-wrong"))
    assert secret not in str(wrong.value)


def test_a_statement_stuck_behind_a_lock_times_out_into_a_store_error_line(store_url, tmp_path, capsys):
    """A store that answers the connection but not the statement: the run measures, stores what it can, and ends
    with one line naming the timeout and the ingest hint, instead of hanging."""
    import psycopg

    from fp8bench.cli import main
    from fp8bench.results.store import open_store

    open_store(store_url)  # create the schema
    fast = store_url + "?options=-c%20statement_timeout%3D1000"
    with psycopg.connect(store_url) as blocker:
        blocker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")  # held until the block ends
        started = time.monotonic()
        code = main(["run", "--shape", "64x64x64", "--precision", "bf16", "--budget", "1", "--max-time", "0.05",
                     "--no-energy", "--store", fast, "--results-dir", str(tmp_path)])
        elapsed = time.monotonic() - started
    _, err = capsys.readouterr()
    assert code == 0 and elapsed < 60
    assert "store write failed" in err and "statement timeout" in err and "fp8bench ingest" in err
    assert "[SQL:" not in err and "parameters" not in err


def test_a_role_that_may_only_read_runs_the_verbs_that_read(pg_server, store_url, tmp_path, capsys):
    """PostgreSQL's "another user": a role granted SELECT only. The verbs that read take no schema lock and write
    nothing; ingest says in one line that the store refused it."""
    import json

    import psycopg

    from fp8bench.cli import main
    from tests.gate_fixtures import payload, record

    samples = [1e-3 * (1 + i / 100) for i in range(10)]
    run = tmp_path / "r.json"
    run.write_text(json.dumps(payload("r1", [record(64, "bf16", samples)])))
    assert main(["ingest", str(run), "--store", store_url]) == 0
    role = "fp8bench_reader_" + uuid.uuid4().hex[:8]
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    reader = store_url.replace("postgres@", f"{role}@")
    try:
        capsys.readouterr()
        for args in (["export", "--format", "csv"], ["payoff"], ["changes"], ["compare", "r1", "r1"],
                     ["gate", "r1", "r1", "--no-store-report", "--report-dir", str(tmp_path / "rep")]):
            assert main([*args, "--store", reader]) == 0, (args, capsys.readouterr().err)
        capsys.readouterr()
        assert main(["ingest", str(run), "--store", reader]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "permission denied" in err and "[SQL" not in err
    finally:
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
            conn.execute(f"DROP ROLE {role}")
