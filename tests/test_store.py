"""The store on SQLite: idempotent ingest, queries, schema migration and refusal, corrupt files, concurrency.

The tests taking ``store_url`` also run against a real PostgreSQL server in ``test_store_postgres.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from old_data import SCHEMA2_STORE

from fp8bench.cli import main
from fp8bench.results.runfile import atomic_write_json
from fp8bench.results.store import STORE_SCHEMA_VERSION, StoreError, open_store
from tests.gate_fixtures import payload, record


@pytest.fixture
def store_url(tmp_path):
    return str(tmp_path / "store")


def make_run(run_id: str, n: int = 3, commit: str = "c0ffee") -> dict:
    return payload(run_id, [record(64 + i, "bf16", [1e-3, 1.1e-3, 0.9e-3]) for i in range(n)], commit=commit)


def test_ingest_is_idempotent_and_queries_return_frames(store_url):
    store = open_store(store_url)
    assert store.schema_version == STORE_SCHEMA_VERSION
    assert store.ingest_run(make_run("r1")) == (True, 3)
    assert store.ingest_run(make_run("r1")) == (False, 0)
    store.ingest_run(make_run("r2", n=2, commit="beef"))
    assert store.count_records() == 5 and store.count_records("r2") == 2
    frame = store.records_frame(run_ids=["r1"])
    assert list(frame["case_key"]) == [f"gemm[m={m},n={m},k={m}] bf16 torch cpu" for m in (64, 65, 66)]
    assert frame["comparability_key"].str.len().eq(24).all()
    assert set(store.runs_frame()["run_id"]) == {"r1", "r2"}
    assert len(store.records_frame(workload="gemm", precision="bf16")) == 5
    with pytest.raises(StoreError, match="unknown record column 'colour'"):
        store.records_frame(colour="red")
    back = store.run_payload("r2")
    assert back["run"]["git"]["commit"] == "beef" and [r["seq"] for r in back["records"]] == [0, 1]
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.run_payload("nope")


def test_gate_reports_round_trip(store_url):
    store = open_store(store_url)
    report = {"report_id": "g1", "created_at": "2026-11-21T00:00:00+00:00", "base_run_id": "b", "cand_run_id": "c",
              "git_commit": "abc", "verdict": "pass", "exit_code": 0, "cases": [{"case": "x", "verdict": "same"}]}
    assert store.add_gate_report(report) and not store.add_gate_report(report)
    frame = store.gate_reports_frame()
    assert len(frame) == 1 and frame.iloc[0]["verdict"] == "pass"
    data = frame.iloc[0]["data"]
    data = json.loads(data) if isinstance(data, str) else data
    assert data["cases"][0]["verdict"] == "same"


# The schema as version 1 shipped it (before records.comparability_key), to test the forward migration.
def _create_v1(url: str) -> None:
    from fp8bench.results.store import normalize_url

    engine = sa.create_engine(normalize_url(url))
    v1 = sa.MetaData()
    sa.Table("meta", v1, sa.Column("key", sa.String(64), primary_key=True), sa.Column("value", sa.Text))
    sa.Table("runs", v1, *[sa.Column(n, sa.String(128)) for n in (
        "started_at", "finished_at", "status", "git_commit", "host", "device", "device_name", "source")],
             sa.Column("run_id", sa.String(64), primary_key=True), sa.Column("git_dirty", sa.Boolean),
             sa.Column("schema_version", sa.Integer), sa.Column("data", sa.JSON))
    cols = ["case_key", "workload", "shape", "precision", "fp8_format", "backend", "device", "device_name",
            "status", "reason"]
    floats = ["median_s", "prequant_median_s", "tflops", "prequant_tflops", "pct_of_peak", "energy_j",
              "tflops_per_w", "sqnr_db", "rel_err"]
    records = sa.Table("records", v1, sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                       sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id")),
                       sa.Column("seq", sa.Integer), *[sa.Column(c, sa.String(400)) for c in cols],
                       *[sa.Column(f, sa.Float) for f in floats], sa.Column("valid", sa.Boolean),
                       sa.Column("interpreted", sa.Boolean), sa.Column("data", sa.JSON),
                       sa.UniqueConstraint("run_id", "seq"))
    sa.Table("gate_reports", v1, sa.Column("report_id", sa.String(64), primary_key=True),
             *[sa.Column(c, sa.String(64)) for c in ("created_at", "base_run_id", "cand_run_id", "git_commit",
                                                      "verdict")],
             sa.Column("exit_code", sa.Integer), sa.Column("data", sa.JSON))
    if url.startswith("sqlite") or "://" not in url:
        Path(engine.url.database).parent.mkdir(parents=True, exist_ok=True)
    v1.create_all(engine)
    run = make_run("old-run", n=2)
    with engine.begin() as conn:
        conn.execute(v1.tables["meta"].insert().values(key="schema_version", value="1"))
        conn.execute(v1.tables["runs"].insert().values(run_id="old-run", data=run["run"], schema_version=1))
        for r in run["records"]:
            conn.execute(records.insert().values(run_id="old-run", seq=r["seq"], workload="gemm", precision="bf16",
                                                 backend="torch", device="cpu", status="ok",
                                                 median_s=r["median_s"], data=r))
    engine.dispose()


def test_old_schema_is_migrated_forward(store_url):
    _create_v1(store_url)
    store = open_store(store_url)
    assert store.schema_version == STORE_SCHEMA_VERSION == 7
    frame = store.records_frame(run_ids=["old-run"])
    assert len(frame) == 2 and frame["comparability_key"].notna().all()
    # Migrated keys equal the keys a fresh ingest of the same run computes.
    store.ingest_run({**make_run("old-run-again", n=2)})
    fresh = store.records_frame(run_ids=["old-run-again"])
    assert list(frame["comparability_key"]) == list(fresh["comparability_key"])
    assert list(frame["git_commit"]) == ["c0ffee"] * 2 and list(frame["n"]) == [3, 3]  # schema 3, back-filled
    assert open_store(store_url).schema_version == 7  # reopening does not migrate again


def test_schema_3_store_gets_the_profile_trace_column_filled_from_the_json(store_url):
    run = make_run("profiled", n=2)
    run["records"][1]["extra"] = {"profile": {"tool": "torch.profiler", "trace": "/r/runs/x.profile/001.pt.trace.json"}}
    store = open_store(store_url)
    store.ingest_run(run)
    with store.engine.begin() as conn:  # back to schema 3: the column as it was before profiles existed
        conn.execute(sa.text("ALTER TABLE records DROP COLUMN profile_trace"))
        conn.execute(sa.text("UPDATE meta SET value = '3' WHERE key = 'schema_version'"))
    store.engine.dispose()
    migrated = open_store(store_url)
    assert migrated.schema_version == 7
    frame = migrated.records_frame(run_ids=["profiled"]).sort_values("seq")
    assert frame["profile_trace"].isna().iloc[0]  # no profile in its JSON
    assert frame["profile_trace"].iloc[1] == "/r/runs/x.profile/001.pt.trace.json"


def _set_version(url: str, version: int) -> None:
    store = open_store(url)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": str(version)})
    store.engine.dispose()


def test_newer_schema_is_refused_with_both_versions(store_url):
    _set_version(store_url, STORE_SCHEMA_VERSION + 7)
    with pytest.raises(StoreError, match=rf"schema version {STORE_SCHEMA_VERSION + 7}, newer than this fp8bench "
                                         rf"understands \({STORE_SCHEMA_VERSION}\)"):
        open_store(store_url)


def _ingest_proc(files: list[Path], store: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "ingest", *map(str, files), "--store", store,
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})


def concurrent_ingest(tmp_path: Path, store: str, n_records: int = 300) -> dict[str, int]:
    """Two `fp8bench ingest` processes of different runs into one new store at once; returns the counts after."""
    files = []
    for name in ("left", "right"):
        f = tmp_path / f"{name}.json"
        atomic_write_json(f, make_run(f"run-{name}", n=n_records))
        files.append(f)
    # Each process also re-ingests the other's file, so the two race on the same rows as well.
    procs = [_ingest_proc([files[0], files[1]], store), _ingest_proc([files[1], files[0]], store)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    s = open_store(store)
    with s.engine.connect() as conn:
        distinct = conn.execute(sa.text("SELECT COUNT(*) FROM (SELECT DISTINCT run_id, seq FROM records) d")).scalar()
        runs = conn.execute(sa.text("SELECT COUNT(*) FROM runs")).scalar()
    return {"records": s.count_records(), "distinct": int(distinct), "runs": int(runs),
            "left": s.count_records("run-left"), "right": s.count_records("run-right")}


# Each run file holds this many records: nothing lost means all of them, nothing doubled means no more.
EXPECTED_AFTER_RACE = {"records": 600, "distinct": 600, "runs": 2, "left": 300, "right": 300}


@pytest.mark.slow
def test_two_concurrent_ingest_processes_lose_nothing(tmp_path, store_url):
    assert concurrent_ingest(tmp_path, store_url) == EXPECTED_AFTER_RACE


def test_corrupt_sqlite_file_gives_a_readable_error(tmp_path, capsys):
    bad = tmp_path / "store" / "fp8bench.sqlite"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a database, just bytes\n" * 100)
    with pytest.raises(StoreError, match="not a readable SQLite database"):
        open_store(bad)
    f = tmp_path / "run.json"
    atomic_write_json(f, make_run("r"))
    assert main(["ingest", str(f), "--store", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a readable SQLite database" in err and "Traceback" not in err


def test_ingest_cli_refuses_newer_and_corrupt_files_but_keeps_the_rest(tmp_path, capsys):
    good, newer, broken = tmp_path / "good.json", tmp_path / "newer.json", tmp_path / "broken.json"
    atomic_write_json(good, make_run("good"))
    atomic_write_json(newer, {**make_run("newer"), "schema_version": 99})
    broken.write_text('{"schema_version": 1, "run": {"run_id": ')
    store = str(tmp_path / "store")
    assert main(["ingest", str(newer), str(broken), str(good), "--store", store, "--json"]) == 2
    captured = capsys.readouterr()
    assert "schema version 99, newer than this fp8bench understands" in captured.err
    assert "not valid JSON" in captured.err
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert [r["run_id"] for r in out["ingested"]] == ["good"] and len(out["errors"]) == 2
    assert open_store(store).count_records() == 3


def test_bad_store_url_is_a_clear_error():
    with pytest.raises(StoreError, match="cannot open store"):
        open_store("nosuchdb://x/y")



def copy_store(source: Path, url: str) -> None:
    """Copy every table of an SQLite store, as it is (its schema and rows), into the database at ``url``."""
    from fp8bench.results.store import normalize_url

    # Opened immutable: SQLite then writes nothing beside the file (no -wal or -shm), so a store kept in the
    # checkout stays as committed while tests read it.
    src = sa.create_engine(f"sqlite:///file:{source}?immutable=1&uri=true")
    tables = sa.MetaData()
    tables.reflect(src)
    dst = sa.create_engine(normalize_url(url))
    if dst.dialect.name == "sqlite":
        Path(dst.url.database).parent.mkdir(parents=True, exist_ok=True)
    tables.create_all(dst)
    with src.connect() as read, dst.begin() as write:
        for table in tables.sorted_tables:
            rows = [dict(r) for r in read.execute(sa.select(table)).mappings()]
            if rows:
                write.execute(table.insert(), rows)
        if dst.dialect.name == "postgresql":  # rows came with their ids: move the id sequence past them
            write.execute(sa.text("SELECT setval(pg_get_serial_sequence('records', 'id'), "
                                  "(SELECT MAX(id) FROM records))"))
    src.dispose()
    dst.dispose()


def _counts(url: str) -> dict[str, int]:
    from fp8bench.results.store import normalize_url

    engine = sa.create_engine(normalize_url(url))
    with engine.connect() as conn:
        out = {t: int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
               for t in ("runs", "records", "gate_reports")}
        out["version"] = int(conn.execute(sa.text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar_one())
    engine.dispose()
    return out


def test_a_schema_2_store_is_migrated_to_typed_columns_without_losing_a_record(store_url):
    from fp8bench.core.records import load_record
    from fp8bench.core.run_header import load_header
    from fp8bench.results.store.columns import RECORD_COLUMNS, record_column_values

    copy_store(SCHEMA2_STORE, store_url)
    before = _counts(store_url)
    assert before == {"runs": 3, "records": 26, "gate_reports": 1, "version": 2}
    store = open_store(store_url)
    assert store.schema_version == 7
    assert _counts(store_url) == {**before, "version": STORE_SCHEMA_VERSION}
    frame = store.records_frame(with_data=True)
    runs = {r.run_id: load_header(json.loads(r.data) if isinstance(r.data, str) else r.data, r.schema_version)
            for r in store.runs_frame().itertuples()}
    for row in frame.itertuples():
        record = json.loads(row.data) if isinstance(row.data, str) else row.data
        expected = record_column_values(load_record(record), runs[row.run_id])
        got = {c.name: getattr(row, c.name) for c in RECORD_COLUMNS}
        for name, value in expected.items():
            if value is None:
                assert got[name] is None or got[name] != got[name], name  # None or NaN
            else:
                assert got[name] == pytest.approx(value) if isinstance(value, float) else got[name] == value, name
    assert set(frame["git_branch"]) == {"main"} and frame["run_started_at"].notna().all()
    assert frame["has_losses"].sum() == 2 and set(frame.loc[frame["has_losses"], "conv_verdict"]) == {"baseline", "ok"}
    with store.engine.connect() as conn:
        phases = conn.execute(sa.text("SELECT COUNT(*) FROM record_phases")).scalar_one()
    stored = [json.loads(d) if isinstance(d, str) else d for d in frame["data"]]
    assert phases == sum(len(r.get("phases") or {}) for r in stored) > 0
    if store.engine.dialect.name == "sqlite":  # the pages the migration freed were given back (VACUUM)
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA freelist_count").scalar_one() == 0
    # The migrated store takes new runs, and their typed columns come from the same code.
    store.ingest_run(make_run("after-migration", n=2))
    assert _counts(store_url)["records"] == before["records"] + 2
    assert open_store(store_url).schema_version == 7


# -- PostgreSQL timeouts: a stalled server never hangs a run or an ingest -------------------------------------------
def test_postgres_gets_default_timeouts_unless_the_url_or_environment_sets_its_own(monkeypatch):
    from fp8bench.results.store import PG_CONNECT_TIMEOUT_S, PG_STATEMENT_TIMEOUT_MS, postgres_timeouts

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("PGOPTIONS", raising=False)
    url = sa.engine.make_url
    assert postgres_timeouts(url("postgresql://u@h/db")) == {
        "connect_timeout": PG_CONNECT_TIMEOUT_S, "options": f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS}"}
    # the URL's own settings win; other options the user passed are kept
    assert postgres_timeouts(url("postgresql://u@h/db?connect_timeout=3&options=-c%20statement_timeout%3D500")) == {}
    assert postgres_timeouts(url("postgresql://u@h/db?options=-c%20work_mem%3D64MB")) == {
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "options": f"-c work_mem=64MB -c statement_timeout={PG_STATEMENT_TIMEOUT_MS}"}
    # so do libpq's environment variables
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "5")
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=2000")
    assert postgres_timeouts(url("postgresql://u@h/db")) == {}


def test_a_server_that_accepts_but_never_answers_is_a_store_error_within_the_connect_timeout(tmp_path, capsys,
                                                                                            monkeypatch):
    """The kernel completes the TCP handshake on a listening socket that nobody reads: libpq waits for the server's
    first message until the default connect timeout (libpq's own default is to wait forever), and ingest ends with
    the store error instead of hanging. The default is lowered here from 10 s to libpq's minimum, 2 s, so that the
    wait is short; that 10 s is the default is checked above."""
    import socket
    import time

    from fp8bench.results.store import engine

    pytest.importorskip("psycopg")
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(engine, "PG_CONNECT_TIMEOUT_S", 2)
    run = tmp_path / "run.json"
    run.write_text(json.dumps(make_run("stalled")))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"postgresql://bench@127.0.0.1:{listener.getsockname()[1]}/fp8bench"
        started = time.monotonic()
        code = main(["ingest", str(run), "--store", url])
        took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and "cannot open store" in err
    assert took < 30, f"ingest took {took:.1f} s against a 2 s connect timeout"


def test_schema_5_store_gets_host_time_and_device_state_columns(store_url):
    run = make_run("gpu", n=2)
    run["records"][1].update(sm_clock_mhz=1980.0, host_median_s=2e-3, launch_overhead_s=1e-3,
                             telemetry={"timing": {"power_w": {"min": 600.0, "median": 650.0, "max": 700.0}}})
    store = open_store(store_url)
    store.ingest_run(run)
    fresh = store.records_frame(run_ids=["gpu"]).sort_values("seq")
    assert list(fresh["launch_overhead_s"].fillna(-1)) == [-1, 1e-3] and fresh["timed_power_w"].iloc[1] == 650.0
    with store.engine.begin() as conn:  # back to schema 5: the columns as they were before
        for column in ("host_median_s", "launch_overhead_s", "sm_clock_mhz", "timed_power_w"):
            conn.execute(sa.text(f"ALTER TABLE records DROP COLUMN {column}"))
        conn.execute(sa.text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
    store.engine.dispose()
    migrated = open_store(store_url)
    assert migrated.schema_version == 7
    frame = migrated.records_frame(run_ids=["gpu"]).sort_values("seq")
    assert frame["sm_clock_mhz"].isna().iloc[0] and frame["sm_clock_mhz"].iloc[1] == 1980.0
    assert frame["timed_power_w"].iloc[1] == 650.0 and frame["launch_overhead_s"].iloc[1] == 1e-3
