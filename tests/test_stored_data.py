"""Stored data is data, whatever its shape: a record whose field has the wrong type is named (file and index) and
skipped at ingest, the rest of its run and the files after it stored, a store written by an older version that holds
such records is repaired by the migration, the store refuses on SQLite what PostgreSQL refuses, and a record's identity
(its run and seq) is unique.

The tests taking ``store_url`` also run against a real PostgreSQL server in ``test_store_postgres.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from old_data import SCHEMA2_STORE

from fp8bench.cli import main
from fp8bench.commands.verb_interface import EXIT_OK, EXIT_USAGE
from fp8bench.results.store import STORE_SCHEMA_VERSION, StoreError, normalize_url, open_store
from tests.test_ingest_files import good_run, ingest, write
from tests.test_store import copy_store


@pytest.fixture
def store_url(tmp_path):
    return str(tmp_path / "store")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# (field, bad value, words the error must contain): each one crashed ingest, the store or a reader before.
WRONG_TYPES = {
    "phases as a list": ("phases", [1e-3, 2e-3], "field 'phases' is a list of 2 item(s); expected an object"),
    "extra as text": ("extra", "see notes", "field 'extra' is text 'see notes'; expected an object"),
    "numerics as text": ("numerics", "good", "field 'numerics' is text 'good'; expected an object"),
    "a number as text": ("tflops", "1.5", "field 'tflops' is text '1.5'; expected a number"),
    "an integer beyond 64 bits": ("n", 2**70, "field 'n' is an integer of 71 bits; expected an integer of at most 64"),
    "a shape value 64k": ("shape", {"m": "64k", "n": 64, "k": 64}, "field 'shape.m' is text '64k'"),
    "a phase time as text": ("phases", {"gemm": "fast"}, "field 'phases.gemm' is text 'fast'"),
    "a convergence step as text": ("extra", {"convergence": {"max_gap_step": "7"}},
                                   "field 'extra.convergence.max_gap_step' is text '7'; expected an integer"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_wrongly_typed_field_is_named_with_file_and_record_and_the_rest_is_ingested(tmp_path, store_url,
                                                                                     capsys, case):
    field, value, words = WRONG_TYPES[case]
    bad = good_run("bad")
    bad["records"][1][field] = value
    files = [write(tmp_path / "bad.json", bad), write(tmp_path / "good.json", good_run("good"))]
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE and [r["run_id"] for r in summary["ingested"]] == ["bad", "good"]
    assert summary["errors"] == []
    first, second = summary["ingested"]
    (problem,) = first["records_skipped"]
    assert "bad.json" in problem and "record 1" in problem and words in problem
    assert first["records_added"] == 2 and first["records_in_file"] == 3 and second["records_skipped"] == []
    assert "Traceback" not in err and "[SQL" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("fp8bench ingest: record skipped: ") and "record 1" in err
    stored = open_store(store_url).records_frame()
    assert sorted(stored.loc[stored["run_id"] == "bad", "seq"]) == [0, 2]
    assert len(stored[stored["run_id"] == "good"]) == 3


def test_named_and_real_shape_values_are_accepted(tmp_path, store_url, capsys):
    """Shapes hold named choices and real numbers where a workload takes them (``op=all_gather``, ``alpha=1.2``)."""
    run = good_run("named")
    run["records"][0]["shape"] = {"op": "all_gather", "n": 1048576}
    run["records"][1]["shape"] = {"e": 8, "route": "zipf", "alpha": 1.2, "impl": "loop"}
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "named.json", run))
    assert code == EXIT_OK and summary["ingested"][0]["records_added"] == 3
    from fp8bench.core.shapes import parse_stored

    assert parse_stored("op=all_gather,n=1048576") == {"op": "all_gather", "n": 1048576}


def test_json_nested_200000_deep_is_refused_without_a_crash(tmp_path, store_url, capsys):
    text = json.dumps(good_run("deep")).replace('"extra": {}', f'"extra": {{"x": {nested(200_000)}}}', 1)
    files = [tmp_path / "deep.json", write(tmp_path / "good.json", good_run("good"))]
    files[0].write_text(text)
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE and [r["run_id"] for r in summary["ingested"]] == ["good"]
    assert "deep.json" in summary["errors"][0]["error"] and "record 0" in summary["errors"][0]["error"]
    assert "deeper than" in summary["errors"][0]["error"] and "Traceback" not in err
    # Nested beyond the checker's bound but within the parser's: the same refusal, from the record check.
    files[0].write_text(json.dumps(good_run("deep")).replace('"extra": {}', f'"extra": {{"x": {nested(500)}}}', 1))
    code, summary, _ = ingest(capsys, store_url, files[0])
    (problem,) = summary["ingested"][0]["records_skipped"]  # well-formed JSON: only the record is left out
    assert code == EXIT_USAGE and "field 'extra'" in problem and "at most 64 levels" in problem


def test_a_run_header_whose_gpu_is_no_object_is_named_where_it_enters(tmp_path, store_url, capsys):
    """The comparability key reads the header's ``gpu`` object: one that is no object is refused by name at ingest,
    not met by every later reader of the store."""
    bad = good_run("bad-gpu")
    bad["run"]["gpu"] = 5
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "g.json", bad))
    assert code == EXIT_USAGE
    assert "run header: field 'gpu' is int 5; expected an object" in summary["errors"][0]["error"]


def test_a_run_header_field_of_the_wrong_type_is_named(tmp_path, store_url, capsys):
    bad = good_run("bad-header")
    bad["run"]["git"]["first_parent_depth"] = "12"
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "h.json", bad))
    assert code == EXIT_USAGE
    assert "run header: field 'git.first_parent_depth' is text '12'; expected an integer" in \
        summary["errors"][0]["error"]


@pytest.mark.parametrize(("column", "value", "words"), [
    ("n", "abc", "records.n is text 'abc'; the store keeps an integer"),
    ("n", 2**40, "records.n is int 1099511627776; the store keeps an integer from -2147483648 to 2147483647"),
    ("tflops", "1.5", "records.tflops is text '1.5'; the store keeps a number"),
    ("valid", "yes", "records.valid is text 'yes'; the store keeps true or false"),
])
def test_the_store_refuses_on_sqlite_what_postgresql_refuses(store_url, column, value, words):
    """The store API (what `fp8bench run` writes through) checks each typed column's value itself: PostgreSQL
    refuses text in a number column, SQLite would keep it."""
    store = open_store(store_url)
    run = good_run("typed")
    store.add_run(run["run"])
    rec = {**run["records"][0], column: value}
    with pytest.raises(StoreError) as refused:
        store.add_records("typed", [rec])
    assert words in str(refused.value)
    assert store.count_records() == 0


# Fields an older fp8bench stored without checking them, each crashing a reader after the upgrade.
HOSTILE_JSON = {"phases": [1e-3], "extra": "text", "numerics": "good", "tflops": "1.5",
                "shape": {"m": "64k", "n": 64, "k": 64}, "energy": ["nvml"]}


def _add_hostile_legacy_record(url: str) -> None:
    """A run whose one record carries every field of :data:`HOSTILE_JSON`, stored the way a schema-2 store kept it
    (the typed columns of that time filled in, the rest in ``records.data``)."""
    engine = sa.create_engine(normalize_url(url))
    tables = sa.MetaData()
    tables.reflect(engine, only=["runs", "records"])
    rec = {**good_run("hostile")["records"][0], **HOSTILE_JSON, "seq": 0}
    run = {**good_run("hostile")["run"], "git": {"commit": "c0ffee", "first_parent_depth": "12"}}
    with engine.begin() as conn:
        conn.execute(tables.tables["runs"].insert().values(run_id="hostile", started_at=run["started_at"],
                                                           status="complete", data=run, schema_version=1))
        conn.execute(tables.tables["records"].insert().values(
            run_id="hostile", seq=0, case_key="gemm[m=64k,n=64,k=64] bf16 torch cpu", workload="gemm",
            shape="m=64k,n=64,k=64", precision="bf16", backend="torch", device="cpu", status="ok",
            median_s=1e-3, valid=True, interpreted=False, data=rec))
    engine.dispose()


def test_an_older_store_holding_such_records_is_repaired_when_migrated(store_url, tmp_path, capsys):
    copy_store(SCHEMA2_STORE, store_url)
    _add_hostile_legacy_record(store_url)
    store = open_store(store_url)  # schema 2 -> current: used to crash on `.items()` of the list
    assert store.schema_version == STORE_SCHEMA_VERSION
    stored = store.run_payload("hostile")
    rec, run = stored["records"][0], stored["run"]
    for field in ("phases", "extra", "numerics", "tflops", "energy"):
        assert rec[field] is None, field
    assert rec["shape"] == {"m": None, "n": 64, "k": 64}
    assert any("phases was a list of 1 item(s), not an object; set to null when the store was migrated" in note
               for note in rec["notes"])
    assert len(rec["notes"]) == len(HOSTILE_JSON) and run["git"]["first_parent_depth"] is None
    assert any(note.startswith("git.first_parent_depth was text '12'") for note in run["notes"])
    frame = store.records_frame(run_ids=["hostile"])
    assert frame["tflops"].isna().all() and frame["case_key"].iloc[0] == "gemm[m=None,n=64,k=64] bf16 torch cpu"
    # The other runs of the old store kept every record and value.
    assert store.count_records() == 27
    # Every verb that reads the store reads it.
    out = tmp_path / "all.csv"
    assert main(["export", "--store", store_url, "--format", "csv", "--out", str(out)]) == EXIT_OK
    assert "hostile" in out.read_text()
    assert main(["payoff", "--store", store_url, "--json"]) == EXIT_OK
    assert main(["changes", "--store", store_url, "--json"]) in (0, 1)
    run_file = write(tmp_path / "again.json", good_run("after-migration"))
    assert main(["ingest", str(run_file), "--store", store_url]) == EXIT_OK
    _, err = capsys.readouterr()
    assert "Traceback" not in err


# -- identity ------------------------------------------------------------------------------------------------------
def test_two_records_with_one_seq_are_refused_never_merged(tmp_path, store_url, capsys):
    twice = good_run("twice")
    twice["records"][2]["seq"] = 0
    unnumbered = good_run("unnumbered")
    for rec in unnumbered["records"]:
        del rec["seq"]
    files = [write(tmp_path / "twice.json", twice), write(tmp_path / "unnumbered.json", unnumbered)]
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE and not summary["ingested"]
    first, second = (e["error"] for e in summary["errors"])
    assert "run twice: records 0 and 2 both have seq 0" in first
    assert "run unnumbered: records 0 and 1 both have seq 0 (a record without seq counts as 0)" in second
    assert open_store(store_url).count_records() == 0 and "Traceback" not in err


def test_a_different_case_under_a_stored_run_and_seq_is_refused(tmp_path, store_url, capsys):
    first = write(tmp_path / "first.json", good_run("same-id"))
    other = good_run("same-id")
    other["records"][1]["precision"] = "fp8_rowwise"  # another case at seq 1 of the same run id
    code, _, _ = ingest(capsys, store_url, first)
    assert code == EXIT_OK
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "other.json", other))
    assert code == EXIT_USAGE
    assert ("the record at seq 1 is stored as gemm[m=65,n=65,k=65] bf16 torch cpu and again "
            "gemm[m=65,n=65,k=65] fp8_rowwise torch cpu") in summary["errors"][0]["error"]
    frame = open_store(store_url).records_frame(run_ids=["same-id"])
    assert list(frame["precision"]) == ["bf16"] * 3


def test_an_older_partial_copy_never_rewinds_a_finished_run(tmp_path, store_url, capsys):
    finished = good_run("rewind", n=4)
    finished["run"].update(finished_at="2026-11-21T01:00:00+00:00", n_records=4, n_cases=4)
    partial = good_run("rewind", n=2)
    partial["run"]["status"] = "running"
    assert ingest(capsys, store_url, write(tmp_path / "done.json", finished))[0] == EXIT_OK
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "partial.json", partial))
    assert code == EXIT_OK and summary["ingested"][0]["records_added"] == 0
    store = open_store(store_url)
    row = store.runs_frame().set_index("run_id").loc["rewind"]
    assert row["status"] == "complete" and row["finished_at"] == "2026-11-21T01:00:00+00:00"
    assert store.count_records("rewind") == 4
    # The other way round, a later copy moves the stored run forward.
    forward = tmp_path / "forward"
    forward.mkdir()
    store_b = str(tmp_path / "store-b")
    assert ingest(capsys, store_b, write(forward / "partial.json", partial))[0] == EXIT_OK
    assert ingest(capsys, store_b, write(forward / "done.json", finished))[0] == EXIT_OK
    row = open_store(store_b).runs_frame().set_index("run_id").loc["rewind"]
    assert row["status"] == "complete" and open_store(store_b).count_records("rewind") == 4



PAGES = ("overview", "roofline", "phases", "energy", "numerics", "history", "regressions", "payoff", "compare",
         "environment")


@pytest.mark.slow
def test_run_and_every_dashboard_page_work_on_a_repaired_store(tmp_path, monkeypatch, capsys):
    """The repaired store of an older version, as `run` writes into it and every page reads it."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    import fp8bench.dashboard
    from fp8bench.dashboard.data import STORE_ENV

    store = tmp_path / "store"
    copy_store(SCHEMA2_STORE, str(store))
    _add_hostile_legacy_record(str(store))
    assert main(["run", "--shape", "64x64x64", "--precision", "bf16", "--backend", "emulated", "--budget", "2",
                 "--max-time", "0.05", "--no-energy", "--store", str(store), "--results-dir", str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv(STORE_ENV, str(store))
    app = Path(fp8bench.dashboard.__file__).parent / "app.py"
    for page in PAGES:
        at = AppTest.from_file(str(app), default_timeout=120)
        at.run()
        if page != "overview":
            at.switch_page(f"views/{page}.py")
            at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
